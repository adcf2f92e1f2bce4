#include "runtime/gemm.h"

#include "runtime/blas_backend.h"

namespace mt {

namespace {
// The element types GEMM takes (see gemm.h): A and B alike, C the same or fp32 for bf16 inputs.
bool supported_types(DType ab, DType c) {
  if (ab == DType::F32) return c == DType::F32;
  if (ab == DType::BF16) return c == DType::BF16 || c == DType::F32;
  return false;
}
}  // namespace

void gemm(DeviceContext& ctx, const GemmArgs& args) {
  MT_CHECK(args.m >= 0 && args.n >= 0 && args.k >= 0 && args.batch >= 0, "negative GEMM size m=", args.m,
           " n=", args.n, " k=", args.k, " batch=", args.batch);
  MT_CHECK(args.dtype != DType::I32 && args.c_type() != DType::I32, "GEMM on int32 is not supported");
  MT_CHECK(supported_types(args.dtype, args.c_type()), "GEMM of ", dtype_name(args.dtype), " inputs into ",
           dtype_name(args.c_type()), " is not supported (fp32 x fp32 -> fp32, bf16 x bf16 -> fp32 or bf16)");
  MT_CHECK(args.lda >= (args.trans_a ? args.m : args.k) && args.ldb >= (args.trans_b ? args.k : args.n) &&
               args.ldc >= args.n,
           "GEMM leading dimensions too small: lda=", args.lda, " ldb=", args.ldb, " ldc=", args.ldc);
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  if (ctx.device().is_cpu()) {
    blas::cpu_gemm(args, ctx.cpu_threads());
  } else {
    blas::cuda_gemm(ctx.blas_handle(), args);
  }
}

namespace {
GemmArgs args_for(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                  float beta, std::size_t first) {
  const std::size_t r = first;  // index of the row dimension (1 when batched)
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = trans_a ? a.dim(r + 1) : a.dim(r);
  g.k = trans_a ? a.dim(r) : a.dim(r + 1);
  g.n = trans_b ? b.dim(r) : b.dim(r + 1);
  const std::int64_t kb = trans_b ? b.dim(r + 1) : b.dim(r);
  MT_CHECK(kb == g.k && c.dim(r) == g.m && c.dim(r + 1) == g.n, "matmul shapes do not agree: ", a.describe(),
           trans_a ? "^T" : "", " @ ", b.describe(), trans_b ? "^T" : "", " -> ", c.describe());
  MT_CHECK(a.dtype() == b.dtype(), "matmul dtypes differ: ", a.describe(), ", ", b.describe(),
           " (a and b must share one dtype)");
  MT_CHECK(a.dtype() == c.dtype() || (a.dtype() == DType::BF16 && c.dtype() == DType::F32),
           "matmul dtypes differ: ", a.describe(), " @ ", b.describe(), " -> ", c.describe(),
           " (c must be of a's dtype, or fp32 for bf16 inputs)");
  g.alpha = alpha;
  g.beta = beta;
  g.a = a.data();
  g.b = b.data();
  g.c = c.data();
  g.lda = a.dim(r + 1);
  g.ldb = b.dim(r + 1);
  g.ldc = c.dim(r + 1);
  g.dtype = a.dtype();
  g.c_dtype = c.dtype();
  return g;
}
}  // namespace

void matmul(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
            float alpha, float beta) {
  MT_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2, "matmul wants 2-D tensors, got ", a.describe(),
           ", ", b.describe(), ", ", c.describe());
  gemm(ctx, args_for(a, trans_a, b, trans_b, c, alpha, beta, 0));
}

void matmul_batched(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                    float alpha, float beta) {
  MT_CHECK(a.rank() == 3 && b.rank() == 3 && c.rank() == 3, "matmul_batched wants 3-D tensors, got ",
           a.describe(), ", ", b.describe(), ", ", c.describe());
  MT_CHECK(a.dim(0) == b.dim(0) && a.dim(0) == c.dim(0), "batch sizes differ: ", a.describe(), ", ",
           b.describe(), ", ", c.describe());
  GemmArgs g = args_for(a, trans_a, b, trans_b, c, alpha, beta, 1);
  g.batch = a.dim(0);
  g.stride_a = a.dim(1) * a.dim(2);
  g.stride_b = b.dim(1) * b.dim(2);
  g.stride_c = c.dim(1) * c.dim(2);
  gemm(ctx, g);
}

}  // namespace mt
