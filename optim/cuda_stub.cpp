// Stands in for optim/cuda/ when meshtrain is built without CUDA. A CUDA DeviceContext
// cannot be created in such a build, so this is reached only by calling the backend directly.
#include "runtime/error.h"
#include "optim/adamw_backend.h"

namespace mt::backend {

void adamw_cuda(const AdamWStepArgs&, float*, const float*, float*, float*, std::int64_t, cuda::StreamHandle) {
  MT_FAIL("this meshtrain was built without the CUDA backend (configure with -DMESHTRAIN_CUDA=ON)");
}

}  // namespace mt::backend
