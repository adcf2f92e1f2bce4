// The AdamW update on raw fp32 arrays, one function per backend: adamw_cpu.cpp (OpenMP) and
// cuda/adamw.cu (or cuda_stub.cpp when CUDA is not built). Both apply adamw_update (adamw_math.h)
// to every element; param, m and v are updated in place.
// defines: backend::adamw_cpu, backend::adamw_cuda
#pragma once

#include <cstdint>

#include "runtime/cuda_api.h"      // defines: cuda::StreamHandle
#include "optim/adamw_math.h"  // defines: AdamWStepArgs

namespace mt::backend {

void adamw_cpu(const AdamWStepArgs& args, float* param, const float* grad, float* m, float* v, std::int64_t n,
               int threads);
// Queued on the stream; the current device must be the stream's.
void adamw_cuda(const AdamWStepArgs& args, float* param, const float* grad, float* m, float* v, std::int64_t n,
                cuda::StreamHandle stream);

}  // namespace mt::backend
