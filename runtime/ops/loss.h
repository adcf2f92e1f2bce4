// The loss family: cross-entropy over the vocabulary (forward, backward, and both in one pass over
// the logits), its vocabulary-parallel pieces for tensor parallelism, and the sampler's softmax.
// CUDA: runtime/cuda/loss.cu, the fused classifier as a block per row (fast,
// MESHTRAIN_CUDA_KERNELS=loss).
// defines: CrossEntropyForward, CrossEntropyBackward, CrossEntropyFused, VocabParallelMax, VocabParallelSumExp,
//          VocabParallelTargetLogit, VocabParallelLoss, SoftmaxRow, MT_LOSS_UNIT_OPS, MT_LOSS_FAST_OPS
#pragma once

#include "runtime/ops/math.h"
#include "runtime/ops/tolerance.h"

namespace mt::nn_math {

// One unit per row of logits [N, Vp]: over the first `vocab` columns, lse = log(sum(exp(x))) and
// loss = lse - x[target]. The padding columns never enter.
template <class T>
struct CrossEntropyForward {
  const T* logits;
  const std::int32_t* targets;
  float* losses;
  float* lse;
  std::int64_t rows, vocab, padded_vocab;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * padded_vocab;
    const float m = lane_max(vocab, [x](std::int64_t j) { return widen(x[j]); });
    const float sum = lane_sum(vocab, [x, m](std::int64_t j) { return exp_f(widen(x[j]) - m); });
    const float log_sum = m + ::logf(sum);
    lse[n] = log_sum;
    losses[n] = log_sum - widen(x[targets[n]]);
  }
};

// dlogits = (softmax - onehot(target)) * dloss over the first `vocab` columns, zero in the
// padding; one unit per row. dlogits may alias logits. For a vocabulary slice (tensor
// parallelism) the rows hold the columns [vocab_begin, vocab_begin + padded_vocab) of the full
// logits, `vocab` of them real; the one-hot term lands only where the slice holds the target.
template <class T>
struct CrossEntropyBackward {
  const T* logits;
  const std::int32_t* targets;
  const float* lse;
  T* dlogits;
  std::int64_t rows, vocab, padded_vocab;
  float dloss;
  std::int64_t vocab_begin;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * padded_vocab;
    T* d = dlogits + n * padded_vocab;
    const float log_sum = lse[n];
    const std::int64_t target = static_cast<std::int64_t>(targets[n]) - vocab_begin;
    const bool owned = target >= 0 && target < vocab;
    // Read before the loop overwrites it (dlogits may be logits).
    const float p_target = owned ? exp_f(widen(x[target]) - log_sum) : 0.0f;
    for (std::int64_t j = 0; j < vocab; ++j) d[j] = narrow_to<T>(exp_f(widen(x[j]) - log_sum) * dloss);
    if (owned) d[target] = narrow_to<T>((p_target - 1.0f) * dloss);
    for (std::int64_t j = vocab; j < padded_vocab; ++j) d[j] = narrow_to<T>(0.0f);
  }
};

// CrossEntropyForward then CrossEntropyBackward (the whole vocabulary, vocab_begin 0) on one row in
// one unit: losses, lse and dlogits come out as the two ops give them, bit for bit, while the row is
// at hand once. dlogits may alias logits (the backward reads each element before writing it).
template <class T>
struct CrossEntropyFused {
  const T* logits;
  const std::int32_t* targets;
  float* losses;
  float* lse;
  T* dlogits;
  std::int64_t rows, vocab, padded_vocab;
  float dloss;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    CrossEntropyForward<T>{logits, targets, losses, lse, rows, vocab, padded_vocab}(n);
    CrossEntropyBackward<T>{logits, targets, lse, dlogits, rows, vocab, padded_vocab, dloss, 0}(n);
  }
};

// Cross-entropy over a vocabulary slice, in pieces between which the caller allreduces over the
// tensor-parallel group: logits [N, cols] hold the columns [vocab_begin, vocab_begin + cols) of
// the full logits, the first `vocab` of them real (the others padding, never read). One unit per
// row; the row reductions are those of CrossEntropyForward (lane_max, lane_sum).

// row_max[n] = max of the real columns; the lowest float when the slice has none (it never wins
// the allreduce-max). T is the logits type.
template <class T>
struct VocabParallelMax {
  const T* logits;
  float* row_max;
  std::int64_t rows, vocab, cols;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * cols;
    row_max[n] = lane_max(vocab, [x](std::int64_t j) { return widen(x[j]); });
  }
};

// sum_exp[n] = sum over the real columns of exp(x - row_max[n]), row_max the global maximum; 0
// when the slice has none.
template <class T>
struct VocabParallelSumExp {
  const T* logits;
  const float* row_max;
  float* sum_exp;
  std::int64_t rows, vocab, cols;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * cols;
    const float m = row_max[n];
    sum_exp[n] = lane_sum(vocab, [x, m](std::int64_t j) { return exp_f(widen(x[j]) - m); });
  }
};

// target_logit[n] = x[targets[n] - vocab_begin] where the slice holds the target, else 0 (so the
// allreduce-sum over slices is exactly the target's logit).
template <class T>
struct VocabParallelTargetLogit {
  const T* logits;
  const std::int32_t* targets;
  float* target_logit;
  std::int64_t rows, cols, vocab_begin;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const std::int64_t target = static_cast<std::int64_t>(targets[n]) - vocab_begin;
    target_logit[n] = target >= 0 && target < cols ? widen(logits[n * cols + target]) : 0.0f;
  }
};

// From the allreduced statistics: lse = max + log(sum_exp), loss = lse - target_logit, the same
// expressions as CrossEntropyForward. All fp32; T is unused (every op has both instantiations).
template <class T>
struct VocabParallelLoss {
  const float* row_max;
  const float* sum_exp;
  const float* target_logit;
  float* losses;
  float* lse;
  std::int64_t rows;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const float log_sum = row_max[n] + ::logf(sum_exp[n]);
    lse[n] = log_sum;
    losses[n] = log_sum - target_logit[n];
  }
};

// probs[n, :vocab] = softmax(logits[n, :vocab] / temperature); one unit per row.
template <class T>
struct SoftmaxRow {
  const T* logits;
  float* probs;
  std::int64_t rows, vocab, padded_vocab;
  float temperature;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * padded_vocab;
    float* p = probs + n * vocab;
    const float max_logit = lane_max(vocab, [x](std::int64_t j) { return widen(x[j]); });
    for (std::int64_t j = 0; j < vocab; ++j) p[j] = exp_f((widen(x[j]) - max_logit) / temperature);
    const float inv = 1.0f / lane_sum(vocab, [p](std::int64_t j) { return p[j]; });
    for (std::int64_t j = 0; j < vocab; ++j) p[j] *= inv;
  }
};

MT_TOLERANCE(CrossEntropyForward, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order; CUDA's logf and FMAs: scale |lse| and |loss| of the row")
MT_TOLERANCE(CrossEntropyBackward, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, FMAs on CUDA: scale |dloss| of the row")
MT_TOLERANCE(CrossEntropyFused, .fp32 = kSumOrder, .bf16 = kBf16Step, .per_sqrt_terms = true,
             .why = "the block-per-row kernel sums the exponentials in another order: scale |lse| (loss) and |dloss| (dlogits), terms the vocabulary")
MT_TOLERANCE(VocabParallelMax, .fp32 = 0,
             .why = "a maximum: the same bits")
MT_TOLERANCE(VocabParallelSumExp, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, exp_f contracted into FMAs on CUDA: scale the sum")
MT_TOLERANCE(VocabParallelTargetLogit, .fp32 = 0,
             .why = "a copy of one logit: the same bits")
MT_TOLERANCE(VocabParallelLoss, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "CUDA's logf: scale |loss|")
MT_TOLERANCE(SoftmaxRow, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, exp_f contracted into FMAs on CUDA: scale 1 (probabilities)")

}  // namespace mt::nn_math

// The ops the backends run unit by unit (runtime/backend.h), and those with a kernel cut for the GPU.
#define MT_LOSS_UNIT_OPS(X)                                                                              \
  X(CrossEntropyForward) X(CrossEntropyBackward) X(CrossEntropyFused) X(VocabParallelMax)               \
  X(VocabParallelSumExp) X(VocabParallelTargetLogit) X(VocabParallelLoss) X(SoftmaxRow)
#define MT_LOSS_FAST_OPS(X) X(CrossEntropyFused, Loss)
