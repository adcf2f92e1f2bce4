// The activations family on CUDA: GELU, SwiGLU and RoPE one thread per unit (runtime/cuda/units.cuh).
#include "runtime/cuda/units.cuh"

namespace mt::backend {

MT_ACTIVATIONS_UNIT_OPS(MT_CUDA_UNIT_RUN)

}  // namespace mt::backend
