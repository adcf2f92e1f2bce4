// The GEMM epilogues on the CPU: loops over the fp32 result of the sgemm (runtime/cpu/gemm.cpp),
// rows shared out among the threads. Each element is a function of its own inputs, so the bits do
// not depend on the thread count; the bias gradient sums each column's rows in order.
#include <omp.h>

#include "runtime/backend.h"
#include "runtime/error.h"
#include "runtime/ops/gemm.h"

namespace mt::backend {
namespace {

template <class T>
void store_rows(const GemmArgs& g, const float* acc, std::int64_t ld_acc, int threads) {
  T* c = static_cast<T*>(g.c);
  T* aux = static_cast<T*>(g.aux);
  const std::int64_t n = g.n;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && g.m > 1)
  for (std::int64_t r = 0; r < g.m; ++r) {
    const float* in = acc + r * ld_acc;
    T* out = c + r * g.ldc;
    switch (g.epilogue) {
      case GemmEpilogue::None:
      case GemmEpilogue::BiasGradA:
        for (std::int64_t j = 0; j < n; ++j) out[j] = narrow_to<T>(in[j]);
        break;
      case GemmEpilogue::Bias:
        for (std::int64_t j = 0; j < n; ++j) out[j] = gemm_math::store_bias<T>(in[j], g.bias[j]);
        break;
      case GemmEpilogue::BiasGelu: {
        T* pre = aux + r * n;
        if (g.bias != nullptr) {
          for (std::int64_t j = 0; j < n; ++j) gemm_math::store_bias_gelu<T>(in[j], g.bias[j], pre[j], out[j]);
        } else {
          for (std::int64_t j = 0; j < n; ++j) gemm_math::store_bias_gelu<T>(in[j], 0.0f, pre[j], out[j]);
        }
        break;
      }
      case GemmEpilogue::DGelu: {
        const T* pre = aux + r * n;
        for (std::int64_t j = 0; j < n; ++j) out[j] = gemm_math::store_dgelu<T>(in[j], pre[j]);
        break;
      }
    }
  }
}

template <class T>
void column_sums(const GemmArgs& g, int threads) {
  const T* a = static_cast<const T*>(g.a);
  const std::int64_t width = nn_math::kColumnBlock;
  const std::int64_t blocks = nn_math::blocks_of(g.m, width);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && blocks > 1)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t j0 = block * width, j1 = nn_math::min64(j0 + width, g.m);
    for (std::int64_t row = 0; row < g.k; ++row) {
      const T* ar = a + row * g.lda;
      for (std::int64_t j = j0; j < j1; ++j) g.bias_grad[j] += widen(ar[j]);
    }
  }
}

}  // namespace

void Cpu::store_epilogue(const GemmArgs& g, const float* acc, std::int64_t ld_acc, int threads) {
  if (g.c_type() == DType::F32) {
    store_rows<float>(g, acc, ld_acc, threads);
  } else {
    store_rows<bf16>(g, acc, ld_acc, threads);
  }
}

void Cpu::bias_grad_a(const GemmArgs& g, int threads) {
  if (g.dtype == DType::F32) {
    column_sums<float>(g, threads);
  } else {
    column_sums<bf16>(g, threads);
  }
}

}  // namespace mt::backend
