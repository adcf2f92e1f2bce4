// The vocabulary-parallel kernels of runtime/nn_kernels.h (tensor parallelism over the vocabulary:
// embedding over a slice of wte's rows, cross-entropy over a slice of the logits' columns) on the
// CPU, against the full single-rank kernels. One process simulates a tensor-parallel group of tp
// ranks: it splits the inputs into tp slices, runs the slice kernels on each, and combines their
// partial results on the host exactly as the allreduces between the steps would (Max for the row
// maximum, Sum in rank order for the rest).
//
// What must hold:
//  - embedding: the fp32 sum over slices of embedding_forward_slice (wpe on one slice only) is
//    embedding_forward bit for bit, in any order of the sum; embedding_backward_slice gives exactly
//    the full embedding_backward's rows of that slice, and the same dwpe.
//  - cross-entropy: with one slice, losses, lse and dlogits are cross_entropy_forward's and
//    cross_entropy_backward's bit for bit; split, the row maximum and target logit are still exact
//    and only sum_exp is added in another order, so losses and lse agree to a few fp32 roundings
//    (tolerance below); dlogits computed from the full lse are bit for bit the full dlogits'
//    columns (the one-hot lands on the slice holding the target, padding columns are zero), and
//    from the slices' own lse agree to the same few roundings.
// Sizes include an uneven split whose last slice holds 12 real columns and the rest padding, and
// one whose last slice holds padding only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/context.h"     // defines: DeviceContext, DeviceOptions
#include "runtime/dtype.h"       // defines: bf16
#include "runtime/nn_kernels.h"  // defines: nn::embedding_forward, nn::embedding_forward_slice,
//          nn::embedding_backward, nn::embedding_backward_slice, nn::cross_entropy_forward, nn::cross_entropy_backward,
//          nn::vocab_parallel_max, nn::vocab_parallel_sum_exp, nn::vocab_parallel_target_logit, nn::vocab_parallel_loss,
//          nn::vocab_parallel_cross_entropy_backward
#include "runtime/tensor.h"      // defines: Tensor

namespace mt {
namespace {

using i64 = std::int64_t;
using Floats = std::vector<float>;

std::size_t idx(i64 i) { return static_cast<std::size_t>(i); }

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

Floats random_floats(std::mt19937& rng, i64 n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats v(idx(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::int32_t> random_ids(std::mt19937& rng, i64 n, int limit) {
  std::uniform_int_distribution<int> dist(0, limit - 1);
  std::vector<std::int32_t> v(idx(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Columns [begin, begin + count) of a row-major [rows, cols] matrix.
template <class T>
std::vector<T> columns(const std::vector<T>& m, i64 rows, i64 cols, i64 begin, i64 count) {
  std::vector<T> out(idx(rows * count));
  for (i64 n = 0; n < rows; ++n)
    for (i64 j = 0; j < count; ++j) out[idx(n * count + j)] = m[idx(n * cols + begin + j)];
  return out;
}

// Rows [begin, begin + count) of a row-major [rows, cols] matrix.
Floats row_block(const Floats& m, i64 cols, i64 begin, i64 count) {
  return Floats(m.begin() + begin * cols, m.begin() + (begin + count) * cols);
}

// Number of elements whose bits differ (described in the message), 0 when identical.
::testing::AssertionResult same_bits(const Floats& got, const Floats& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want " << want.size();
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (bits(got[i]) != bits(want[i]) && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << got.size() << " elements differ in their bits; first at " << first << ": got " << got[first]
     << ", want " << want[first];
  return ::testing::AssertionFailure() << os.str();
}

// |got - want| <= abs_tol * max|want| + rel_tol * |want| for every element (NaN fails).
::testing::AssertionResult all_close(const Floats& got, const Floats& want, double rel_tol, double abs_tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want " << want.size();
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  std::size_t bad = 0, first = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err);
    if (!(err <= abs_tol * scale + rel_tol * std::abs(static_cast<double>(want[i]))) && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << got.size() << " elements differ; first at " << first << ": got " << got[first] << ", want "
     << want[first] << "; max |error| " << worst << ", max |want| " << scale;
  return ::testing::AssertionFailure() << os.str();
}

// Tensors to and from host floats, in fp32 or (rounded to nearest even) bf16.
Tensor to_tensor(const Floats& v, Shape shape, DType dtype, DeviceContext& ctx) {
  if (dtype == DType::F32) return Tensor::from_host(v, std::move(shape), ctx);
  std::vector<bf16> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = bf16::from_float(v[i]);
  return Tensor::from_host(b, std::move(shape), ctx);
}

Floats floats_of(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.to_host<float>();
  const std::vector<bf16> b = t.to_host<bf16>();
  Floats v(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) v[i] = b[i].to_float();
  return v;
}

// Values exactly representable in `dtype`, so the full and sliced runs see the same logits.
Floats representable(Floats v, DType dtype) {
  if (dtype == DType::BF16)
    for (float& x : v) x = bf16::from_float(x).to_float();
  return v;
}

class VocabParallel : public ::testing::TestWithParam<int> {
 protected:
  VocabParallel() : ctx(DeviceOptions{Device::cpu(), 0, GetParam()}) {}
  DeviceContext ctx;
  std::mt19937 rng{20250117u};
};

INSTANTIATE_TEST_SUITE_P(CpuThreads, VocabParallel, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return "threads" + std::to_string(param.param);
                         });

// ---- Embedding ---------------------------------------------------------------------------------

TEST_P(VocabParallel, EmbeddingSlicesSumToTheFullEmbeddingBitForBit) {
  // C = 70 spans two 64-column blocks of the backward; tokens repeat, and reach every slice.
  const i64 B = 3, T = 7, C = 70, Vp = 24, maxT = 9;
  const std::vector<std::int32_t> tokens = random_ids(rng, B * T, 20);
  const Floats wte = random_floats(rng, Vp * C, -1, 1), wpe = random_floats(rng, maxT * C, -1, 1);
  const Tensor tokens_t = Tensor::from_host(tokens, {B, T}, ctx);
  const Tensor wpe_t = Tensor::from_host(wpe, {maxT, C}, ctx);
  Tensor full = Tensor::empty({B, T, C}, DType::F32, ctx);
  nn::embedding_forward(ctx, tokens_t, Tensor::from_host(wte, {Vp, C}, ctx), wpe_t, full);
  const Floats want = full.to_host<float>();

  for (const i64 tp : {1, 2, 3, 4}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const i64 Vl = Vp / tp;
    std::vector<Floats> parts;
    for (i64 r = 0; r < tp; ++r) {
      Tensor out = Tensor::from_host(Floats(idx(B * T * C), 777.0f), {B, T, C}, ctx);  // overwritten
      nn::embedding_forward_slice(ctx, tokens_t, Tensor::from_host(row_block(wte, C, r * Vl, Vl), {Vl, C}, ctx),
                                  r * Vl, r == 0 ? &wpe_t : nullptr, out);
      parts.push_back(out.to_host<float>());
      // A slice without wpe is exactly its own rows, and zero for the tokens it does not hold.
      if (r > 0) {
        for (i64 n = 0; n < B * T; ++n) {
          const i64 local = tokens[idx(n)] - r * Vl;
          for (i64 c = 0; c < C; ++c) {
            const float expect = local >= 0 && local < Vl ? wte[idx(tokens[idx(n)] * C + c)] : 0.0f;
            ASSERT_EQ(bits(parts.back()[idx(n * C + c)]), bits(expect)) << "slice " << r << " row " << n;
          }
        }
      }
    }
    // The allreduce-sum, in rank order and in reverse order.
    Floats forward(idx(B * T * C), 0.0f), reverse(idx(B * T * C), 0.0f);
    for (i64 r = 0; r < tp; ++r)
      for (std::size_t i = 0; i < forward.size(); ++i) forward[i] += parts[idx(r)][i];
    for (i64 r = tp - 1; r >= 0; --r)
      for (std::size_t i = 0; i < reverse.size(); ++i) reverse[i] += parts[idx(r)][i];
    EXPECT_TRUE(same_bits(forward, want));
    EXPECT_TRUE(same_bits(reverse, want));
  }

  // wpe on a slice other than the first, and bf16 output of a single full slice.
  Tensor out = Tensor::empty({B, T, C}, DType::F32, ctx);
  nn::embedding_forward_slice(ctx, tokens_t, Tensor::from_host(wte, {Vp, C}, ctx), 0, &wpe_t, out);
  EXPECT_TRUE(same_bits(out.to_host<float>(), want));
  Tensor full_bf = Tensor::empty({B, T, C}, DType::BF16, ctx), slice_bf = Tensor::empty({B, T, C}, DType::BF16, ctx);
  nn::embedding_forward(ctx, tokens_t, Tensor::from_host(wte, {Vp, C}, ctx), wpe_t, full_bf);
  nn::embedding_forward_slice(ctx, tokens_t, Tensor::from_host(wte, {Vp, C}, ctx), 0, &wpe_t, slice_bf);
  EXPECT_TRUE(same_bits(floats_of(slice_bf), floats_of(full_bf)));
}

TEST_P(VocabParallel, EmbeddingSliceBackwardGivesTheFullGradientsRows) {
  const i64 B = 3, T = 7, C = 70, Vp = 24, maxT = 9;
  const std::vector<std::int32_t> tokens = random_ids(rng, B * T, 20);
  for (const DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype == DType::F32 ? "fp32 dout" : "bf16 dout");
    const Tensor tokens_t = Tensor::from_host(tokens, {B, T}, ctx);
    const Tensor dout = to_tensor(random_floats(rng, B * T * C, -1, 1), {B, T, C}, dtype, ctx);
    // "+=": start from nonzero gradients.
    const Floats dwte0 = random_floats(rng, Vp * C, -1, 1), dwpe0 = random_floats(rng, maxT * C, -1, 1);
    Tensor dwte = Tensor::from_host(dwte0, {Vp, C}, ctx), dwpe = Tensor::from_host(dwpe0, {maxT, C}, ctx);
    nn::embedding_backward(ctx, tokens_t, dout, dwte, dwpe);
    const Floats want_dwte = dwte.to_host<float>(), want_dwpe = dwpe.to_host<float>();

    for (const i64 tp : {1, 2, 3, 4}) {
      SCOPED_TRACE("tp " + std::to_string(tp));
      const i64 Vl = Vp / tp;
      for (i64 r = 0; r < tp; ++r) {
        Tensor dwte_slice = Tensor::from_host(row_block(dwte0, C, r * Vl, Vl), {Vl, C}, ctx);
        Tensor dwpe_r = Tensor::from_host(dwpe0, {maxT, C}, ctx);
        nn::embedding_backward_slice(ctx, tokens_t, dout, r * Vl, dwte_slice, r == tp - 1 ? &dwpe_r : nullptr);
        EXPECT_TRUE(same_bits(dwte_slice.to_host<float>(), row_block(want_dwte, C, r * Vl, Vl))) << "slice " << r;
        EXPECT_TRUE(same_bits(dwpe_r.to_host<float>(), r == tp - 1 ? want_dwpe : dwpe0)) << "slice " << r;
      }
    }
  }
}

// ---- Cross-entropy -----------------------------------------------------------------------------

struct Split {
  int vocab;
  i64 Vp, tp;
};

std::string describe(const Split& s) {
  return "vocab " + std::to_string(s.vocab) + ", Vp " + std::to_string(s.Vp) + ", tp " + std::to_string(s.tp);
}

// tp 1, 2, 4 on vocab 250 of 256; 300 of 384 over 4 (the last slice, [288, 384), holds 12 real
// columns); 250 of 384 over 3 (the last slice, [256, 384), holds none).
const Split kSplits[] = {{250, 256, 1}, {250, 256, 2}, {250, 256, 4}, {300, 384, 4}, {250, 384, 3}};

// What the pieces give, combined as the allreduces would.
struct SliceResult {
  Floats losses, lse;
  std::vector<Floats> dlogits;           // per slice, from the combined lse
  std::vector<Floats> dlogits_full_lse;  // per slice, from the full kernel's lse
};

SliceResult run_slices(DeviceContext& ctx, const Split& s, DType dtype, const Floats& logits,
                       const std::vector<std::int32_t>& targets, const Tensor& full_lse, float dloss) {
  const i64 N = static_cast<i64>(targets.size()), Vl = s.Vp / s.tp;
  const Tensor targets_t = Tensor::from_host(targets, {N}, ctx);
  std::vector<Tensor> slices;
  for (i64 r = 0; r < s.tp; ++r) slices.push_back(to_tensor(columns(logits, N, s.Vp, r * Vl, Vl), {N, Vl}, dtype, ctx));

  // Step 1: local maxima, allreduce Max.
  Floats row_max(idx(N), -std::numeric_limits<float>::infinity());
  for (i64 r = 0; r < s.tp; ++r) {
    Tensor local = Tensor::from_host(Floats(idx(N), 777.0f), {N}, ctx);
    nn::vocab_parallel_max(ctx, slices[idx(r)], r * Vl, s.vocab, local);
    const Floats v = local.to_host<float>();
    for (i64 n = 0; n < N; ++n) row_max[idx(n)] = std::max(row_max[idx(n)], v[idx(n)]);
  }
  const Tensor row_max_t = Tensor::from_host(row_max, {N}, ctx);
  // Step 2: local sums of exp and target logits, allreduce Sum (in rank order).
  Floats sum_exp(idx(N), 0.0f), target_logit(idx(N), 0.0f);
  for (i64 r = 0; r < s.tp; ++r) {
    Tensor se = Tensor::from_host(Floats(idx(N), 777.0f), {N}, ctx);
    Tensor tl = Tensor::from_host(Floats(idx(N), 777.0f), {N}, ctx);
    nn::vocab_parallel_sum_exp(ctx, slices[idx(r)], r * Vl, s.vocab, row_max_t, se);
    nn::vocab_parallel_target_logit(ctx, slices[idx(r)], targets_t, r * Vl, tl);
    const Floats a = se.to_host<float>(), b = tl.to_host<float>();
    for (i64 n = 0; n < N; ++n) {
      sum_exp[idx(n)] += a[idx(n)];
      target_logit[idx(n)] += b[idx(n)];
      // A slice without the target contributes an exact 0.
      const i64 local = targets[idx(n)] - r * Vl;
      if (local < 0 || local >= Vl) {
        EXPECT_EQ(bits(b[idx(n)]), 0u) << "slice " << r << " row " << n;
      }
    }
  }
  // Step 3: losses and lse, the same on every rank.
  Tensor losses = Tensor::empty({N}, DType::F32, ctx), lse = Tensor::empty({N}, DType::F32, ctx);
  nn::vocab_parallel_loss(ctx, row_max_t, Tensor::from_host(sum_exp, {N}, ctx),
                          Tensor::from_host(target_logit, {N}, ctx), losses, lse);
  SliceResult result{losses.to_host<float>(), lse.to_host<float>(), {}, {}};
  // Step 4: each slice's gradient, out of place from the combined lse, in place from the full one.
  for (i64 r = 0; r < s.tp; ++r) {
    Tensor d = to_tensor(Floats(idx(N * Vl), 777.0f), {N, Vl}, dtype, ctx);
    nn::vocab_parallel_cross_entropy_backward(ctx, slices[idx(r)], targets_t, lse, r * Vl, s.vocab, dloss, d);
    result.dlogits.push_back(floats_of(d));
    Tensor in_place = to_tensor(columns(logits, N, s.Vp, r * Vl, Vl), {N, Vl}, dtype, ctx);
    nn::vocab_parallel_cross_entropy_backward(ctx, in_place, targets_t, full_lse, r * Vl, s.vocab, dloss, in_place);
    result.dlogits_full_lse.push_back(floats_of(in_place));
  }
  return result;
}

// Tolerances for the split cross-entropy against the full kernel, fp32 statistics. The row max
// and the target logit are exact (a max and a sum with exact zeros); the exp terms are the same
// fp32 values. Only sum_exp differs: the same n <= 300 positive terms (each <= 1, the largest
// exactly 1) added in another order. Each order is 8 lanes of ~n/8 sequential additions then a
// tree of 3 (and, split, up to tp - 1 more), so each result has relative error below
// (n/8 + 6) * 2^-24 ~ 2.6e-6 at worst and ~sqrt(n/8) * 2^-24 ~ 4e-7 typically, as do their
// logs in absolute terms. lse = max + log(sum_exp) is >= log(sum_exp) >= 0 here and of order
// 5 .. 10, and losses = lse - target of order 1 .. 10 on these inputs (logits uniform in
// [-4, 4] over >= 250 columns), so 1e-6 of the largest value plus 1e-6 of each is several times
// the typical difference, and well below what a wrong slice offset, a padding column let in or
// a target counted twice would do (a change of order 1e-2 or more).
constexpr double kStatRel = 1e-6, kStatAbs = 1e-6;
// dlogits = exp(x - lse) * dloss (less dloss at the target): a difference d in lse changes each
// element by a factor e^-d, |d| <= ~1e-6 as above, so 1e-6 relative to each element (plus the
// same of the row scale, for the target's p - 1) holds. In bf16 the element is rounded to 8
// bits, and a 1e-6 change can move it across a rounding boundary: one bf16 ulp, 2^-8 of it.
constexpr double kGradRel = 1e-6, kGradAbs = 1e-6;
constexpr double kBf16Rel = 1.0 / 256;

TEST_P(VocabParallel, CrossEntropyPiecesMatchTheFullKernel) {
  for (const DType dtype : {DType::F32, DType::BF16}) {
    for (const Split& s : kSplits) {
      SCOPED_TRACE(describe(s) + (dtype == DType::F32 ? ", fp32" : ", bf16"));
      const i64 N = 37, Vl = s.Vp / s.tp;
      ASSERT_EQ(Vl * s.tp, s.Vp);
      // Padding columns hold large values, which would dominate the loss if they were read.
      Floats logits = random_floats(rng, N * s.Vp, -4, 4);
      for (i64 n = 0; n < N; ++n)
        for (i64 j = s.vocab; j < s.Vp; ++j) logits[idx(n * s.Vp + j)] = 50.0f;
      logits = representable(logits, dtype);
      std::vector<std::int32_t> targets = random_ids(rng, N, s.vocab);
      targets[0] = 0;
      targets[1] = s.vocab - 1;  // the last real column, in the last slice holding real columns
      const float dloss = 1.0f / static_cast<float>(N);

      const Tensor full_logits = to_tensor(logits, {N, s.Vp}, dtype, ctx);
      const Tensor targets_t = Tensor::from_host(targets, {N}, ctx);
      Tensor losses = Tensor::empty({N}, DType::F32, ctx), lse = Tensor::empty({N}, DType::F32, ctx);
      nn::cross_entropy_forward(ctx, full_logits, targets_t, s.vocab, losses, lse);
      Tensor dlogits = to_tensor(Floats(idx(N * s.Vp), 777.0f), {N, s.Vp}, dtype, ctx);
      nn::cross_entropy_backward(ctx, full_logits, targets_t, lse, s.vocab, dloss, dlogits);
      const Floats want_losses = losses.to_host<float>(), want_lse = lse.to_host<float>();
      const Floats want_d = floats_of(dlogits);

      const SliceResult got = run_slices(ctx, s, dtype, logits, targets, lse, dloss);
      if (s.tp == 1) {  // the same reductions in the same order
        EXPECT_TRUE(same_bits(got.losses, want_losses));
        EXPECT_TRUE(same_bits(got.lse, want_lse));
      }
      EXPECT_TRUE(all_close(got.losses, want_losses, kStatRel, kStatAbs));
      EXPECT_TRUE(all_close(got.lse, want_lse, kStatRel, kStatAbs));
      for (i64 r = 0; r < s.tp; ++r) {
        SCOPED_TRACE("slice " + std::to_string(r));
        const Floats want_cols = columns(want_d, N, s.Vp, r * Vl, Vl);
        // Same lse: the same expression on the same values.
        EXPECT_TRUE(same_bits(got.dlogits_full_lse[idx(r)], want_cols));
        if (s.tp == 1) {
          EXPECT_TRUE(same_bits(got.dlogits[idx(r)], want_cols));
        }
        const double rel = dtype == DType::F32 ? kGradRel : kBf16Rel;
        EXPECT_TRUE(all_close(got.dlogits[idx(r)], want_cols, rel, kGradAbs));
        // Padding columns are exactly zero (the full kernel's are too, checked by the bits above).
        for (i64 n = 0; n < N; ++n)
          for (i64 j = 0; j < Vl; ++j)
            if (r * Vl + j >= s.vocab) {
              ASSERT_EQ(bits(got.dlogits[idx(r)][idx(n * Vl + j)]), 0u);
            }
      }
    }
  }
}

TEST_P(VocabParallel, SliceWithoutRealColumnsGivesNeutralStatistics) {
  // vocab 250 of 384 over 3: slice 2 = [256, 384) is padding only.
  const i64 N = 5, Vl = 128, vocab_begin = 256;
  const int vocab = 250;
  const Tensor logits = Tensor::from_host(random_floats(rng, N * Vl, -4, 4), {N, Vl}, ctx);
  const Tensor targets = Tensor::from_host(random_ids(rng, N, vocab), {N}, ctx);
  Tensor row_max = Tensor::empty({N}, DType::F32, ctx), sum_exp = Tensor::empty({N}, DType::F32, ctx),
         target = Tensor::empty({N}, DType::F32, ctx);
  nn::vocab_parallel_max(ctx, logits, vocab_begin, vocab, row_max);
  const Tensor global_max = Tensor::from_host(Floats(idx(N), 1.0f), {N}, ctx);
  nn::vocab_parallel_sum_exp(ctx, logits, vocab_begin, vocab, global_max, sum_exp);
  nn::vocab_parallel_target_logit(ctx, logits, targets, vocab_begin, target);
  for (float m : row_max.to_host<float>()) EXPECT_LE(m, std::numeric_limits<float>::lowest());
  for (float v : sum_exp.to_host<float>()) EXPECT_EQ(bits(v), 0u);
  for (float v : target.to_host<float>()) EXPECT_EQ(bits(v), 0u);
  Tensor d = Tensor::from_host(Floats(idx(N * Vl), 777.0f), {N, Vl}, ctx);
  nn::vocab_parallel_cross_entropy_backward(ctx, logits, targets, global_max, vocab_begin, vocab, 1.0f, d);
  for (float v : d.to_host<float>()) EXPECT_EQ(bits(v), 0u);
}

// Units own their outputs: the same bits at 1 and 2 threads.
TEST(VocabParallelThreads, ResultsAreBitwiseIdenticalAtOneAndTwoThreads) {
  auto run = [](int threads) {
    DeviceContext ctx(DeviceOptions{Device::cpu(), 0, threads});
    std::mt19937 rng(7);
    const Split s{300, 384, 4};
    const i64 N = 80;
    const Floats logits = random_floats(rng, N * s.Vp, -4, 4);
    const std::vector<std::int32_t> targets = random_ids(rng, N, s.vocab);
    Tensor losses = Tensor::empty({N}, DType::F32, ctx), lse = Tensor::empty({N}, DType::F32, ctx);
    nn::cross_entropy_forward(ctx, Tensor::from_host(logits, {N, s.Vp}, ctx), Tensor::from_host(targets, {N}, ctx),
                              s.vocab, losses, lse);
    const SliceResult r = run_slices(ctx, s, DType::F32, logits, targets, lse, 0.5f);
    Floats all = r.losses;
    all.insert(all.end(), r.lse.begin(), r.lse.end());
    for (const Floats& d : r.dlogits) all.insert(all.end(), d.begin(), d.end());
    // Embedding backward over a slice, many repeated tokens, C = 200 (four column blocks).
    const i64 B = 4, T = 20, C = 200, Vl = 12;
    const std::vector<std::int32_t> tokens = random_ids(rng, B * T, 40);
    Tensor dwte = Tensor::zeros({Vl, C}, DType::F32, ctx), dwpe = Tensor::zeros({T, C}, DType::F32, ctx);
    nn::embedding_backward_slice(ctx, Tensor::from_host(tokens, {B, T}, ctx),
                                 Tensor::from_host(random_floats(rng, B * T * C, -1, 1), {B, T, C}, ctx), 24, dwte,
                                 &dwpe);
    for (const Tensor* t : {&dwte, &dwpe}) {
      const Floats v = t->to_host<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  EXPECT_TRUE(same_bits(run(2), run(1)));
}

}  // namespace
}  // namespace mt
