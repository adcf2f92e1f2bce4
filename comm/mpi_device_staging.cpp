#include "comm/mpi_device_staging.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <exception>
#include <utility>

#include "runtime/cuda_api.h"
#include "runtime/device_counters.h"

namespace mt {
namespace {

// A buffer's fence: the event after the last copy touching it, and the tensor that copy writes
// (its memory must not go back to the allocator while the copy may still run).
class EventFence final : public StagingFence {
 public:
  EventFence(std::shared_ptr<Event> event, Tensor keep) : event_(std::move(event)), keep_(std::move(keep)) {}
  bool done() const override { return event_->query(); }
  void wait() const override { event_->synchronize(); }

 private:
  std::shared_ptr<Event> event_;
  Tensor keep_;
};

// On the copy stream; on the CPU (the test seam, stage_host_tensors) a plain copy.
void queue_copy(void* dst, const void* src, std::size_t bytes, const Stream& stream) {
  if (stream.handle() == nullptr) {
    std::memmove(dst, src, bytes);
  } else {
    cuda::copy_async(dst, src, bytes, stream.handle());
  }
}

void select(Device device) {
  if (device.is_cuda()) cuda::set_device(device.index);  // this thread's current device
}

}  // namespace

StagingWindow staging_window(const CollectiveDesc& d) {
  StagingWindow w;
  const bool shared = d.input.defined() && d.output.defined() && d.input.same_storage(d.output);
  if (shared) {
    const char* in = static_cast<const char*>(d.input.data());
    const char* out = static_cast<const char*>(d.output.data());
    const char* lo = std::min(in, out);
    const char* hi = std::max(in + d.input.nbytes(), out + d.output.nbytes());
    w.copy_from = lo;
    w.bytes = w.copy_bytes = static_cast<std::size_t>(hi - lo);
    w.input_offset = static_cast<std::size_t>(in - lo);
    w.output_offset = static_cast<std::size_t>(out - lo);
    return w;
  }
  const std::size_t in_bytes = d.input.defined() ? d.input.nbytes() : 0;
  const std::size_t out_bytes = d.output.defined() ? d.output.nbytes() : 0;
  w.copy_from = in_bytes ? static_cast<const char*>(d.input.data()) : nullptr;
  w.copy_bytes = in_bytes;
  w.bytes = in_bytes + out_bytes;
  w.output_offset = in_bytes;
  return w;
}

struct MpiDeviceStaging::PerDevice {
  explicit PerDevice(Device d) : copy(d), pool(d), produced(d) {}
  std::mutex mutex;  // groups of one family may submit from different threads
  Stream copy;       // every staging copy of this device, in the order queued
  StagingPool pool;
  Event produced;  // re-recorded per op: the copy stream's wait takes the record of the moment
};

MpiDeviceStaging::MpiDeviceStaging(MpiDeviceComm mode, const Stream* compute_stream, bool stage_host_tensors)
    : mode_(mode), compute_(compute_stream), stage_host_(stage_host_tensors) {}

MpiDeviceStaging::~MpiDeviceStaging() = default;

std::shared_ptr<MpiDeviceStaging::PerDevice> MpiDeviceStaging::on(Device device) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<PerDevice>& dev = devices_[device.index];
  if (!dev) dev = std::make_shared<PerDevice>(device);
  return dev;
}

StagingPool MpiDeviceStaging::pool(Device device) { return on(device)->pool; }

void MpiDeviceStaging::order_after_producer(StagedOp& op, PerDevice* dev) {
  const bool known = compute_ != nullptr && compute_->device() == op.device_;
  if (!known) {
    // No stream to wait on: drain the device, as the sync path does (a host wait, counted).
    if (op.device_.is_cuda()) {
      cuda::synchronize_device();
      count_host_sync();
    }
    return;
  }
  if (dev == nullptr) {  // device pointers: the engine thread waits for the producer itself
    op.ready_.record(*compute_);
    op.wait_ready_ = true;
    return;
  }
  dev->produced.record(*compute_);
  dev->produced.block(dev->copy);
}

std::shared_ptr<StagedOp> MpiDeviceStaging::stage(const CollectiveDesc& d, bool device_pointers) {
  const Tensor& any = d.input.defined() ? d.input : d.output;
  const Device device = any.device();
  MT_CHECK(device.is_cuda() || stage_host_, "staging ", d.describe(), " on ", device.str());
  select(device);
  auto op = std::make_shared<StagedOp>(device, Event(device));
  if (device_pointers) {
    op->input_ = d.input.defined() ? static_cast<char*>(d.input.data()) : nullptr;
    op->output_ = d.output.defined() ? static_cast<char*>(d.output.data()) : nullptr;
    order_after_producer(*op, nullptr);
    return op;
  }
  std::shared_ptr<PerDevice> dev = on(device);
  std::lock_guard lock(dev->mutex);
  const StagingWindow w = staging_window(d);
  op->lease_ = dev->pool.acquire(w.bytes);
  char* base = op->lease_.data();
  op->input_ = d.input.defined() ? base + w.input_offset : nullptr;
  op->output_ = d.output.defined() ? base + w.output_offset : nullptr;
  op->copy_stream_ = &dev->copy;
  op->device_entry_ = dev;
  op->pool_ = dev->pool;
  // Queued behind the producer even with nothing to copy in: the result's copy back must not
  // overtake work queued before the op that still uses the output.
  order_after_producer(*op, dev.get());
  if (w.copy_bytes > 0) {
    queue_copy(base, w.copy_from, w.copy_bytes, dev->copy);
    op->ready_.record(dev->copy);
    op->wait_ready_ = true;
  }
  if (d.output.defined() && d.kind != CollectiveKind::Send && d.output.nbytes() > 0) {
    op->back_ = d.output;
    op->back_offset_ = w.output_offset;
    op->result_ = std::make_shared<Event>(device);
  }
  return op;
}

void StagedOp::before_mpi() {
  if (!wait_ready_) return;
  select(device_);
  ready_.synchronize();
}

void StagedOp::after_mpi() {
  if (!lease_.held()) return;
  select(device_);
  if (result_) {
    queue_copy(back_.data(), lease_.data() + back_offset_, back_.nbytes(), *copy_stream_);
    result_->record(*copy_stream_);
    lease_.release_after(std::make_shared<EventFence>(result_, std::exchange(back_, Tensor())));
  } else if (wait_ready_) {
    lease_.release_after(std::make_shared<EventFence>(std::make_shared<Event>(std::move(ready_)), Tensor()));
  } else {
    lease_.release();
  }
}

// An op that never reached after_mpi (it failed before MPI started, or MPI failed and the engine
// dropped it): its device->host copy may still run, so the buffer waits for it.
StagedOp::~StagedOp() {
  if (!lease_.held()) return;
  try {
    if (wait_ready_) {
      lease_.release_after(std::make_shared<EventFence>(std::make_shared<Event>(std::move(ready_)), Tensor()));
    } else {
      lease_.release();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain: warning: a staging buffer is dropped: %s\n", e.what());
  }
}

StagedWork::StagedWork(CollectiveDesc desc, std::chrono::milliseconds default_timeout,
                       std::vector<std::shared_ptr<Event>> results, StagingPool pool)
    : Work(std::move(desc), default_timeout), results_(std::move(results)), pool_(std::move(pool)) {}

void StagedWork::wait(std::chrono::milliseconds timeout) {
  Work::wait(timeout);
  for (const auto& r : results_) r->synchronize();
  // The copies have run: their buffers are free, and the output tensors their fences kept go
  // back to the allocator here, on the caller's thread, before wait returns.
  pool_.reclaim();
}

void StagedWork::wait_on(const Stream& stream) {
  Work::wait();
  if (stream.handle() == nullptr) {  // not a CUDA stream: nothing to order but the host
    for (const auto& r : results_) r->synchronize();
    pool_.reclaim();
    return;
  }
  for (const auto& r : results_) r->block(stream);
}

}  // namespace mt
