// The MPI backend: works on host memory directly and stages device memory through pinned host
// buffers (or, with MESHTRAIN_MPI_DEVICE_COMM, through cached ones or none: comm/mpi_device_comm.h);
// every op runs on the shared communication thread (MpiEngine), so the caller blocks only in
// Work::wait.
// defines: MpiCommunicator
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/mpi_device_staging.h"
#include "comm/mpi_engine.h"
#include "comm/mpi_runtime.h"

namespace mt {

class MpiCommunicator final : public Communicator {
 public:
  // `comm` becomes this communicator's; the engine may be shared by every communicator of the process.
  // `staging`: how device tensors move when not by the sync path (nullptr: sync), shared likewise.
  MpiCommunicator(MpiComm comm, std::shared_ptr<MpiEngine> engine, CommOptions options,
                  std::shared_ptr<MpiDeviceStaging> staging = nullptr);
  // Reads MESHTRAIN_MPI_DEVICE_COMM once, here: groups split from it keep the choice. Device tensors'
  // producers and consumers run on `compute_stream` (nullptr: not known, every op on device tensors
  // drains the device first); it must outlive the communicator. cuda-aware on an MPI without CUDA
  // support is an EnvironmentError saying why.
  static std::unique_ptr<MpiCommunicator> world(CommOptions options = {}, const Stream* compute_stream = nullptr);

  MpiDeviceComm device_comm() const { return staging_ ? staging_->mode() : MpiDeviceComm::Sync; }
  // The async path's staging pool for `device` (for counters and tests); needs a non-sync mode.
  StagingPool staging_pool(Device device) const;

  std::string backend_name() const override { return "mpi"; }
  // Every op is non-blocking and progressed on the engine thread, so receives may be posted early
  // and neighbours may send and receive in any order, alone or in batches; device tensors are
  // staged (see stage()).
  CommCapabilities capabilities() const override {
    return {.early_receives = true,
            .unordered_point_to_point = true,
            .grouped_point_to_point = true,
            .host_memory = MemoryAccess::Direct,
            .device_memory = MemoryAccess::Staged};
  }
  std::vector<int> world_ranks() const override { return world_ranks_; }

 protected:
  WorkPtr launch(CollectiveDesc desc) override;
  std::unique_ptr<Communicator> split_by_color(int color, int key, const std::vector<int>& members) override;
  void allgather_host_bytes(const void* mine, void* all, std::size_t bytes) override;

 private:
  WorkPtr launch_batch(CollectiveDesc desc);

  MpiComm control_;                // splits and checks, from the caller's thread
  std::shared_ptr<MpiComm> data_;  // the operations, from the engine thread only; every op holds it
                                   // alive, so dropping the communicator mid-op is safe
  std::shared_ptr<MpiEngine> engine_;
  std::shared_ptr<MpiDeviceStaging> staging_;  // nullptr: the sync path
  std::vector<int> world_ranks_;
};

}  // namespace mt
