// The attention family on CUDA (runtime/ops/attention.h): the reference and the row ops one thread
// per unit (runtime/cuda/units.cuh), and:
//
// The fused causal softmax of batched-GEMM attention and its backward, cut for the GPU (Cuda::run_fast,
// family `attention`): a warp per row, or a block per row when rows are longer than
// kSoftmaxWarpMaxColumns (the choice depends on the shape alone). The reference is the op's unit
// (runtime/ops/attention.h CausalSoftmaxForward, CausalSoftmaxBackward), which CUDA runs one
// thread per row unless the context turns this family on. Each computes the reference's function:
//   forward   over the row's first t + 1 entries (t = r % seq_len), the maximum of s * scale, the sum
//             of exp_f(s * scale - max), then p = exp_f(s * scale - max) * (1 / sum) rounded once
//             into T; zeros past the diagonal;
//   backward  weighted = the sum of p * dp over the same entries, then ds = p * (dp - weighted) *
//             scale rounded once into T; zeros past the diagonal;
// the sums in another fixed order (rows.cuh). A thread reads and writes the same columns in every
// pass, so p may alias scores, and ds dp, when T is float, as the reference allows. Entries past the
// diagonal are only written, never read (the GEMMs skip them). Rows of whole 16-byte packs (seq_len
// a multiple of 16 / sizeof(T), the pointers aligned) move 16 bytes at a time; others one entry.
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/rows.cuh"
#include "runtime/cuda/units.cuh"

namespace mt::backend {
namespace {

using rows::Pack;
using Warps = rows::WarpGroup<kRowWarpsPerBlock>;
using Block = rows::BlockGroup<kSoftmaxBlockThreads>;

// Zeros into the columns [n, L) of a row: one by one up to the next pack boundary, then whole packs.
template <class Group, class T, bool kVec>
__device__ __forceinline__ void zero_past(T* out, std::int64_t n, std::int64_t L) {
  constexpr int P = Pack<T>::kSize;
  const std::int64_t packed = kVec ? nn_math::min64(rows::round_up(n, P), L) : L;
  for (std::int64_t j = n + Group::rank(); j < packed; j += Group::kThreads) out[j] = narrow_to<T>(0.0f);
  if constexpr (kVec) {
    Pack<T> zeros;
    for (int i = 0; i < P; ++i) zeros.v[i] = narrow_to<T>(0.0f);
    rows::walk<true, P>(
        packed, L, Group::rank(), Group::kThreads, [&](std::int64_t j) { rows::store_pack(out + j, zeros); },
        [&](std::int64_t j) { out[j] = narrow_to<T>(0.0f); });
  }
}

template <class Group, class T, bool kVec>
__global__ void __launch_bounds__(Group::kBlockThreads) causal_softmax_rows(nn_math::CausalSoftmaxForward<T> op) {
  __shared__ float scratch[Group::kScratch];
  constexpr int P = Pack<T>::kSize;
  const int rank = Group::rank();
  const std::int64_t L = op.seq_len, stride = static_cast<std::int64_t>(gridDim.x) * Group::kRowsPerBlock;
  const float sc = op.scale;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * Group::kRowsPerBlock + Group::slot(); r < op.rows;
       r += stride) {
    const std::int64_t n = r % L + 1;
    const float* s = op.scores + r * L;
    T* out = op.p + r * L;
    float max_score = rows::kLowest;
    rows::walk<kVec, P>(
        0, n, rank, Group::kThreads,
        [&](std::int64_t j) {
          float v[P];
          rows::load_floats(s + j, v);
          for (int i = 0; i < P; ++i) max_score = rows::max_of(max_score, v[i] * sc);
        },
        [&](std::int64_t j) { max_score = rows::max_of(max_score, s[j] * sc); });
    max_score = Group::max(max_score, scratch);
    float sum = 0.0f;
    rows::walk<kVec, P>(
        0, n, rank, Group::kThreads,
        [&](std::int64_t j) {
          float v[P];
          rows::load_floats(s + j, v);
          for (int i = 0; i < P; ++i) sum += nn_math::exp_f(v[i] * sc - max_score);
        },
        [&](std::int64_t j) { sum += nn_math::exp_f(s[j] * sc - max_score); });
    const float inv = 1.0f / Group::sum(sum, scratch);
    rows::walk<kVec, P>(
        0, n, rank, Group::kThreads,
        [&](std::int64_t j) {
          float v[P];
          rows::load_floats(s + j, v);
          Pack<T> p;
          for (int i = 0; i < P; ++i) p.v[i] = narrow_to<T>(nn_math::exp_f(v[i] * sc - max_score) * inv);
          rows::store_pack(out + j, p);
        },
        [&](std::int64_t j) { out[j] = narrow_to<T>(nn_math::exp_f(s[j] * sc - max_score) * inv); });
    zero_past<Group, T, kVec>(out, n, L);
  }
}

template <class Group, class T, bool kVec>
__global__ void __launch_bounds__(Group::kBlockThreads) causal_softmax_backward_rows(
    nn_math::CausalSoftmaxBackward<T> op) {
  __shared__ float scratch[Group::kScratch];
  constexpr int P = Pack<T>::kSize;
  const int rank = Group::rank();
  const std::int64_t L = op.seq_len, stride = static_cast<std::int64_t>(gridDim.x) * Group::kRowsPerBlock;
  const float scale = op.scale;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * Group::kRowsPerBlock + Group::slot(); r < op.rows;
       r += stride) {
    const std::int64_t n = r % L + 1;
    const T* pr = op.p + r * L;
    const float* d = op.dp + r * L;
    T* out = op.ds + r * L;
    float dot = 0.0f;
    rows::walk<kVec, P>(
        0, n, rank, Group::kThreads,
        [&](std::int64_t j) {
          const Pack<T> p = rows::load_pack(pr + j);
          float g[P];
          rows::load_floats(d + j, g);
          for (int i = 0; i < P; ++i) dot += widen(p.v[i]) * g[i];
        },
        [&](std::int64_t j) { dot += widen(pr[j]) * d[j]; });
    const float weighted = Group::sum(dot, scratch);
    rows::walk<kVec, P>(
        0, n, rank, Group::kThreads,
        [&](std::int64_t j) {
          const Pack<T> p = rows::load_pack(pr + j);
          float g[P];
          rows::load_floats(d + j, g);
          Pack<T> o;
          for (int i = 0; i < P; ++i) o.v[i] = narrow_to<T>(widen(p.v[i]) * (g[i] - weighted) * scale);
          rows::store_pack(out + j, o);
        },
        [&](std::int64_t j) { out[j] = narrow_to<T>(widen(pr[j]) * (d[j] - weighted) * scale); });
    zero_past<Group, T, kVec>(out, n, L);
  }
}

// Rows of whole packs, at 16-byte boundaries: the fp32 rows then are too (a pack of T is as many
// entries as a whole number of float4s).
template <class T>
bool packable(std::int64_t seq_len, const void* a, const void* b, const void* c) {
  return seq_len % Pack<T>::kSize == 0 && rows::aligned16(a) && rows::aligned16(b) && rows::aligned16(c);
}

template <class Group, class T, bool kVec>
void forward_with(const nn_math::CausalSoftmaxForward<T>& op, cudaStream_t s) {
  const unsigned int blocks = rows::row_blocks(op.rows, Group::kRowsPerBlock, kRowMaxBlocks);
  causal_softmax_rows<Group, T, kVec><<<blocks, Group::kBlockThreads, 0, s>>>(op);
}

template <class Group, class T, bool kVec>
void backward_with(const nn_math::CausalSoftmaxBackward<T>& op, cudaStream_t s) {
  const unsigned int blocks = rows::row_blocks(op.rows, Group::kRowsPerBlock, kRowMaxBlocks);
  causal_softmax_backward_rows<Group, T, kVec><<<blocks, Group::kBlockThreads, 0, s>>>(op);
}

template <class T>
void run_forward(const nn_math::CausalSoftmaxForward<T>& op, cuda::StreamHandle stream) {
  if (op.rows == 0 || op.seq_len == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const bool vec = packable<T>(op.seq_len, op.scores, op.p, op.p);
  if (op.seq_len > kSoftmaxWarpMaxColumns) {
    vec ? forward_with<Block, T, true>(op, s) : forward_with<Block, T, false>(op, s);
  } else {
    vec ? forward_with<Warps, T, true>(op, s) : forward_with<Warps, T, false>(op, s);
  }
  rows::check_row_launch("causal softmax");
}

template <class T>
void run_backward(const nn_math::CausalSoftmaxBackward<T>& op, cuda::StreamHandle stream) {
  if (op.rows == 0 || op.seq_len == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const bool vec = packable<T>(op.seq_len, op.p, op.dp, op.ds);
  if (op.seq_len > kSoftmaxWarpMaxColumns) {
    vec ? backward_with<Block, T, true>(op, s) : backward_with<Block, T, false>(op, s);
  } else {
    vec ? backward_with<Warps, T, true>(op, s) : backward_with<Warps, T, false>(op, s);
  }
  rows::check_row_launch("causal softmax backward");
}

}  // namespace

void Cuda::run_fast(const nn_math::CausalSoftmaxForward<float>& op, cuda::StreamHandle s) { run_forward(op, s); }
void Cuda::run_fast(const nn_math::CausalSoftmaxForward<bf16>& op, cuda::StreamHandle s) { run_forward(op, s); }
void Cuda::run_fast(const nn_math::CausalSoftmaxBackward<float>& op, cuda::StreamHandle s) { run_backward(op, s); }
void Cuda::run_fast(const nn_math::CausalSoftmaxBackward<bf16>& op, cuda::StreamHandle s) { run_backward(op, s); }
}  // namespace mt::backend

namespace mt::backend {

MT_ATTENTION_UNIT_OPS(MT_CUDA_UNIT_RUN)

}  // namespace mt::backend
