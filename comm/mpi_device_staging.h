// The MPI backend's async and cuda-aware paths for device tensors (comm/mpi_device_comm.h).
// async: the op's bytes go through a pinned buffer from a pool cached per device by the
// communicator family (comm/staging_pool.h). On the caller's thread, the copy stream waits on an
// event recorded on the compute stream (the producer), copies device->host and records `ready`;
// the engine thread waits for `ready` before MPI starts, and once MPI is done copies the result
// host->device on the copy stream and records `result`; the buffer goes back to the pool once
// `result` has passed. No device sync, no allocation at steady state.
// cuda-aware: MPI gets the device pointers, after the engine thread has waited for the producer.
// Without a known compute stream, an op drains the device first (as the sync path does).
// defines: StagingWindow, staging_window, StagedOp, MpiDeviceStaging, StagedWork
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_device_comm.h"
#include "comm/staging_pool.h"
#include "runtime/stream.h"

namespace mt {

// Where an op's tensors sit in one host buffer: when they share storage, the window from the
// lower start to the higher end of the two (in-place layouts stay in place); else input first,
// then output. The bytes copied in are the first `copy_bytes` of the buffer, from `copy_from`.
struct StagingWindow {
  const char* copy_from = nullptr;  // device address
  std::size_t copy_bytes = 0;
  std::size_t bytes = 0;  // of the host buffer
  std::size_t input_offset = 0;
  std::size_t output_offset = 0;
};
StagingWindow staging_window(const CollectiveDesc& d);

// One op's (or one batch message's) device side. Made on the caller's thread; before_mpi and
// after_mpi run on the engine thread.
class StagedOp {
 public:
  StagedOp(Device device, Event ready) : device_(device), ready_(std::move(ready)) {}
  ~StagedOp();
  StagedOp(const StagedOp&) = delete;
  StagedOp& operator=(const StagedOp&) = delete;

  char* input() const { return input_; }
  char* output() const { return output_; }
  // Blocks until the bytes MPI reads are on the host (or, with device pointers, the producer ran).
  void before_mpi();
  // Queues the result's copy back to the device (unless nothing comes back) and hands the buffer
  // back to the pool for when that copy has run.
  void after_mpi();
  // Recorded by after_mpi after the result's copy; nullptr where nothing comes back.
  const std::shared_ptr<Event>& result() const { return result_; }
  Device device() const { return device_; }
  // The pool its buffer came from (unset with device pointers).
  const std::optional<StagingPool>& pool() const { return pool_; }

 private:
  friend class MpiDeviceStaging;
  Device device_;
  char* input_ = nullptr;
  char* output_ = nullptr;
  Event ready_;
  bool wait_ready_ = false;
  Stream* copy_stream_ = nullptr;  // the family's, alive while any op holds the pool's device entry
  std::shared_ptr<void> device_entry_;
  std::optional<StagingPool> pool_;
  StagingPool::Lease lease_;
  Tensor back_;  // the tensor the result goes back into (kept alive until that copy has run)
  std::size_t back_offset_ = 0;
  std::shared_ptr<Event> result_;
};

// Shared by a communicator and every group split from it: one copy stream and one pool per device.
class MpiDeviceStaging {
 public:
  // `compute_stream`: where the tensors' producers and consumers run (may be nullptr: not known).
  // stage_host_tensors: a test seam, staging host tensors too (CPU streams and events are no-ops,
  // copies memmoves), so that the staging's offsets, copies back and pool reuse run on any machine.
  MpiDeviceStaging(MpiDeviceComm mode, const Stream* compute_stream, bool stage_host_tensors = false);
  ~MpiDeviceStaging();
  MpiDeviceStaging(const MpiDeviceStaging&) = delete;
  MpiDeviceStaging& operator=(const MpiDeviceStaging&) = delete;

  MpiDeviceComm mode() const { return mode_; }
  bool stages_host_tensors() const { return stage_host_; }
  // The caller's thread: queues what comes before MPI for an op on device tensors. device_pointers:
  // hand MPI the tensors' own addresses (cuda-aware), else stage through the pool.
  std::shared_ptr<StagedOp> stage(const CollectiveDesc& d, bool device_pointers);
  // The pool of `device` (made on first use), for counters and tests.
  StagingPool pool(Device device);

 private:
  struct PerDevice;
  std::shared_ptr<PerDevice> on(Device device);
  void order_after_producer(StagedOp& op, PerDevice* dev);

  MpiDeviceComm mode_;
  const Stream* compute_;
  bool stage_host_;
  std::mutex mutex_;
  std::map<int, std::shared_ptr<PerDevice>> devices_;
};

// A Work whose results come back to the device by copies queued after the MPI part: wait() blocks
// the host until the MPI part is done and then until the copies have run (the sync path's promise:
// the tensor holds the result); wait_on(stream) blocks the host for the MPI part only (MPI requests
// are host work, progressed by the engine thread) and has `stream` wait on the copies' events
// instead of the host. test() reports the MPI part (the copies are ordered by wait and wait_on).
class StagedWork final : public Work {
 public:
  StagedWork(CollectiveDesc desc, std::chrono::milliseconds default_timeout,
             std::vector<std::shared_ptr<Event>> results, StagingPool pool);
  using Work::wait;
  void wait(std::chrono::milliseconds timeout) override;
  void wait_on(const Stream& stream) override;

 private:
  std::vector<std::shared_ptr<Event>> results_;
  StagingPool pool_;
};

}  // namespace mt
