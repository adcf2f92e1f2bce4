// CPU AdamW: an OpenMP loop over adamw_update. Each element is read and written by one thread
// only, so the result does not depend on the thread count.
#include "optim/adamw_backend.h"

namespace mt::backend {

void adamw_cpu(const AdamWStepArgs& args, float* param, const float* grad, float* m, float* v, std::int64_t n,
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
