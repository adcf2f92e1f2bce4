// The reference `meshbench coll` puts next to our Communicator: the library's own call on the
// same data, with nothing of ours in between (raw MPI on the MPI backend, raw NCCL on NCCL).
// defines: RawColl
#pragma once

#include <cstdint>
#include <string>

#include "bench/coll_ops.h"
#include "runtime/dtype.h"

namespace mt {

class RawColl {
 public:
  virtual ~RawColl() = default;
  virtual std::string name() const = 0;         // "mpi", "nccl": the table's column prefix
  virtual std::string describe() const = 0;     // one line for the header
  virtual bool host_memory_only() const = 0;    // true: device data must be given as host copies
  // Starts one op on `in` and `out` (views of one buffer when in place, laid out as
  // coll_ops.h says). A blocking library runs it to the end here.
  virtual void start(CollOp op, Placement placement, const CollShape& shape, DType dtype, void* in, void* out) = 0;
  // Returns once every started op has finished.
  virtual void wait_all() = 0;
  // In place, where this rank's reduce_scatter result lands (in elements from the buffer start).
  virtual std::int64_t reduce_scatter_in_place_offset(const CollShape& shape, int rank) const = 0;
};

}  // namespace mt
