#include "runtime/gemm.h"

#include <cstdlib>
#include <string>

#include "runtime/backend.h"
#include "runtime/device_counters.h"
#include "runtime/nn_run.h"
#include "runtime/op_profile.h"

namespace mt {

const char* gemm_epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return "none";
    case GemmEpilogue::Bias: return "bias";
    case GemmEpilogue::BiasGelu: return "bias+gelu";
    case GemmEpilogue::DGelu: return "dgelu";
    case GemmEpilogue::BiasGradA: return "bias-gradient";
  }
  return "unknown";
}

CudaGemmPath cuda_gemm_path_from_env() {
  const char* env = std::getenv("MESHTRAIN_GEMM");
  if (env == nullptr || *env == '\0') return CudaGemmPath::Cublas;
  const std::string v = env;
  if (v == "cublas") return CudaGemmPath::Cublas;
  if (v == "cublaslt") return CudaGemmPath::CublasLt;
  MT_FAIL("MESHTRAIN_GEMM=", v, " is not a CUDA GEMM path (cublas or cublaslt)");
}

namespace {
// The element types GEMM takes (see gemm.h): A and B alike, C the same or fp32 for bf16 inputs.
bool supported_types(DType ab, DType c) {
  if (ab == DType::F32) return c == DType::F32;
  if (ab == DType::BF16) return c == DType::BF16 || c == DType::F32;
  return false;
}
}  // namespace

namespace {

// What an epilogue needs (runtime/gemm.h), checked once for every device.
void check_epilogue(const GemmArgs& g) {
  if (g.epilogue == GemmEpilogue::None) return;
  const char* name = gemm_epilogue_name(g.epilogue);
  MT_CHECK(g.batch == 1, "the ", name, " GEMM epilogue takes one matrix, not a batch of ", g.batch);
  if (g.epilogue == GemmEpilogue::BiasGradA) {
    MT_CHECK(g.trans_a && g.lda == g.m && g.bias_grad != nullptr,
             "the bias-gradient epilogue wants A stored compact as [k, m] (trans_a, lda == m) and a bias_grad "
             "[m]: trans_a=", g.trans_a, " lda=", g.lda, " m=", g.m);
    return;
  }
  MT_CHECK(g.beta == 0.0f && g.ldc == g.n, "the ", name, " GEMM epilogue wants beta 0 and a compact C (ldc == n): beta=",
           g.beta, " ldc=", g.ldc, " n=", g.n);
  MT_CHECK(g.epilogue != GemmEpilogue::Bias || g.bias != nullptr, "the bias GEMM epilogue without a bias");
  MT_CHECK(g.epilogue == GemmEpilogue::Bias || g.aux != nullptr, "the ", name,
           " GEMM epilogue without its pre-activation (aux)");
  MT_CHECK(g.epilogue != GemmEpilogue::BiasGelu || g.aux != g.c, "the bias+gelu GEMM epilogue writes the "
           "pre-activation and the activation: they must be two tensors");
}

// The epilogues on CUDA as the separate kernels they replace, around a cuBLAS GEMM: the reference
// until a GPU has validated cuBLASLt's (MESHTRAIN_GEMM=cublaslt), and the same bits as before
// epilogues existed. The bias is broadcast into the output and the GEMM adds to it (beta 1).
void cuda_reference_gemm(DeviceContext& ctx, const GemmArgs& g) {
  void* handle = ctx.blas_handle();
  GemmArgs plain = g;
  plain.epilogue = GemmEpilogue::None;
  const DType c_type = g.c_type();
  const std::int64_t count = g.m * g.n;
  auto broadcast_bias = [&](void* into) {
    nn::run<nn_math::BroadcastRows>(ctx, c_type, [&](auto& op) {
      using T = std::remove_pointer_t<decltype(op.out)>;
      op = {g.bias, static_cast<T*>(into), g.m, g.n};
    });
  };
  switch (g.epilogue) {
    case GemmEpilogue::None:
      backend::Cuda::gemm(handle, plain);
      return;
    case GemmEpilogue::Bias:
      broadcast_bias(g.c);
      plain.beta = 1.0f;
      backend::Cuda::gemm(handle, plain);
      return;
    case GemmEpilogue::BiasGelu:
      plain.c = g.aux;
      if (g.bias != nullptr) {
        broadcast_bias(g.aux);
        plain.beta = 1.0f;
      }
      backend::Cuda::gemm(handle, plain);
      nn::run<nn_math::GeluForward>(ctx, c_type, [&](auto& op) {
        using T = std::remove_pointer_t<decltype(op.out)>;
        op = {static_cast<const T*>(g.aux), static_cast<T*>(g.c), count};
      });
      return;
    case GemmEpilogue::DGelu: {
      Tensor product;  // the product apart from C when C is aux, which GeluBackward still reads
      if (g.c == g.aux) {
        product = Tensor::empty({g.m, g.n}, c_type, ctx);
        plain.c = product.data();
      }
      backend::Cuda::gemm(handle, plain);
      nn::run<nn_math::GeluBackward>(ctx, c_type, [&](auto& op) {
        using T = std::remove_pointer_t<decltype(op.dx)>;
        op = {static_cast<const T*>(g.aux), static_cast<const T*>(plain.c), static_cast<T*>(g.c), count};
      });
      return;
    }
    case GemmEpilogue::BiasGradA:
      backend::Cuda::gemm(handle, plain);
      break;
  }
}

// The bias gradient of a BiasGradA GEMM where the GEMM itself does not sum it: A's column sums.
void sum_bias_grad(DeviceContext& ctx, const GemmArgs& g) {
  nn::run<nn_math::ColumnSum>(ctx, g.dtype, [&](auto& op) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(op.x)>>;
    op = {static_cast<const T*>(g.a), g.bias_grad, g.k, g.m, nn::unit_width(ctx)};
  });
}

// cuBLASLt with its epilogues, and the bias gradient by row tiles; DGelu into C == aux goes through a separate product (cuBLASLt does
// not promise to read each aux element before it writes D's). cuBLASLt wants the GELU's
// pre-activation with a row stride divisible by 8: other widths take the reference path.
void cuda_lt_gemm(DeviceContext& ctx, const GemmArgs& g) {
  void* handle = ctx.blas_handle();
  const bool gelu = g.epilogue == GemmEpilogue::BiasGelu || g.epilogue == GemmEpilogue::DGelu;
  if (gelu && g.n % 8 != 0) {
    cuda_reference_gemm(ctx, g);
    return;
  }
  if (g.epilogue == GemmEpilogue::DGelu && g.c == g.aux) {
    Tensor product = Tensor::empty({g.m, g.n}, g.c_type(), ctx);
    GemmArgs apart = g;
    apart.c = product.data();
    backend::Cuda::gemm_lt(handle, apart);
    cuda::copy_async(g.c, product.data(), product.nbytes(), ctx.stream().handle());
    return;
  }
  backend::Cuda::gemm_lt(handle, g);
  if (g.epilogue == GemmEpilogue::BiasGradA) {  // by row tiles, folded in order (runtime/cuda/gemm.cu)
    Tensor partials = Tensor::empty({backend::bias_grad_workspace(g.k, g.m)}, DType::F32, ctx);
    backend::Cuda::bias_grad_tiles(handle, g, static_cast<float*>(partials.data()));
  }
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
  check_epilogue(args);
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  // The profile tells GEMMs apart by what they compute: "gemm bf16->fp32 NT 8192x2304x768 bias".
  const OpScope scope = OpScope::named(ctx, [&] {
    std::string name = std::string("gemm ") + dtype_name(args.dtype);
    if (args.c_type() != args.dtype) name += std::string("->") + dtype_name(args.c_type());
    name += ' ';
    name += args.trans_a ? 'T' : 'N';
    name += args.trans_b ? 'T' : 'N';
    name += ' ' + std::to_string(args.m) + 'x' + std::to_string(args.n) + 'x' + std::to_string(args.k);
    if (args.batch > 1) name += " batch " + std::to_string(args.batch);
    if (args.epilogue != GemmEpilogue::None) name += std::string(" ") + gemm_epilogue_name(args.epilogue);
    return name;
  });
  if (ctx.device().is_cpu()) {
    backend::Cpu::gemm(args, ctx.cpu_threads());
  } else if (backend::Cuda::uses_lt(ctx.blas_handle())) {
    cuda_lt_gemm(ctx, args);
  } else {
    cuda_reference_gemm(ctx, args);
    if (args.epilogue == GemmEpilogue::BiasGradA) sum_bias_grad(ctx, args);
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
            float alpha, float beta, const MatmulEpilogue& epilogue) {
  MT_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2, "matmul wants 2-D tensors, got ", a.describe(),
           ", ", b.describe(), ", ", c.describe());
  GemmArgs g = args_for(a, trans_a, b, trans_b, c, alpha, beta, 0);
  g.epilogue = epilogue.kind;
  const char* name = gemm_epilogue_name(epilogue.kind);
  if (epilogue.bias != nullptr) {
    MT_CHECK(epilogue.bias->device() == c.device() && epilogue.bias->dtype() == DType::F32 &&
                 epilogue.bias->numel() == g.n,
             "matmul ", name, " epilogue: the bias ", epilogue.bias->describe(), " is not fp32 [", g.n, "] on ",
             c.device().str());
    g.bias = static_cast<const float*>(epilogue.bias->data());
  }
  if (epilogue.aux != nullptr) {
    MT_CHECK(epilogue.aux->device() == c.device() && epilogue.aux->dtype() == c.dtype() &&
                 epilogue.aux->numel() == g.m * g.n,
             "matmul ", name, " epilogue: the pre-activation ", epilogue.aux->describe(), " is not ",
             dtype_name(c.dtype()), " [", g.m, ", ", g.n, "] on ", c.device().str());
    g.aux = epilogue.aux->data();
  }
  if (epilogue.bias_grad != nullptr) {
    MT_CHECK(epilogue.bias_grad->device() == c.device() && epilogue.bias_grad->dtype() == DType::F32 &&
                 epilogue.bias_grad->numel() == g.m,
             "matmul ", name, " epilogue: the bias gradient ", epilogue.bias_grad->describe(), " is not fp32 [", g.m,
             "] on ", c.device().str());
    g.bias_grad = static_cast<float*>(epilogue.bias_grad->data());
  }
  gemm(ctx, g);
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
