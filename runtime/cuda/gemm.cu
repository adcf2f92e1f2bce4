// The GEMM family on CUDA (runtime/gemm.h, epilogue math in runtime/ops/gemm.h): cuBLAS by default,
// cuBLASLt with its epilogues on request, and the bias gradient by row tiles.
//
// cuBLAS. cuBLAS is column-major. A row-major matrix X[r, c] with row stride ld is, read column-major,
// X^T[c, r] with the same ld. So the row-major C = op(A) op(B) is the column-major
//   C^T[n, m] = op(B)^T[n, k] * op(A)^T[k, m],
// i.e. cuBLAS called with the operands swapped: (op_b, op_a, n, m, k, B, ldb, A, lda, C, ldc),
// each op being "transpose" exactly when the row-major API asked for it.
//
// One call covers every case: cublasGemmStridedBatchedEx (batch 1 included). fp32 computes with
// CUBLAS_COMPUTE_32F and the default math mode, which never down-converts to TF32, so results are
// comparable to the CPU's sgemm; bf16 inputs and outputs also accumulate in fp32 (reductions of
// partial results included: CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION). bf16 A and B may
// write a bf16 C or accumulate into an fp32 C (Ctype CUDA_R_32F), both with CUBLAS_COMPUTE_32F and
// fp32 alpha and beta; gemm() has checked the combination.
//
// cuBLASLt, with its epilogues: bias, bias + GELU keeping the pre-activation (GELU_AUX_BIAS) and the GELU gradient from it (DGELU). bf16 or fp32
// inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), a 32 MiB workspace per context, and the
// algorithm the heuristic picks cached per problem (shapes, types, epilogue, pointer alignments).
//
// The mapping to cuBLASLt's column-major is cuBLAS's above: row-major C = op(A) op(B) is
// column-major C^T = op(B)^T op(A)^T, so cuBLASLt's A is our B, its B our A, its rows our columns
// (n) and its columns our rows (m). The bias runs along cuBLASLt's rows: our columns, as wanted;
// the aux matrix (the pre-activation) is laid out like C.
//
// Fixed-order sums: split-k partial results may only be reduced in fp32 in the workspace
// (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) or not at all; never in the output type (a bf16 sum) and
// never in place. The bias is fp32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), as our masters are.
//
// Differences from the CPU's epilogues (runtime/ops/gemm.h), all within a bf16 rounding:
// cuBLASLt takes the GELU of the unrounded pre-activation and computes tanh its own way.
//
// The bias gradient of a BiasGradA GEMM on the cuBLASLt path: the column sums of A stored [rows, cols], added onto an fp32 dbias. One thread per column over every row (the
// reference, ColumnSum) leaves most of a GPU idle at 768 columns and reads 8192 rows one after
// another; here a block takes 32 columns of a tile of rows, its 8 row lanes sum every 8th row of
// the tile, the lanes are added in shared memory in lane order and each tile's sums go to a
// workspace, which a second kernel folds in tile order onto dbias. Fixed order throughout (no
// float atomics): a run repeats bit for bit; the order is not the CPU's (rows one after another),
// so the two agree within fp32 rounding (runtime/tests/gemm_epilogue_test.cpp).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "runtime/backend.h"
#include "runtime/cuda/cuda_check.h"

namespace mt::backend {

// cuBLASLt with a 32 MiB workspace and one heuristic answer cached per problem.
class LtGemm {
 public:
  LtGemm(int device, cudaStream_t stream);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  void run(const GemmArgs& g);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The context's opaque BLAS handle: the cuBLAS handle on its stream and, on the cuBLASLt path, its
// cuBLASLt state, made on the first GEMM that needs it.
struct CudaBlas {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  bool use_lt = false;
  std::unique_ptr<LtGemm> lt;
};

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

namespace {
CudaBlas& to_blas(void* h) {
  MT_CHECK(h != nullptr, "CUDA GEMM without a BLAS handle");
  return *static_cast<CudaBlas*>(h);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::I32: break;
  }
  MT_FAIL("cuBLAS GEMM on ", dtype_name(t), " is not supported (fp32 and bf16 only)");
}
}  // namespace

void* Cuda::create_blas(int device, cuda::StreamHandle stream, bool use_lt) {
  MT_CUDA_CHECK(cudaSetDevice(device));  // the handle belongs to the current device
  auto blas = std::make_unique<CudaBlas>();
  blas->stream = static_cast<cudaStream_t>(stream);
  blas->device = device;
  blas->use_lt = use_lt;
  MT_CUBLAS_CHECK(cublasCreate(&blas->handle));
  try {
    MT_CUBLAS_CHECK(cublasSetStream(blas->handle, blas->stream));
    // Stated rather than inherited: no TF32 or emulated fp32 paths, and split-k partial sums of
    // a bf16 GEMM are added in fp32, not rounded to bf16 first.
    MT_CUBLAS_CHECK(cublasSetMathMode(
        blas->handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  } catch (...) {
    cublasDestroy(blas->handle);
    throw;
  }
  return blas.release();
}

void Cuda::destroy_blas(void* handle) {
  // Runs in DeviceContext's destructor: report, never throw.
  std::unique_ptr<CudaBlas> blas(static_cast<CudaBlas*>(handle));
  blas->lt.reset();
  const cublasStatus_t rc = cublasDestroy(blas->handle);
  if (rc != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: warning: cuBLAS error in cublasDestroy: %s (%s)\n",
                 describe_location(std::source_location::current()).c_str(), cublasGetStatusName(rc),
                 cublasGetStatusString(rc));
  }
}

bool Cuda::uses_lt(void* handle) { return to_blas(handle).use_lt; }

void Cuda::gemm_lt(void* handle, const GemmArgs& g) {
  CudaBlas& blas = to_blas(handle);
  if (!blas.lt) blas.lt = std::make_unique<LtGemm>(blas.device, blas.stream);
  blas.lt->run(g);
}

void Cuda::gemm(void* handle, const GemmArgs& g) {
  MT_CHECK(g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX &&
               g.ldc <= INT_MAX && g.batch <= INT_MAX,
           "GEMM dimension exceeds the 32-bit cuBLAS interface: m=", g.m, " n=", g.n, " k=", g.k,
           " batch=", g.batch);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const cudaDataType_t ab_type = cuda_type(g.dtype);
  const cudaDataType_t c_type = cuda_type(g.c_type());
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // cuBLAS checks ld >= max(1, rows) even when a matrix is empty (k == 0); with k == 0 it then
  // computes C = beta * C, as BLAS does.
  const int lda = static_cast<int>(std::max<std::int64_t>(g.lda, 1));
  const int ldb = static_cast<int>(std::max<std::int64_t>(g.ldb, 1));
  const int ldc = static_cast<int>(std::max<std::int64_t>(g.ldc, 1));
  const float alpha = g.alpha;  // host scalars (the default pointer mode), fp32 for COMPUTE_32F
  const float beta = g.beta;
  MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      to_blas(handle).handle, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &alpha,
      g.b, ab_type, ldb, static_cast<long long>(g.stride_b),  //
      g.a, ab_type, lda, static_cast<long long>(g.stride_a),  //
      &beta, g.c, c_type, ldc, static_cast<long long>(g.stride_c), static_cast<int>(g.batch), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

namespace {

constexpr int kColumns = 32;  // a warp across the columns: coalesced reads of a row
constexpr int kRowLanes = 8;

template <class T>
__global__ void column_sum_tiles(const T* a, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                 std::int64_t rows_per_tile, float* partial) {
  __shared__ float lanes[kRowLanes][kColumns];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_tile;
  const std::int64_t r1 = r0 + rows_per_tile < rows ? r0 + rows_per_tile : rows;
  float sum = 0.0f;
  if (c < cols)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) sum += widen(a[r * ld + c]);
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int lane = 1; lane < kRowLanes; ++lane) sum += lanes[lane][threadIdx.x];
  partial[static_cast<std::int64_t>(blockIdx.y) * cols + c] = sum;
}

__global__ void fold_tiles(const float* partial, std::int64_t tiles, std::int64_t cols, float* dbias) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (std::int64_t t = 0; t < tiles; ++t) sum += partial[t * cols + c];
  dbias[c] += sum;
}

void check_launch() {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching the bias gradient kernel: ", cuda::cuda_error_text(rc));
}

template <class T>
void sum_bias_grad_tiles(const GemmArgs& g, float* workspace, cudaStream_t stream) {
  const std::int64_t rows = g.k, cols = g.m;  // A stored [k, m] (gemm() checked)
  const std::int64_t tiles = bias_grad_row_tiles(rows);
  const std::int64_t rows_per_tile = (rows + tiles - 1) / tiles;
  const dim3 grid(static_cast<unsigned int>((cols + kColumns - 1) / kColumns), static_cast<unsigned int>(tiles));
  column_sum_tiles<<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(static_cast<const T*>(g.a), rows, cols, g.lda,
                                                                     rows_per_tile, workspace);
  check_launch();
  constexpr int kFoldThreads = 128;
  fold_tiles<<<static_cast<unsigned int>((cols + kFoldThreads - 1) / kFoldThreads), kFoldThreads, 0, stream>>>(
      workspace, tiles, cols, g.bias_grad);
  check_launch();
}

}  // namespace

void Cuda::bias_grad_tiles(void* handle, const GemmArgs& g, float* workspace) {
  if (g.m == 0 || g.k == 0) return;
  const cudaStream_t stream = static_cast<CudaBlas*>(handle)->stream;
  if (g.dtype == DType::BF16) {
    sum_bias_grad_tiles<bf16>(g, workspace, stream);
  } else {
    sum_bias_grad_tiles<float>(g, workspace, stream);
  }
}

}  // namespace mt::backend
