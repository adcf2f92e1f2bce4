// Without the CUDA backend every transformer op on a GPU throws, naming the build option.
#include "runtime/error.h"
#include "runtime/nn_backend.h"

namespace mt::backend {
namespace {
[[noreturn]] void not_built() {
  MT_FAIL("this meshtrain was built without the CUDA backend (configure with -DMESHTRAIN_CUDA=ON)");
}
}  // namespace

#define MT_NN_STUB_RUN(Op)                                                                   \
  void CudaNn::run(const nn_math::Op<float>&, cuda::StreamHandle) { not_built(); }            \
  void CudaNn::run(const nn_math::Op<bf16>&, cuda::StreamHandle) { not_built(); }
MT_NN_UNIT_OPS(MT_NN_STUB_RUN)
MT_NN_STUB_RUN(LayerNormBackwardInput)
#undef MT_NN_STUB_RUN
#define MT_NN_STUB_ROWS(Op, Family)                                                          \
  void CudaRows::run(const nn_math::Op<float>&, cuda::StreamHandle) { not_built(); }          \
  void CudaRows::run(const nn_math::Op<bf16>&, cuda::StreamHandle) { not_built(); }
MT_NN_ROW_OPS(MT_NN_STUB_ROWS)
#undef MT_NN_STUB_ROWS
void CudaNn::run(const nn_math::LayerNormBackwardParams<float>&, float*, cuda::StreamHandle) { not_built(); }
void CudaNn::run(const nn_math::LayerNormBackwardParams<bf16>&, float*, cuda::StreamHandle) { not_built(); }

}  // namespace mt::backend
