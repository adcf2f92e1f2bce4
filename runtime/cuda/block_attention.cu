// Block attention on CUDA (runtime/ops/block_attention.h): every op one thread per unit
// (runtime/cuda/units.cuh), the reference the CPU runs; no kernel cut for the GPU yet.
#include "runtime/cuda/units.cuh"

namespace mt::backend {

MT_BLOCK_ATTENTION_UNIT_OPS(MT_CUDA_UNIT_RUN)

}  // namespace mt::backend
