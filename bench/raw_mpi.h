// Raw MPI for `meshbench coll`: the blocking MPI call of each collective (MPI_Allreduce,
// MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Alltoall, MPI_Sendrecv) on a dup of
// MPI_COMM_WORLD, from the calling thread, MPI_IN_PLACE for in place. Host memory only.
// Nonblocking, it makes the MPI_I* call the MPI backend's engine makes and waits for it at once:
// what separates the cost of the engine thread from that of MPI's nonblocking algorithms.
// defines: RawMpi
#pragma once

#include "bench/raw_coll.h"
#include "comm/mpi_runtime.h"

namespace mt {

class RawMpi final : public RawColl {
 public:
  explicit RawMpi(bool nonblocking = false);  // collective over MPI_COMM_WORLD
  MPI_Comm comm() const { return comm_.get(); }

  std::string name() const override { return "mpi"; }
  std::string describe() const override;
  bool host_memory_only() const override { return true; }
  void start(CollOp op, Placement placement, const CollShape& shape, DType dtype, void* in, void* out) override;
  void wait_all() override {}
  // MPI leaves an in-place reduce_scatter_block result at the start of the buffer.
  std::int64_t reduce_scatter_in_place_offset(const CollShape&, int) const override { return 0; }

 private:
  MpiComm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool nonblocking_ = false;
};

}  // namespace mt
