// Raw NCCL for `meshbench coll`: a communicator of the bench's own (rank 0's unique id broadcast
// over MPI), on its own CUDA stream, running ncclAllReduce, ncclReduceScatter, ncclAllGather,
// ncclBroadcast and grouped ncclSend/ncclRecv (alltoall, sendrecv) on the same device buffers as
// ours. raw_nccl.cpp is built with the CUDA backend, raw_nccl_stub.cpp without it.
// defines: make_raw_nccl
#pragma once

#include <mpi.h>

#include <memory>

#include "bench/raw_coll.h"
#include "runtime/device.h"

namespace mt {

// Collective over `comm`; `device` is this rank's GPU. Fails where NCCL is not built in.
std::unique_ptr<RawColl> make_raw_nccl(MPI_Comm comm, Device device);

}  // namespace mt
