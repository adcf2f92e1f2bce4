// The optimizer family on the CPU: an OpenMP loop over adamw_update (runtime/ops/optimizer.h). Each element is read and written by one thread
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

}  // namespace mt::backend
