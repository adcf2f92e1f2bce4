#include "runtime/gemm_rate.h"

#include <algorithm>
#include <chrono>

#include "runtime/gemm.h"
#include "runtime/kernels.h"

namespace mt {

double best_rate(double flops, const std::function<double()>& trial, int max_trials, double budget_s,
                 int min_trials) {
  double best = 0.0, spent = 0.0;
  for (int t = 0; t < max_trials && (t < min_trials || spent < budget_s); ++t) {
    const double seconds = trial();
    if (seconds <= 0.0) continue;
    spent += seconds;
    best = std::max(best, flops / seconds);
  }
  return best;
}

double measure_gemm_flops(DeviceContext& ctx, int n, double budget_s, int max_trials) {
  Tensor a = Tensor::empty({n, n}, DType::F32, ctx), b = Tensor::empty({n, n}, DType::F32, ctx);
  Tensor c = Tensor::empty({n, n}, DType::F32, ctx);
  kernels::fill(ctx, a, 0.5);
  kernels::fill(ctx, b, 0.25);
  matmul(ctx, a, false, b, false, c);  // warm-up: thread pools, page faults, cuBLAS handle
  ctx.synchronize();
  const auto timed_call = [&] {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    matmul(ctx, a, false, b, false, c);
    ctx.synchronize();
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  return best_rate(2.0 * n * static_cast<double>(n) * n, timed_call, max_trials, budget_s);
}

}  // namespace mt
