// The embedding family on CUDA: its ops one thread per unit (runtime/cuda/units.cuh).
#include "runtime/cuda/units.cuh"

namespace mt::backend {

MT_EMBEDDING_UNIT_OPS(MT_CUDA_UNIT_RUN)

}  // namespace mt::backend
