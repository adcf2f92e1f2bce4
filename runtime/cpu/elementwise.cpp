// The elementwise family on the CPU: OpenMP loops over runtime/ops/elementwise.h. Each element is written by exactly one
// thread; reductions use its fixed chunk order.
#include <vector>

#include "runtime/backend.h"

namespace mt::backend {

void Cpu::fill(void* x, DType t, std::int64_t n, double value, int threads) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(x);
    const T v = narrow_to<T>(value);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

void Cpu::binary(BinaryOp op, DType t, const void* a, const void* b, void* out, std::int64_t n, int threads) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) po[i] = apply_binary(op, pa[i], pb[i]);
  });
}

void Cpu::scale(void* x, DType t, std::int64_t n, double alpha, int threads) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(x);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) p[i] = scale_one(p[i], alpha);
  });
}

void Cpu::cast(const void* src, DType from, void* dst, DType to, std::int64_t n, int threads) {
  dispatch_dtype(from, [&](auto from_tag) {
    using S = decltype(from_tag);
    dispatch_dtype(to, [&](auto to_tag) {
      using D = decltype(to_tag);
      const S* ps = static_cast<const S*>(src);
      D* pd = static_cast<D*>(dst);
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::int64_t i = 0; i < n; ++i) pd[i] = narrow_to<D>(widen(ps[i]));
    });
  });
}

double Cpu::reduce(ReduceKind kind, const void* x, DType t, std::int64_t n, int threads) {
  const std::int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks));
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t c = 0; c < chunks; ++c) {
      double acc = reduce_identity(kind);
      const std::int64_t end = c * kReduceChunk + kReduceChunk < n ? c * kReduceChunk + kReduceChunk : n;
      for (std::int64_t i = c * kReduceChunk; i < end; ++i) acc = reduce_step(kind, acc, p[i]);
      partial[static_cast<std::size_t>(c)] = acc;
    }
  });
  double result = reduce_identity(kind);
  for (double v : partial) result = reduce_combine(kind, result, v);
  return result;
}

}  // namespace mt::backend
