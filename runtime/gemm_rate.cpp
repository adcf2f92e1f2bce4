#include "runtime/gemm_rate.h"

#include <chrono>

#include "runtime/gemm.h"
#include "runtime/kernels.h"

namespace mt {

double measure_gemm_flops(DeviceContext& ctx, int n, double seconds) {
  Tensor a = Tensor::empty({n, n}, DType::F32, ctx), b = Tensor::empty({n, n}, DType::F32, ctx);
  Tensor c = Tensor::empty({n, n}, DType::F32, ctx);
  kernels::fill(ctx, a, 0.5);
  kernels::fill(ctx, b, 0.25);
  matmul(ctx, a, false, b, false, c);  // warm-up: thread pools, page faults, cuBLAS handle
  ctx.synchronize();
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int calls = 0;
  double elapsed = 0.0;
  do {
    matmul(ctx, a, false, b, false, c);
    ctx.synchronize();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < seconds);
  return 2.0 * n * static_cast<double>(n) * n * calls / elapsed;
}

}  // namespace mt
