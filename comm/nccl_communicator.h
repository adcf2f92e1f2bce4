// The NCCL backend: bootstrapped through MPI (rank 0's ncclUniqueId broadcast over the group's
// MPI communicator), sub-communicators by ncclCommSplit, its own CUDA stream, and a Work backed by
// an event the compute stream can wait on. Built with the CUDA backend only.
// defines: nccl_compiled, nccl_version, make_nccl_communicator
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "runtime/cuda_api.h"

namespace mt {

bool nccl_compiled();
std::string nccl_version();  // "2.28.9", or "" where NCCL is not built in
// Collective over `comm`: every member must run on its own GPU (`device`). Each op waits on the GPU
// for the work queued on `compute_stream` before it (no host blocking).
std::unique_ptr<Communicator> make_nccl_communicator(MpiComm comm, Device device, cuda::StreamHandle compute_stream,
                                                     CommOptions options);

}  // namespace mt
