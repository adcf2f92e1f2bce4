#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <optional>

#include "comm/mpi_types.h"
#include "runtime/cuda_api.h"
#include "runtime/device_counters.h"
#include "runtime/pinned_buffer.h"
#include "runtime/ops/elementwise.h"

namespace mt {
namespace {

// Host addresses the MPI calls use. For host tensors, the tensors themselves; for device tensors,
// a pinned copy of the storage window both tensors live in (so in-place layouts stay in place), or
// with cuda-aware MPI the device addresses themselves.
struct HostView {
  char* input = nullptr;
  char* output = nullptr;
  std::shared_ptr<PinnedHostBuffer> staging;  // the sync path's, made for this op: fast DMA both ways
  std::shared_ptr<StagedOp> staged;           // the async and cuda-aware paths' (comm/mpi_device_staging.h)
};

// The sync path (MESHTRAIN_MPI_DEVICE_COMM unset): drain the device, a pinned buffer made for the
// op, copies on a stream of their own that the host waits for.
HostView stage_sync(const CollectiveDesc& d, Device device) {
  HostView v;
  // The producer of the data runs on the caller's streams: let it finish before copying out.
  cuda::set_device(device.index);
  cuda::synchronize_device();
  count_host_sync();
  const StagingWindow w = staging_window(d);
  v.staging = std::make_shared<PinnedHostBuffer>(w.bytes, device);
  if (w.bytes > 0) count_allocation();  // cudaMallocHost, every op
  if (w.copy_bytes > 0) copy_bytes(v.staging->data(), Device::cpu(), w.copy_from, device, w.copy_bytes, Stream(device));
  v.input = d.input.defined() ? v.staging->data() + w.input_offset : nullptr;
  v.output = d.output.defined() ? v.staging->data() + w.output_offset : nullptr;
  return v;
}

// Ops that work on the data in host memory, staged even under cuda-aware: a bf16 reduction (a
// user-defined MPI_Op, whose function runs on the host), an average's division, the move of an
// in-place reduce_scatter's block (both in finish).
bool needs_host_memory(const CollectiveDesc& d) {
  const bool reduces = d.kind == CollectiveKind::Allreduce || d.kind == CollectiveKind::ReduceScatter;
  return (reduces && (d.op == ReduceOp::Avg || d.input.dtype() == DType::BF16)) ||
         (d.kind == CollectiveKind::ReduceScatter && d.in_place() && d.group_rank != 0);
}

HostView stage(const CollectiveDesc& d, MpiDeviceStaging* staging) {
  HostView v;
  const Tensor& any = d.input.defined() ? d.input : d.output;
  if (!any.defined()) return v;
  if (any.device().is_cpu() && (staging == nullptr || !staging->stages_host_tensors())) {
    v.input = d.input.defined() ? static_cast<char*>(d.input.data()) : nullptr;
    v.output = d.output.defined() ? static_cast<char*>(d.output.data()) : nullptr;
    return v;
  }
  if (staging == nullptr) return stage_sync(d, any.device());
  const bool direct = staging->mode() == MpiDeviceComm::CudaAware && !needs_host_memory(d);
  v.staged = staging->stage(d, direct);
  v.input = v.staged->input();
  v.output = v.staged->output();
  return v;
}

// Engine thread, before the MPI calls: the staged bytes must be on the host.
void before_mpi(const HostView& v) {
  if (v.staged) v.staged->before_mpi();
}

// Device tensors get the staged result back.
void unstage(const CollectiveDesc& d, const HostView& v) {
  if (v.staged) {
    v.staged->after_mpi();
    return;
  }
  if (!v.staging || !d.output.defined() || d.kind == CollectiveKind::Send) return;
  copy_bytes(d.output.data(), d.output.device(), v.output, Device::cpu(), d.output.nbytes(), Stream(d.output.device()));
}

// The Work of an op: where results come back by copies queued after MPI, one that orders them.
WorkPtr make_work(CollectiveDesc desc, std::chrono::milliseconds timeout, const std::vector<const HostView*>& views) {
  std::vector<std::shared_ptr<Event>> results;
  std::optional<StagingPool> pool;
  for (const HostView* v : views) {
    if (v->staged && v->staged->result()) {
      results.push_back(v->staged->result());
      pool = v->staged->pool();
    }
  }
  if (results.empty()) return std::make_shared<Work>(std::move(desc), timeout);
  return std::make_shared<StagedWork>(std::move(desc), timeout, std::move(results), std::move(*pool));
}

void divide(char* data, DType dtype, std::int64_t n, int divisor) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(data);
    for (std::int64_t i = 0; i < n; ++i) p[i] = narrow_to<T>(widen(p[i]) / static_cast<decltype(widen(p[i]))>(divisor));
  });
}

int checked_count(std::int64_t n, const CollectiveDesc& d) {
  MT_CHECK(n <= INT_MAX, d.describe(), ": more than 2^31-1 elements in one MPI call");
  return static_cast<int>(n);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MpiComm comm, std::shared_ptr<MpiEngine> engine, CommOptions options,
                                 std::shared_ptr<MpiDeviceStaging> staging)
    : Communicator(comm.rank(), comm.size(), options),
      control_(std::move(comm)),
      data_(std::make_shared<MpiComm>(control_.dup())),
      engine_(std::move(engine)),
      staging_(std::move(staging)),
      world_ranks_(control_.world_ranks()) {}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(CommOptions options, const Stream* compute_stream) {
  const MpiDeviceComm mode = mpi_device_comm_from_env();
  std::shared_ptr<MpiDeviceStaging> staging;
  if (mode == MpiDeviceComm::CudaAware) {
    std::string why;
    if (!mpi_cuda_aware(&why)) {
      MT_FAIL_AS(EnvironmentError, kMpiDeviceCommEnv, "=cuda-aware, but ", why, "; use async or sync instead");
    }
  }
  if (mode != MpiDeviceComm::Sync) staging = std::make_shared<MpiDeviceStaging>(mode, compute_stream);
  return std::make_unique<MpiCommunicator>(MpiComm::world().dup(), std::make_shared<MpiEngine>(options.timeout),
                                           options, std::move(staging));
}

StagingPool MpiCommunicator::staging_pool(Device device) const {
  MT_CHECK(staging_ != nullptr, "the sync path (", kMpiDeviceCommEnv, " unset) keeps no staging pool");
  return staging_->pool(device);
}

std::unique_ptr<Communicator> MpiCommunicator::split_by_color(int color, int key, const std::vector<int>& members) {
  MpiComm group = control_.split_by_color(color, key, members);
  if (!group.valid()) return nullptr;
  return std::make_unique<MpiCommunicator>(std::move(group), engine_, options(), staging_);
}

void MpiCommunicator::allgather_host_bytes(const void* mine, void* all, std::size_t bytes) {
  MT_MPI_CHECK(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, control_.get()));
}

WorkPtr MpiCommunicator::launch_batch(CollectiveDesc desc) {
  // Each message as a send or receive of its own, staged like one: device tensors go through
  // pinned host memory, copied in now and out once every message of the batch has completed.
  struct Message {
    CollectiveDesc part;
    HostView view;
    MPI_Datatype type;
  };
  auto messages = std::make_shared<std::vector<Message>>();
  messages->reserve(desc.messages.size());
  for (const PointToPoint& m : desc.messages) {
    const bool send = m.kind == PointToPoint::Kind::Send;
    CollectiveDesc part;
    part.kind = send ? CollectiveKind::Send : CollectiveKind::Recv;
    part.sequence = desc.sequence;
    part.group_size = desc.group_size;
    part.group_rank = desc.group_rank;
    part.where = desc.where;
    (send ? part.input : part.output) = m.tensor;
    part.peer = m.peer;
    part.tag = m.tag;
    checked_count(m.tensor.numel(), desc);
    HostView view = stage(part, staging_.get());
    messages->push_back(Message{std::move(part), std::move(view), mpi_datatype(m.tensor.dtype())});
  }
  std::vector<const HostView*> views;
  for (const Message& m : *messages) views.push_back(&m.view);
  WorkPtr work = make_work(std::move(desc), options().wait_limit(), views);
  MpiTask task;
  task.work = work;
  // Started in the caller's order, so per peer (and tag) they match the other side's in order.
  task.start = [messages, data = data_](std::vector<MPI_Request>& requests) {
    const MPI_Comm comm = data->get();
    for (const Message& m : *messages) before_mpi(m.view);
    for (const Message& m : *messages) {
      MPI_Request req = MPI_REQUEST_NULL;
      if (m.part.kind == CollectiveKind::Send) {
        const int n = static_cast<int>(m.part.input.numel());
        MT_MPI_CHECK(MPI_Isend(m.view.input, n, m.type, m.part.peer, m.part.tag, comm, &req));
      } else {
        const int n = static_cast<int>(m.part.output.numel());
        MT_MPI_CHECK(MPI_Irecv(m.view.output, n, m.type, m.part.peer, m.part.tag, comm, &req));
      }
      requests.push_back(req);
    }
  };
  task.finish = [messages]() {
    for (const Message& m : *messages) unstage(m.part, m.view);
  };
  engine_->submit(std::move(task));
  return work;
}

WorkPtr MpiCommunicator::launch(CollectiveDesc desc) {
  if (desc.kind == CollectiveKind::Batch) return launch_batch(std::move(desc));
  const Tensor& any = desc.input.defined() ? desc.input : desc.output;
  const DType dtype = any.defined() ? any.dtype() : DType::F32;
  // Created here, on the caller's thread, before the engine thread needs them.
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Op op = mpi_reduce_op(desc.op, dtype);
  auto view = std::make_shared<HostView>(stage(desc, staging_.get()));
  WorkPtr work = make_work(desc, options().wait_limit(), {view.get()});
  const int size = this->size();
  const int rank = this->rank();
  const std::size_t esize = dtype_size(dtype);

  MpiTask task;
  task.work = work;
  task.start = [desc, view, type, op, data = data_, size](std::vector<MPI_Request>& requests) {
    const MPI_Comm comm = data->get();
    before_mpi(*view);
    MPI_Request req = MPI_REQUEST_NULL;
    const bool in_place = desc.in_place();
    char* in = view->input;
    char* out = view->output;
    switch (desc.kind) {
      case CollectiveKind::Allreduce: {
        const int n = checked_count(desc.output.numel(), desc);
        MT_MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : in, out, n, type, op, comm, &req));
        break;
      }
      case CollectiveKind::ReduceScatter: {
        const int n = checked_count(desc.output.numel(), desc);
        // MPI leaves an in-place result at the start of the buffer; finish() moves it to our block.
        if (in_place) {
          MT_MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, in, n, type, op, comm, &req));
        } else {
          MT_MPI_CHECK(MPI_Ireduce_scatter_block(in, out, n, type, op, comm, &req));
        }
        break;
      }
      case CollectiveKind::Allgather: {
        const int n = checked_count(desc.input.numel(), desc);
        if (in_place) {
          MT_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, type, comm, &req));
        } else {
          MT_MPI_CHECK(MPI_Iallgather(in, n, type, out, n, type, comm, &req));
        }
        break;
      }
      case CollectiveKind::Broadcast: {
        const int n = checked_count(desc.output.numel(), desc);
        MT_MPI_CHECK(MPI_Ibcast(out, n, type, desc.root, comm, &req));
        break;
      }
      case CollectiveKind::Alltoall: {
        const int n = checked_count(desc.input.numel() / size, desc);
        MT_MPI_CHECK(MPI_Ialltoall(in, n, type, out, n, type, comm, &req));
        break;
      }
      case CollectiveKind::Send: {
        const int n = checked_count(desc.input.numel(), desc);
        MT_MPI_CHECK(MPI_Isend(in, n, type, desc.peer, desc.tag, comm, &req));
        break;
      }
      case CollectiveKind::Recv: {
        const int n = checked_count(desc.output.numel(), desc);
        MT_MPI_CHECK(MPI_Irecv(out, n, type, desc.peer, desc.tag, comm, &req));
        break;
      }
      case CollectiveKind::Barrier: MT_MPI_CHECK(MPI_Ibarrier(comm, &req)); break;
      case CollectiveKind::Batch: MT_CHECK(false, "a batch goes through launch_batch"); break;
    }
    requests.push_back(req);
  };
  task.finish = [desc, view, size, rank, esize, dtype]() {
    if (desc.kind == CollectiveKind::ReduceScatter && desc.in_place() && rank != 0) {
      std::memmove(view->output, view->input, static_cast<std::size_t>(desc.output.numel()) * esize);
    }
    if (desc.op == ReduceOp::Avg &&
        (desc.kind == CollectiveKind::Allreduce || desc.kind == CollectiveKind::ReduceScatter)) {
      divide(view->output, dtype, desc.output.numel(), size);
    }
    unstage(desc, *view);
  };
  engine_->submit(std::move(task));
  return work;
}

}  // namespace mt
