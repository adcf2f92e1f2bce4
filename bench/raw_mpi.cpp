#include "bench/raw_mpi.h"

#include <algorithm>
#include <climits>

#include "comm/mpi_types.h"

namespace mt {

RawMpi::RawMpi(bool nonblocking)
    : comm_(MpiComm::world().dup()), rank_(comm_.rank()), size_(comm_.size()), nonblocking_(nonblocking) {}

std::string RawMpi::describe() const {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string text(version, static_cast<std::size_t>(length));
  text = text.substr(0, text.find_first_of(",\n"));
  return std::string("raw mpi: ") +
         (nonblocking_ ? "nonblocking MPI_I* calls + MPI_Wait" : "blocking MPI_* calls") +
         " from the calling thread on a dup of MPI_COMM_WORLD (" + text + ")";
}

void RawMpi::start(CollOp op, Placement placement, const CollShape& shape, DType dtype, void* in, void* out) {
  MT_CHECK(shape.count * size_ <= INT_MAX, "raw MPI: ", shape.count, " elements per rank do not fit an int");
  const int n = static_cast<int>(shape.count);
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Op sum = mpi_reduce_op(ReduceOp::Sum, dtype);
  const MPI_Comm comm = comm_.get();
  const bool in_place = placement == Placement::InPlace;
  // In place, the buffer starts at the lower of the two views (coll_ops.h).
  void* base = std::min(in, out);
  const void* send = in_place ? MPI_IN_PLACE : in;
  // Nonblocking: the same call as the MPI backend's engine makes, waited for right here.
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  const bool nb = nonblocking_;
  switch (op) {
    case CollOp::Allreduce:
      MT_MPI_CHECK(nb ? MPI_Iallreduce(send, out, n, type, sum, comm, req) : MPI_Allreduce(send, out, n, type, sum, comm));
      break;
    case CollOp::ReduceScatter: {
      void* recv = in_place ? base : out;
      MT_MPI_CHECK(nb ? MPI_Ireduce_scatter_block(send, recv, n, type, sum, comm, req)
                      : MPI_Reduce_scatter_block(send, recv, n, type, sum, comm));
      break;
    }
    case CollOp::Allgather: {
      const int send_count = in_place ? 0 : n;
      const MPI_Datatype send_type = in_place ? MPI_DATATYPE_NULL : type;
      void* recv = in_place ? base : out;
      MT_MPI_CHECK(nb ? MPI_Iallgather(send, send_count, send_type, recv, n, type, comm, req)
                      : MPI_Allgather(send, send_count, send_type, recv, n, type, comm));
      break;
    }
    case CollOp::Broadcast:
      MT_MPI_CHECK(nb ? MPI_Ibcast(out, n, type, 0, comm, req) : MPI_Bcast(out, n, type, 0, comm));
      break;
    case CollOp::Alltoall:
      MT_MPI_CHECK(nb ? MPI_Ialltoall(send, n, type, out, n, type, comm, req)
                      : MPI_Alltoall(send, n, type, out, n, type, comm));
      break;
    case CollOp::Sendrecv: {
      const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
      if (nb) {
        MT_MPI_CHECK(MPI_Irecv(out, n, type, prev, 0, comm, &req[0]));
        MT_MPI_CHECK(MPI_Isend(in, n, type, next, 0, comm, &req[1]));
      } else {
        MT_MPI_CHECK(MPI_Sendrecv(in, n, type, next, 0, out, n, type, prev, 0, comm, MPI_STATUS_IGNORE));
      }
      break;
    }
  }
  if (nb) MT_MPI_CHECK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
}

}  // namespace mt
