// Stands in for raw NCCL (bench/raw_nccl.h) when meshtrain is built without CUDA.
#include "bench/raw_nccl.h"

#include "runtime/error.h"

namespace mt {

std::unique_ptr<RawColl> make_raw_nccl(MPI_Comm, Device) {
  MT_FAIL("raw NCCL: this meshbench was built without NCCL (configure with -DMESHTRAIN_CUDA=ON)");
}

}  // namespace mt
