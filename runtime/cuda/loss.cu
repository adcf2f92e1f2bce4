// The loss family on CUDA (runtime/ops/loss.h): its ops one thread per unit (runtime/cuda/units.cuh),
// and:
//
// The fused classifier cut for the GPU (Cuda::run_fast, family `loss`): one block per row of logits
// computes the row's loss and log-sum-exp and writes dlogits over it (in place when dlogits is
// logits) in one kernel. The reference is the op's unit (runtime/ops/loss.h CrossEntropyFused:
// CrossEntropyForward then CrossEntropyBackward on the row), which CUDA runs one thread per row
// unless the context turns this family on. The function is the reference's:
//   max = the largest of the first `vocab` logits, sum = the sum of exp_f(x - max) over them,
//   lse = max + logf(sum), loss = lse - x[target],
//   dlogits[j] = exp_f(x[j] - lse) * dloss, at the target (exp_f(x[target] - lse) - 1) * dloss,
//   rounded once into T; 0 in the padding columns [vocab, padded_vocab);
// only the sum is added in another fixed order (each thread's strided share, the warps' butterflies,
// the warps in order: rows.cuh). The row is read three times (max, sum, writes; the later reads
// mostly from L2): a one-pass online max and sum would rescale partial sums, another formula.
// The target's logit is read before the reductions' barriers, so before any thread overwrites it.
// Rows of whole 16-byte packs (padded_vocab * sizeof(T) a multiple of 16, pointers aligned: gpt2's
// 50304 columns) move 16 bytes at a time; others one element at a time.
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/rows.cuh"
#include "runtime/cuda/units.cuh"

namespace mt::backend {
namespace {

using rows::Pack;
using Block = rows::BlockGroup<kClassifierThreads>;

template <class T, bool kVec>
__global__ void __launch_bounds__(Block::kBlockThreads) classifier_rows(nn_math::CrossEntropyFused<T> op) {
  __shared__ float scratch[Block::kScratch];
  constexpr int P = Pack<T>::kSize;
  const int rank = Block::rank();
  const std::int64_t V = op.vocab, Vp = op.padded_vocab;
  const float dloss = op.dloss;
  for (std::int64_t n = blockIdx.x; n < op.rows; n += gridDim.x) {
    const T* x = op.logits + n * Vp;
    T* d = op.dlogits + n * Vp;
    const std::int64_t target = op.targets[n];
    const float target_logit = rank == 0 ? widen(x[target]) : 0.0f;
    float max_logit = rows::kLowest;
    rows::walk<kVec, P>(
        0, V, rank, Block::kThreads,
        [&](std::int64_t j) {
          const Pack<T> v = rows::load_pack(x + j);
          for (int i = 0; i < P; ++i) max_logit = rows::max_of(max_logit, widen(v.v[i]));
        },
        [&](std::int64_t j) { max_logit = rows::max_of(max_logit, widen(x[j])); });
    max_logit = Block::max(max_logit, scratch);
    float sum = 0.0f;
    rows::walk<kVec, P>(
        0, V, rank, Block::kThreads,
        [&](std::int64_t j) {
          const Pack<T> v = rows::load_pack(x + j);
          for (int i = 0; i < P; ++i) sum += nn_math::exp_f(widen(v.v[i]) - max_logit);
        },
        [&](std::int64_t j) { sum += nn_math::exp_f(widen(x[j]) - max_logit); });
    const float log_sum = max_logit + ::logf(Block::sum(sum, scratch));
    if (rank == 0) {
      op.lse[n] = log_sum;
      op.losses[n] = log_sum - target_logit;
    }
    // The reference writes every column's p * dloss, then the target's (p - 1) * dloss over it.
    auto grad = [&](std::int64_t j, float logit) {
      const float p = nn_math::exp_f(logit - log_sum);
      return narrow_to<T>(j == target ? (p - 1.0f) * dloss : p * dloss);
    };
    rows::walk<kVec, P>(
        0, V, rank, Block::kThreads,
        [&](std::int64_t j) {
          const Pack<T> v = rows::load_pack(x + j);
          Pack<T> g;
          for (int i = 0; i < P; ++i) g.v[i] = grad(j + i, widen(v.v[i]));
          rows::store_pack(d + j, g);
        },
        [&](std::int64_t j) { d[j] = grad(j, widen(x[j])); });
    // The padding: one by one up to a pack boundary, then whole packs.
    const std::int64_t packed = kVec ? nn_math::min64(rows::round_up(V, P), Vp) : Vp;
    for (std::int64_t j = V + rank; j < packed; j += Block::kThreads) d[j] = narrow_to<T>(0.0f);
    if constexpr (kVec) {
      Pack<T> zeros;
      for (int i = 0; i < P; ++i) zeros.v[i] = narrow_to<T>(0.0f);
      rows::walk<true, P>(
          packed, Vp, rank, Block::kThreads, [&](std::int64_t j) { rows::store_pack(d + j, zeros); },
          [&](std::int64_t j) { d[j] = narrow_to<T>(0.0f); });
    }
  }
}

template <class T>
void run_classifier(const nn_math::CrossEntropyFused<T>& op, cuda::StreamHandle stream) {
  if (op.rows == 0) return;
  const unsigned int blocks = rows::row_blocks(op.rows, 1, kClassifierMaxBlocks);
  const auto s = static_cast<cudaStream_t>(stream);
  const bool vec = (op.padded_vocab * static_cast<std::int64_t>(sizeof(T))) % 16 == 0 &&
                   rows::aligned16(op.logits) && rows::aligned16(op.dlogits);
  if (vec) {
    classifier_rows<T, true><<<blocks, Block::kBlockThreads, 0, s>>>(op);
  } else {
    classifier_rows<T, false><<<blocks, Block::kBlockThreads, 0, s>>>(op);
  }
  rows::check_row_launch("fused classifier");
}

}  // namespace

void Cuda::run_fast(const nn_math::CrossEntropyFused<float>& op, cuda::StreamHandle s) { run_classifier(op, s); }
void Cuda::run_fast(const nn_math::CrossEntropyFused<bf16>& op, cuda::StreamHandle s) { run_classifier(op, s); }
}  // namespace mt::backend

namespace mt::backend {

MT_LOSS_UNIT_OPS(MT_CUDA_UNIT_RUN)

}  // namespace mt::backend
