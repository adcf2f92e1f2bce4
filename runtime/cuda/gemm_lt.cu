// The row-major GEMM API (runtime/gemm.h) through cuBLASLt, with its epilogues: bias, bias + GELU
// keeping the pre-activation (GELU_AUX_BIAS) and the GELU gradient from it (DGELU). bf16 or fp32
// inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), a 32 MiB workspace per context, and the
// algorithm the heuristic picks cached per problem (shapes, types, epilogue, pointer alignments).
//
// The mapping to cuBLASLt's column-major is runtime/cuda/gemm.cu's: row-major C = op(A) op(B) is
// column-major C^T = op(B)^T op(A)^T, so cuBLASLt's A is our B, its B our A, its rows our columns
// (n) and its columns our rows (m). The bias runs along cuBLASLt's rows: our columns, as wanted;
// the aux matrix (the pre-activation) is laid out like C.
//
// Fixed-order sums: split-k partial results may only be reduced in fp32 in the workspace
// (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) or not at all; never in the output type (a bf16 sum) and
// never in place. The bias is fp32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), as our masters are.
//
// Differences from the CPU's epilogues (runtime/gemm_epilogue.h), all within a bf16 rounding:
// cuBLASLt takes the GELU of the unrounded pre-activation and computes tanh its own way.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

#include "runtime/cuda/cuda_blas.h"
#include "runtime/cuda/cuda_check.h"

namespace mt::blas {
namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;

cudaDataType_t lt_type(DType t) {
  MT_CHECK(t == DType::F32 || t == DType::BF16, "cuBLASLt GEMM on ", dtype_name(t), " is not supported");
  return t == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
}

cublasLtEpilogue_t lt_epilogue(const GemmArgs& g) {
  switch (g.epilogue) {
    case GemmEpilogue::None:
    case GemmEpilogue::BiasGradA: return CUBLASLT_EPILOGUE_DEFAULT;  // gemm() sums the bias gradient
    case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::BiasGelu: return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  MT_FAIL("unknown GEMM epilogue");
}

// The largest power of two up to 256 that divides the address: the heuristic must only offer
// algorithms that work at the alignment the pointers actually have.
std::uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

#define MT_LT_CHECK(call) MT_CUBLAS_CHECK(call)

// A column-major cuBLASLt layout of a row-major matrix stored [rows, cols] with row stride ld.
cublasLtMatrixLayout_t layout_of_row_major(DType t, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  MT_LT_CHECK(cublasLtMatrixLayoutCreate(&layout, lt_type(t), static_cast<std::uint64_t>(cols),
                                         static_cast<std::uint64_t>(rows), std::max<std::int64_t>(ld, 1)));
  return layout;
}

}  // namespace

// One cached problem: its descriptors and the algorithm the heuristic chose.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C = D
  cublasLtMatmulAlgo_t algo{};
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct LtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  using Key = std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         int, int, int, bool, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t,
                         std::uint32_t>;
  std::map<Key, std::unique_ptr<LtPlan>> plans;

  static Key key_of(const GemmArgs& g) {
    return {g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, static_cast<int>(g.dtype),
            static_cast<int>(g.c_type()), static_cast<int>(g.epilogue), g.bias != nullptr, alignment(g.a),
            alignment(g.b), alignment(g.c), alignment(g.aux), alignment(g.bias)};
  }

  LtPlan& plan_for(const GemmArgs& g) {
    const Key key = key_of(g);
    auto found = plans.find(key);
    if (found != plans.end()) return *found->second;
    auto plan = std::make_unique<LtPlan>();
    MT_LT_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    MT_LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    MT_LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    const cublasLtEpilogue_t epilogue = lt_epilogue(g);
    MT_LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
      const std::int32_t bias_type = CUDA_R_32F;
      MT_LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                 sizeof(bias_type)));
    }
    if (g.epilogue == GemmEpilogue::BiasGelu || g.epilogue == GemmEpilogue::DGelu) {
      const std::int64_t aux_ld = g.n;  // compact [m, n], like C
      MT_LT_CHECK(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
      const std::int32_t aux_type = lt_type(g.c_type());
      MT_LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type,
                                                 sizeof(aux_type)));
    }
    set_pointers(*plan, g);  // the heuristic reads their alignment
    plan->a = g.trans_b ? layout_of_row_major(g.dtype, g.n, g.k, g.ldb) : layout_of_row_major(g.dtype, g.k, g.n, g.ldb);
    plan->b = g.trans_a ? layout_of_row_major(g.dtype, g.k, g.m, g.lda) : layout_of_row_major(g.dtype, g.m, g.k, g.lda);
    plan->c = layout_of_row_major(g.c_type(), g.m, g.n, g.ldc);

    cublasLtMatmulPreference_t pref = nullptr;
    MT_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t result{};
    int found_count = 0;
    try {
      const std::uint64_t workspace_bytes = kWorkspaceBytes;
      MT_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes, sizeof(workspace_bytes)));
      const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      MT_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                       sizeof(schemes)));
      const std::uint32_t align_a = alignment(g.b), align_b = alignment(g.a), align_c = alignment(g.c);
      MT_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                       sizeof(align_a)));
      MT_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                       sizeof(align_b)));
      MT_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                       sizeof(align_c)));
      MT_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                       sizeof(align_c)));
      MT_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1,
                                                 &result, &found_count));
    } catch (...) {
      cublasLtMatmulPreferenceDestroy(pref);
      throw;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    MT_CHECK(found_count > 0, "cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k, " ",
             dtype_name(g.dtype), " -> ", dtype_name(g.c_type()), " with the ", gemm_epilogue_name(g.epilogue),
             " epilogue (MESHTRAIN_GEMM=cublaslt; unset it for cuBLAS)");
    plan->algo = result.algo;
    return *plans.emplace(key, std::move(plan)).first->second;
  }

  static void set_pointers(LtPlan& plan, const GemmArgs& g) {
    if (g.epilogue == GemmEpilogue::Bias || (g.epilogue == GemmEpilogue::BiasGelu && g.bias != nullptr)) {
      const void* bias = g.bias;
      MT_LT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (g.epilogue == GemmEpilogue::BiasGelu || g.epilogue == GemmEpilogue::DGelu) {
      void* aux = g.aux;
      MT_LT_CHECK(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    }
  }
};

LtGemm::LtGemm(int device, cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  MT_CUDA_CHECK(cudaSetDevice(device));
  impl_->stream = stream;
  MT_LT_CHECK(cublasLtCreate(&impl_->handle));
  const cudaError_t rc = cudaMalloc(&impl_->workspace, kWorkspaceBytes);
  if (rc != cudaSuccess) {
    cublasLtDestroy(impl_->handle);
    (void)cudaGetLastError();
    MT_FAIL("cuBLASLt workspace of ", kWorkspaceBytes >> 20, " MiB: ", cuda::cuda_error_text(rc));
  }
}

LtGemm::~LtGemm() {
  impl_->plans.clear();
  if (impl_->workspace) MT_CUDA_CHECK_NOTHROW(cudaFree(impl_->workspace));
  if (impl_->handle) cublasLtDestroy(impl_->handle);
}

void LtGemm::run(const GemmArgs& g) {
  MT_CHECK(g.batch == 1, "the cuBLASLt path takes one matrix, not a batch of ", g.batch);
  Impl& s = *impl_;
  LtPlan& plan = s.plan_for(g);
  Impl::set_pointers(plan, g);
  const float alpha = g.alpha, beta = g.beta;
  MT_LT_CHECK(cublasLtMatmul(s.handle, plan.desc, &alpha, g.b, plan.a, g.a, plan.b, &beta, g.c, plan.c, g.c, plan.c,
                             &plan.algo, s.workspace, kWorkspaceBytes, s.stream));
}

}  // namespace mt::blas
