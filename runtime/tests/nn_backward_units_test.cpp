// The backward kernels that sum over many rows (attention, token and position embeddings, the
// column sums of parameter gradients) and run as many small units: their results are bitwise the
// same at 1, 2, 3 and 7 CPU threads and at both unit widths (1 column per unit, as CUDA runs
// them, and kColumnBlock, as the CPU does).
// The token-embedding gradient equals, bit for bit, a plain loop over the positions in order
// (repeated tokens, tokens outside a vocabulary slice, rows no token hits), its index equals a
// stable sort, and attention backward agrees with a double-precision loop. Where a GPU is usable
// the embedding gradient is also the plain loop bit for bit there, and attention backward repeats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/context.h"     // defines: DeviceContext, DeviceOptions
#include "runtime/nn_kernels.h"  // defines: nn::embedding_backward, nn::embedding_backward_slice,
//          nn::attention_forward, nn::attention_backward
#include "runtime/tensor.h"      // defines: Tensor
#include "tests/gpu_skip.h"       // defines: MT_SKIP_WITHOUT_GPU

namespace mt {
namespace {

using i64 = std::int64_t;
using nn_math::kColumnBlock;

constexpr int kThreadCounts[] = {1, 2, 3, 7};

DeviceOptions cpu_options(int threads) { return DeviceOptions{Device::cpu(), 0, threads}; }
DeviceOptions gpu_options() { return DeviceOptions{Device::cuda(0), 0, 1}; }

std::size_t idx(i64 i) { return static_cast<std::size_t>(i); }

template <class T>
T from_float(float x) {
  if constexpr (sizeof(T) == 2) {
    return bf16::from_float(x);
  } else {
    return x;
  }
}

// Uniform in [lo, hi), each value exactly a T.
template <class T>
std::vector<T> random_values(std::mt19937& rng, i64 n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> v(idx(n));
  for (T& x : v) x = from_float<T>(dist(rng));
  return v;
}

// The bits of each element, whatever its type (float, bf16, int32).
template <class T>
std::vector<std::uint32_t> bits_of(const std::vector<T>& v) {
  std::vector<std::uint32_t> out(v.size(), 0);
  for (std::size_t i = 0; i < v.size(); ++i) std::memcpy(&out[i], &v[i], sizeof(T));
  return out;
}

template <class T>
DType dtype_for() {
  return dtype_of<T>::value;
}

std::vector<std::int32_t> random_tokens(std::mt19937& rng, i64 n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi - 1);
  std::vector<std::int32_t> v(idx(n));
  for (std::int32_t& t : v) t = dist(rng);
  return v;
}

::testing::AssertionResult same_bits(const std::vector<std::uint32_t>& got, const std::vector<std::uint32_t>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && differ++ == 0) first = i;
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differ << " of " << got.size() << " elements differ in their bits, first at "
                                       << first;
}

// ---- Token embedding: the sort index ------------------------------------------------------------

// EmbeddingTokenOrder's index is the stable sort of the positions by key, keys outside the slice
// (vocab_rows) last: checked against std::stable_sort with ties in position order.
TEST(NnBackwardUnits, TokenOrderIsAStableSortByRowWithOtherSlicesLast) {
  std::mt19937 rng(7);
  const i64 N = 300, vocab_begin = 20, vocab_rows = 30;
  std::vector<std::int32_t> tokens = random_tokens(rng, N, 0, 70);  // some below, some above the slice
  // The slice's first and last rows and its two neighbours outside, for sure.
  tokens[10] = vocab_begin;
  tokens[11] = vocab_begin + vocab_rows - 1;
  tokens[12] = vocab_begin - 1;
  tokens[13] = vocab_begin + vocab_rows;
  std::vector<std::int32_t> order(idx(N), -1), keys(idx(N), -1);
  const nn_math::EmbeddingTokenOrder<float> op{tokens.data(), order.data(), keys.data(), N, vocab_begin, vocab_rows};
  backend::Cpu::run(op, 3);

  auto key = [&](std::int32_t n) {
    const i64 local = tokens[idx(n)] - vocab_begin;
    return local >= 0 && local < vocab_rows ? local : vocab_rows;
  };
  std::vector<std::int32_t> want(idx(N));
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](std::int32_t a, std::int32_t b) { return key(a) < key(b); });
  EXPECT_EQ(order, want);
  for (i64 s = 0; s < N; ++s) EXPECT_EQ(keys[idx(s)], key(want[idx(s)])) << "slot " << s;
  EXPECT_EQ(keys.front(), 0);
  EXPECT_EQ(keys.back(), vocab_rows);
  EXPECT_NE(std::find(keys.begin(), keys.end(), vocab_rows - 1), keys.end());
}

// ---- Token and position embedding: against plain loops in position order --------------------------

// dwte rows [vocab_begin, vocab_begin + rows) += dout over the positions holding them, n in order;
// dwpe[t] += dout[b, t] for b in order. Plain loops: the documented sums in the documented order.
template <class T>
void plain_embedding_backward(const std::vector<std::int32_t>& tokens, const std::vector<T>& dout, i64 B, i64 T_,
                              i64 C, i64 vocab_begin, std::vector<float>& dwte, std::vector<float>* dwpe) {
  const i64 rows = static_cast<i64>(dwte.size()) / C;
  for (i64 n = 0; n < B * T_; ++n) {
    const i64 local = tokens[idx(n)] - vocab_begin;
    if (local < 0 || local >= rows) continue;
    for (i64 c = 0; c < C; ++c) dwte[idx(local * C + c)] += widen(dout[idx(n * C + c)]);
  }
  if (dwpe == nullptr) return;
  for (i64 t = 0; t < T_; ++t)
    for (i64 b = 0; b < B; ++b)
      for (i64 c = 0; c < C; ++c) (*dwpe)[idx(t * C + c)] += widen(dout[idx((b * T_ + t) * C + c)]);
}

template <class T>
class EmbeddingBackwardOrder : public ::testing::Test {};
using ActivationTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(EmbeddingBackwardOrder, ActivationTypes);

// Full table and a slice on the device of `options`: bit for bit the plain loops (on a GPU too:
// the sums are additions only, which no compiler may contract or reorder). C = 150 is three column
// blocks (64, 64, 22); 13 distinct tokens over 240 positions repeat each ~18 times, with values
// spread over three decades, so summing in another order changes bits (checked).
template <class T>
void expect_embedding_backward_is_the_plain_loop(const DeviceOptions& options) {
  std::mt19937 rng(11);
  const i64 B = 4, T_ = 60, C = 150, V = 40, N = B * T_;
  std::vector<std::int32_t> tokens = random_tokens(rng, N, 0, 13);
  tokens[5] = V - 1;  // the last row, once
  std::vector<T> dout = random_values<T>(rng, N * C, -1.0f, 1.0f);
  for (i64 i = 0; i < N * C; i += 7) dout[idx(i)] = from_float<T>(widen(dout[idx(i)]) * 1000.0f);
  const std::vector<float> dwte0 = random_values<float>(rng, V * C, -1.0f, 1.0f);
  const std::vector<float> dwpe0 = random_values<float>(rng, T_ * C, -1.0f, 1.0f);

  std::vector<float> want_wte = dwte0, want_wpe = dwpe0;
  plain_embedding_backward(tokens, dout, B, T_, C, 0, want_wte, &want_wpe);
  // The order is observable: the same terms summed backwards give other bits somewhere.
  std::vector<float> reversed = dwte0;
  for (i64 n = N - 1; n >= 0; --n)
    for (i64 c = 0; c < C; ++c) reversed[idx(tokens[idx(n)] * C + c)] += widen(dout[idx(n * C + c)]);
  EXPECT_FALSE(same_bits(bits_of(reversed), bits_of(want_wte))) << "input too benign to tell orders apart";
  // Rows 13 .. V-2 are hit by no token: they must come back as they were.
  for (i64 c = 0; c < C; ++c) ASSERT_EQ(want_wte[idx(20 * C + c)], dwte0[idx(20 * C + c)]);

  // A slice holding rows [8, 8 + 24): tokens below and above it contribute nothing.
  const i64 begin = 8, rows = 24;
  const std::vector<float> slice0(dwte0.begin() + begin * C, dwte0.begin() + (begin + rows) * C);
  std::vector<float> want_slice = slice0;
  plain_embedding_backward(tokens, dout, B, T_, C, begin, want_slice, nullptr);

  DeviceContext ctx(options);
  const Tensor tokens_t = Tensor::from_host(tokens, {B, T_}, ctx);
  const Tensor dout_t = Tensor::from_host(dout, {B, T_, C}, ctx);
  Tensor dwte = Tensor::from_host(dwte0, {V, C}, ctx), dwpe = Tensor::from_host(dwpe0, {T_, C}, ctx);
  nn::embedding_backward(ctx, tokens_t, dout_t, dwte, dwpe);
  EXPECT_TRUE(same_bits(bits_of(dwte.to_host<float>()), bits_of(want_wte))) << "dwte";
  EXPECT_TRUE(same_bits(bits_of(dwpe.to_host<float>()), bits_of(want_wpe))) << "dwpe";

  Tensor slice = Tensor::from_host(slice0, {rows, C}, ctx);
  nn::embedding_backward_slice(ctx, tokens_t, dout_t, begin, slice, nullptr);
  EXPECT_TRUE(same_bits(bits_of(slice.to_host<float>()), bits_of(want_slice))) << "slice";
}

TYPED_TEST(EmbeddingBackwardOrder, EqualsAPlainLoopOverPositionsInOrder) {
  for (int threads : kThreadCounts) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    expect_embedding_backward_is_the_plain_loop<TypeParam>(cpu_options(threads));
  }
}

TYPED_TEST(EmbeddingBackwardOrder, EqualsAPlainLoopOverPositionsInOrderOnTheGpu) {
  MT_SKIP_WITHOUT_GPU();
  expect_embedding_backward_is_the_plain_loop<TypeParam>(gpu_options());
}

// ---- Attention backward: against a double-precision loop -----------------------------------------

// The gradient of qkv [B, T, 3C] for dout [B, T, C] given the probabilities att [B, H, T, T], in
// double, straight from the definition (as the pre-split kernel computed it).
std::vector<double> plain_attention_backward(const std::vector<float>& dout, const std::vector<float>& qkv,
                                             const std::vector<float>& att, i64 B, i64 T_, i64 C, i64 H) {
  const i64 hs = C / H, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> d(idx(B * T_ * C3), 0.0), datt(idx(T_));
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < H; ++h)
      for (i64 t = 0; t < T_; ++t) {
        const float* p = &att[idx(((b * H + h) * T_ + t) * T_)];
        const i64 g = (b * T_ + t) * C + h * hs;
        double weighted = 0.0;
        for (i64 t2 = 0; t2 <= t; ++t2) {
          const i64 v = (b * T_ + t2) * C3 + 2 * C + h * hs;
          double dot = 0.0;
          for (i64 i = 0; i < hs; ++i) {
            dot += static_cast<double>(dout[idx(g + i)]) * qkv[idx(v + i)];
            d[idx(v + i)] += static_cast<double>(p[t2]) * dout[idx(g + i)];
          }
          datt[idx(t2)] = dot;
          weighted += p[t2] * dot;
        }
        const i64 q = (b * T_ + t) * C3 + h * hs;
        for (i64 t2 = 0; t2 <= t; ++t2) {
          const double dscore = p[t2] * (datt[idx(t2)] - weighted) * scale;
          const i64 k = (b * T_ + t2) * C3 + C + h * hs;
          for (i64 i = 0; i < hs; ++i) {
            d[idx(q + i)] += dscore * qkv[idx(k + i)];
            d[idx(k + i)] += dscore * qkv[idx(q + i)];
          }
        }
      }
  return d;
}

// hs = 80 is two channel blocks (64 + 16) and T = 70 two blocks of key positions on the CPU. The
// output is prefilled with garbage: every element must be overwritten. fp32 sums of up to 80
// terms of size ~1 agree with double to ~1e-5 of the largest gradient (with or without fused
// multiply-adds); a lost term, scale or position moves elements by far more. Returns the bits.
std::vector<std::uint32_t> expect_attention_backward_near_the_plain_loop(const DeviceOptions& options) {
  std::mt19937 rng(5);
  const i64 B = 2, T_ = 70, C = 160, H = 2;
  const std::vector<float> qkv = random_values<float>(rng, B * T_ * 3 * C, -1.0f, 1.0f);
  const std::vector<float> dout = random_values<float>(rng, B * T_ * C, -1.0f, 1.0f);
  DeviceContext ctx(options);
  const Tensor qkv_t = Tensor::from_host(qkv, {B, T_, 3 * C}, ctx);
  Tensor out = Tensor::empty({B, T_, C}, DType::F32, ctx), att = Tensor::empty({B, H, T_, T_}, DType::F32, ctx);
  nn::attention_forward(ctx, qkv_t, static_cast<int>(H), out, att);
  Tensor dqkv = Tensor::from_host(std::vector<float>(idx(B * T_ * 3 * C), 777.0f), {B, T_, 3 * C}, ctx);
  nn::attention_backward(ctx, Tensor::from_host(dout, {B, T_, C}, ctx), qkv_t, att, static_cast<int>(H), dqkv);

  const std::vector<double> want = plain_attention_backward(dout, qkv, att.to_host<float>(), B, T_, C, H);
  const std::vector<float> got = dqkv.to_host<float>();
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  EXPECT_GT(scale, 0.1);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= 1e-5 * scale + 1e-5 * std::abs(want[i]))) {
      if (bad++ == 0) ADD_FAILURE() << "first difference at " << i << ": got " << got[i] << ", want " << want[i];
    }
  EXPECT_EQ(bad, 0u) << "of " << want.size() << " elements";
  return bits_of(got);
}

TEST(NnBackwardUnits, AttentionBackwardMatchesAPlainLoopAndOverwrites) {
  expect_attention_backward_near_the_plain_loop(cpu_options(2));
}

// On a GPU: the same check, and a second run gives the same bits.
TEST(NnBackwardUnits, AttentionBackwardMatchesAPlainLoopAndRepeatsOnTheGpu) {
  MT_SKIP_WITHOUT_GPU();
  const std::vector<std::uint32_t> first = expect_attention_backward_near_the_plain_loop(gpu_options());
  EXPECT_TRUE(same_bits(expect_attention_backward_near_the_plain_loop(gpu_options()), first));
}

// ---- Thread counts and unit widths ---------------------------------------------------------------

template <class T>
class BackwardUnits : public ::testing::Test {};
TYPED_TEST_SUITE(BackwardUnits, ActivationTypes);

// attention_backward at every thread count gives the bits of 1 thread.
TYPED_TEST(BackwardUnits, AttentionBackwardIsBitwiseTheSameAtAnyThreadCount) {
  using T = TypeParam;
  std::mt19937 rng(3);
  const i64 B = 2, T_ = 70, C = 160, H = 2;
  const std::vector<T> qkv = random_values<T>(rng, B * T_ * 3 * C, -1.5f, 1.5f);
  const std::vector<T> dout = random_values<T>(rng, B * T_ * C, -1.0f, 1.0f);
  std::vector<std::uint32_t> first;
  for (int threads : kThreadCounts) {
    DeviceContext ctx(cpu_options(threads));
    const Tensor qkv_t = Tensor::from_host(qkv, {B, T_, 3 * C}, ctx);
    Tensor out = Tensor::empty({B, T_, C}, dtype_for<T>(), ctx);
    Tensor att = Tensor::empty({B, H, T_, T_}, DType::F32, ctx);
    nn::attention_forward(ctx, qkv_t, static_cast<int>(H), out, att);
    Tensor dqkv = Tensor::empty({B, T_, 3 * C}, dtype_for<T>(), ctx);
    nn::attention_backward(ctx, Tensor::from_host(dout, {B, T_, C}, ctx), qkv_t, att, static_cast<int>(H), dqkv);
    const std::vector<std::uint32_t> bits = bits_of(dqkv.to_host<T>());
    if (first.empty()) {
      first = bits;
    } else {
      EXPECT_TRUE(same_bits(bits, first)) << threads << " threads against 1";
    }
  }
}

// The four attention passes, the embedding ops and the column sums (layernorm parameters, bias)
// run directly with width 1 (CUDA's units) and kColumnBlock (the CPU's): the same bits. Sizes
// leave partial blocks (hs 80, T 70, C 150); attention also grouped-query.
TYPED_TEST(BackwardUnits, WidthOneAndBlockWidthGiveTheSameBits) {
  using T = TypeParam;
  std::mt19937 rng(9);
  // Multi-head (GPT-2) and grouped-query attention (4 q heads on 2 kv heads, and a tensor-parallel
  // shard of them: q heads 2..3 reading kv head 1).
  const nn::AttentionHeads cases[] = {{2, 2, 0, 1, 0}, {4, 2, 0, 2, 0}, {2, 1, 2, 2, 1}};
  for (const nn::AttentionHeads& heads : cases) {
    const i64 B = 2, T_ = 70, hs = 80, H = heads.q_heads, KV = heads.kv_heads, row = (H + 2 * KV) * hs;
    const std::vector<T> qkv = random_values<T>(rng, B * T_ * row, -1.5f, 1.5f);
    const std::vector<T> dout = random_values<T>(rng, B * T_ * H * hs, -1.0f, 1.0f);
    DeviceContext ctx(cpu_options(2));
    const Tensor qkv_t = Tensor::from_host(qkv, {B, T_, row}, ctx);
    Tensor out = Tensor::empty({B, T_, H * hs}, dtype_for<T>(), ctx);
    Tensor att_t = Tensor::empty({B, H, T_, T_}, DType::F32, ctx);
    nn::attention_forward(ctx, qkv_t, heads, out, att_t);
    const std::vector<float> att = att_t.to_host<float>();
    const nn_math::AttentionLayout layout{hs, H, KV, heads.q_begin, heads.group, heads.kv_begin};
    auto run = [&](i64 width) {
      std::vector<float> dscore(idx(B * H * T_ * T_), 0.0f);
      std::vector<T> dqkv(idx(B * T_ * row), from_float<T>(777.0f));
      using nn_math::AttentionBackwardDots, nn_math::AttentionBackwardSoftmax, nn_math::AttentionBackwardQuery,
          nn_math::AttentionBackwardKeyValue;
      backend::Cpu::run(AttentionBackwardDots<T>{dout.data(), qkv.data(), dscore.data(), B, T_, layout, width}, 2);
      backend::Cpu::run(AttentionBackwardSoftmax<T>{att.data(), dscore.data(), B, T_, layout}, 2);
      backend::Cpu::run(AttentionBackwardQuery<T>{qkv.data(), dscore.data(), dqkv.data(), B, T_, layout, width}, 2);
      backend::Cpu::run(AttentionBackwardKeyValue<T>{dout.data(), qkv.data(), att.data(), dscore.data(), dqkv.data(),
                                                       B, T_, layout, width},
                          2);
      return bits_of(dqkv);
    };
    EXPECT_TRUE(same_bits(run(1), run(kColumnBlock))) << "attention dqkv, " << H << " q heads on " << KV << " kv heads";
  }
  {
    const i64 B = 3, T_ = 40, C = 150, V = 30, N = B * T_;
    const std::vector<std::int32_t> tokens = random_tokens(rng, N, 0, 12);
    const std::vector<T> dout = random_values<T>(rng, N * C, -1.0f, 1.0f);
    const std::vector<float> dwte0 = random_values<float>(rng, V * C, -1.0f, 1.0f);
    const std::vector<float> dwpe0 = random_values<float>(rng, T_ * C, -1.0f, 1.0f);
    std::vector<std::int32_t> order(idx(N)), keys(idx(N));
    backend::Cpu::run(nn_math::EmbeddingTokenOrder<T>{tokens.data(), order.data(), keys.data(), N, 0, V}, 2);
    auto run = [&](i64 width) {
      std::vector<float> dwte = dwte0, dwpe = dwpe0;
      backend::Cpu::run(
          nn_math::EmbeddingBackwardTokens<T>{order.data(), keys.data(), dout.data(), dwte.data(), N, C, V, width}, 2);
      backend::Cpu::run(nn_math::EmbeddingBackwardPositions<T>{dout.data(), dwpe.data(), B, T_, C, width}, 2);
      std::vector<std::uint32_t> bits = bits_of(dwte), wpe = bits_of(dwpe);
      bits.insert(bits.end(), wpe.begin(), wpe.end());
      return bits;
    };
    EXPECT_TRUE(same_bits(run(1), run(kColumnBlock))) << "embedding dwte, dwpe";
  }
  {
    const i64 N = 50, C = 150;
    const std::vector<T> x = random_values<T>(rng, N * C, -2.0f, 2.0f);
    const std::vector<T> dout = random_values<T>(rng, N * C, -1.0f, 1.0f);
    const std::vector<float> mean = random_values<float>(rng, N, -0.1f, 0.1f);
    const std::vector<float> rstd = random_values<float>(rng, N, 0.5f, 2.0f);
    const std::vector<float> start = random_values<float>(rng, C, -1.0f, 1.0f);
    auto run = [&](i64 width) {
      std::vector<float> dweight = start, dbias = start, sum = start;
      backend::Cpu::run(nn_math::LayerNormBackwardParams<T>{dout.data(), x.data(), mean.data(), rstd.data(),
                                                              dweight.data(), dbias.data(), N, C, width},
                          2);
      backend::Cpu::run(nn_math::ColumnSum<T>{dout.data(), sum.data(), N, C, width}, 2);
      std::vector<std::uint32_t> bits = bits_of(dweight), b = bits_of(dbias), c = bits_of(sum);
      bits.insert(bits.end(), b.begin(), b.end());
      bits.insert(bits.end(), c.begin(), c.end());
      return bits;
    };
    EXPECT_TRUE(same_bits(run(1), run(kColumnBlock))) << "layernorm dweight, dbias; column sum";
  }
}

}  // namespace
}  // namespace mt
