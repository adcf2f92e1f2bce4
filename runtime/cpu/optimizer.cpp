// The optimizer family on the CPU: OpenMP loops over adamw_update (runtime/ops/optimizer.h). Each element is read and written by one thread
// only, so the result does not depend on the thread count.
#include "runtime/backend.h"

namespace mt::backend {

void Cpu::adamw(const AdamWStepArgs& args, float* param, const float* grad, float* m, float* v, std::int64_t n,
                int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const AdamWElement e = adamw_update(param[i], grad[i], m[i], v[i], args);
    param[i] = e.param;
    m[i] = e.m;
    v[i] = e.v;
  }
}

void Cpu::adamw_multi(const AdamWStepArgs& args, const AdamWTensor* tensors, const AdamWChunk* chunks,
                      std::int64_t num_chunks, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < num_chunks; ++c) {
    const AdamWChunk& chunk = chunks[c];
    const AdamWTensor& t = tensors[chunk.tensor];
    AdamWStepArgs a = args;
    a.weight_decay = t.weight_decay;
    float* param = t.param + chunk.begin;
    const float* grad = t.grad + chunk.begin;
    float* m = t.m + chunk.begin;
    float* v = t.v + chunk.begin;
    for (std::int64_t i = 0; i < chunk.numel; ++i) {
      const AdamWElement e = adamw_update(param[i], grad[i], m[i], v[i], a);
      param[i] = e.param;
      m[i] = e.m;
      v[i] = e.v;
    }
    if (t.param_bf16 == nullptr) continue;
    bf16* out = t.param_bf16 + chunk.begin;  // after the update: the loop above stays one vector loop
    for (std::int64_t i = 0; i < chunk.numel; ++i) out[i] = narrow_to<bf16>(param[i]);
  }
}

}  // namespace mt::backend
