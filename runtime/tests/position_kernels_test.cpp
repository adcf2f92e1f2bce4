// The position ops (the wpe lookup of the embedding and its gradient, RoPE) at explicit positions,
// as a context-parallel rank runs them on rows at non-contiguous global positions: positions
// 0..T-1 give the bits of no positions; the rows of a load-balanced causal split (cp 2) give the
// full sequence's rows at those positions bit for bit, forward and backward (dwpe summed over the
// ranks: each element gets one rank's term, so the sum is exact). fp32 and bf16 at 1 and 2 threads,
// and on a GPU where one is usable (skipped without).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/context.h"     // defines: DeviceContext, DeviceOptions
#include "runtime/nn_kernels.h"  // defines: nn::embedding_forward, nn::embedding_backward, nn::rope_forward,
//          nn::rope_backward
#include "runtime/tensor.h"      // defines: Tensor
#include "tests/gpu_skip.h"       // defines: MT_SKIP_WITHOUT_GPU

namespace mt {
namespace {

using i64 = std::int64_t;
using Positions = std::vector<std::int32_t>;

constexpr int kThreadCounts[] = {1, 2};
constexpr i64 B = 2, T = 8, C = 20, V = 11;  // C not a multiple of the CPU's column block
constexpr int kCp = 2;
constexpr float kTheta = 10000.0f;

std::size_t idx(i64 i) { return static_cast<std::size_t>(i); }

template <class X>
X from_float(float x) {
  if constexpr (sizeof(X) == 2) {
    return bf16::from_float(x);
  } else {
    return x;
  }
}

template <class X>
std::vector<X> random_values(std::mt19937& rng, i64 n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<X> v(idx(n));
  for (X& x : v) x = from_float<X>(dist(rng));
  return v;
}

template <class X>
std::vector<std::uint32_t> bits_of(const std::vector<X>& v) {
  std::vector<std::uint32_t> out(v.size(), 0);
  for (std::size_t i = 0; i < v.size(); ++i) std::memcpy(&out[i], &v[i], sizeof(X));
  return out;
}

// CausalSplit(seq, cp).positions(rank) (parallel/causal_split.h, which the runtime's tests do not
// link): chunks rank and 2cp-1-rank of seq / (2 cp) positions each.
Positions split_positions(i64 seq, int cp, int rank) {
  const i64 chunk = seq / (2 * cp);
  Positions p;
  for (const i64 c : {i64{rank}, 2 * i64{cp} - 1 - rank})
    for (i64 i = 0; i < chunk; ++i) p.push_back(static_cast<std::int32_t>(c * chunk + i));
  return p;
}

Positions identity_positions(i64 n) {
  Positions p(idx(n));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

// The rows [b, positions[t]] of x [B, seq, width], as [B, positions.size(), width].
template <class X>
std::vector<X> gather_rows(const std::vector<X>& x, i64 seq, i64 width, const Positions& positions) {
  std::vector<X> out;
  for (i64 b = 0; b < B; ++b)
    for (const std::int32_t p : positions) {
      const auto row = x.begin() + (b * seq + p) * width;
      out.insert(out.end(), row, row + width);
    }
  return out;
}

class PositionKernels : public ::testing::TestWithParam<int> {
 protected:
  DeviceContext ctx{DeviceOptions{Device::cpu(), 0, GetParam()}};
  std::mt19937 rng{37};
};

INSTANTIATE_TEST_SUITE_P(Threads, PositionKernels, ::testing::ValuesIn(kThreadCounts),
                         [](const ::testing::TestParamInfo<int>& p) { return "threads" + std::to_string(p.param); });

std::vector<std::int32_t> random_tokens(std::mt19937& rng, i64 n) {
  std::uniform_int_distribution<int> dist(0, static_cast<int>(V) - 1);
  std::vector<std::int32_t> v(idx(n));
  for (std::int32_t& t : v) t = dist(rng);
  return v;
}

// The embedding forward of tokens [B, t] at `positions` (none when empty), out in X.
template <class X>
std::vector<X> embed(DeviceContext& ctx, const std::vector<std::int32_t>& tokens, const std::vector<float>& wte,
                     const std::vector<float>& wpe, const Positions& positions) {
  const i64 t = static_cast<i64>(tokens.size()) / B;
  Tensor out = Tensor::empty({B, t, C}, dtype_of<X>::value, ctx);
  const Tensor pos = positions.empty() ? Tensor() : Tensor::from_host(positions, {t}, ctx);
  nn::embedding_forward(ctx, Tensor::from_host(tokens, {B, t}, ctx), Tensor::from_host(wte, {V, C}, ctx),
                        Tensor::from_host(wpe, {T, C}, ctx), out, pos);
  return out.to_host<X>();
}

// dwpe (from dwpe0) after the embedding backward of dout [B, t, C] at `positions`.
template <class X>
std::vector<float> embed_backward_dwpe(DeviceContext& ctx, const std::vector<std::int32_t>& tokens,
                                       const std::vector<X>& dout, const std::vector<float>& dwpe0,
                                       const Positions& positions) {
  const i64 t = static_cast<i64>(tokens.size()) / B;
  Tensor dwte = Tensor::zeros({V, C}, DType::F32, ctx), dwpe = Tensor::from_host(dwpe0, {T, C}, ctx);
  const Tensor pos = positions.empty() ? Tensor() : Tensor::from_host(positions, {t}, ctx);
  nn::embedding_backward(ctx, Tensor::from_host(tokens, {B, t}, ctx), Tensor::from_host(dout, {B, t, C}, ctx), dwte,
                         dwpe, pos);
  return dwpe.to_host<float>();
}

template <class X>
void embedding_identity_positions_change_nothing(DeviceContext& ctx, std::mt19937& rng) {
  const auto tokens = random_tokens(rng, B * T);
  const auto wte = random_values<float>(rng, V * C), wpe = random_values<float>(rng, T * C);
  const auto dout = random_values<X>(rng, B * T * C);
  const auto dwpe0 = random_values<float>(rng, T * C);  // the gradient accumulates
  const Positions id = identity_positions(T);
  EXPECT_EQ(bits_of(embed<X>(ctx, tokens, wte, wpe, id)), bits_of(embed<X>(ctx, tokens, wte, wpe, {})));
  EXPECT_EQ(bits_of(embed_backward_dwpe<X>(ctx, tokens, dout, dwpe0, id)),
            bits_of(embed_backward_dwpe<X>(ctx, tokens, dout, dwpe0, {})));
}

TEST_P(PositionKernels, EmbeddingAtPositionsZeroToTIsTheDefault) {
  embedding_identity_positions_change_nothing<float>(ctx, rng);
  embedding_identity_positions_change_nothing<bf16>(ctx, rng);
}

template <class X>
void embedding_split_matches_full(DeviceContext& ctx, std::mt19937& rng) {
  const auto tokens = random_tokens(rng, B * T);
  const auto wte = random_values<float>(rng, V * C), wpe = random_values<float>(rng, T * C);
  const auto dout = random_values<X>(rng, B * T * C);
  const std::vector<float> zeros(idx(T * C), 0.0f);
  const auto full = embed<X>(ctx, tokens, wte, wpe, {});
  const auto full_dwpe = embed_backward_dwpe<X>(ctx, tokens, dout, zeros, {});
  std::vector<float> summed(idx(T * C), 0.0f);  // the allreduce of the ranks' dwpe
  for (int r = 0; r < kCp; ++r) {
    const Positions pos = split_positions(T, kCp, r);
    const auto local_tokens = gather_rows(tokens, T, 1, pos);
    EXPECT_EQ(bits_of(embed<X>(ctx, local_tokens, wte, wpe, pos)), bits_of(gather_rows(full, T, C, pos)))
        << "rank " << r;
    const auto dwpe = embed_backward_dwpe<X>(ctx, local_tokens, gather_rows(dout, T, C, pos), zeros, pos);
    for (std::size_t i = 0; i < summed.size(); ++i) summed[i] += dwpe[i];
  }
  EXPECT_EQ(bits_of(summed), bits_of(full_dwpe));
}

TEST_P(PositionKernels, EmbeddingOfACausalSplitIsTheFullSequenceAtItsPositions) {
  embedding_split_matches_full<float>(ctx, rng);
  embedding_split_matches_full<bf16>(ctx, rng);
}

TEST_P(PositionKernels, EmbeddingRejectsBadPositionsOnTheCpu) {
  const auto tokens = random_tokens(rng, B * 4);
  const auto wte = random_values<float>(rng, V * C), wpe = random_values<float>(rng, T * C);
  EXPECT_ANY_THROW(embed<float>(ctx, tokens, wte, wpe, {0, 1, 2, static_cast<std::int32_t>(T)}));
  EXPECT_ANY_THROW(embed<float>(ctx, tokens, wte, wpe, {0, 1, 2}));  // not [T]
  const std::vector<float> dout(idx(B * 4 * C), 1.0f), dwpe0(idx(T * C), 0.0f);
  EXPECT_ANY_THROW(embed_backward_dwpe<float>(ctx, tokens, dout, dwpe0, {0, 5, 2, 5}));  // one dwpe row twice
}

// RoPE on qkv [B, t, (H + 2 KV) hs] at `positions`, forward or backward.
constexpr int kHeads = 2, kKvHeads = 1;
constexpr i64 kHeadSize = 6, kWidth = (kHeads + 2 * kKvHeads) * kHeadSize;

template <class X>
std::vector<X> rope(DeviceContext& ctx, const std::vector<X>& x, const Positions& positions, bool backward) {
  const i64 t = static_cast<i64>(x.size()) / (B * kWidth);
  Tensor qkv = Tensor::from_host(x, {B, t, kWidth}, ctx);
  const Tensor pos = positions.empty() ? Tensor() : Tensor::from_host(positions, {t}, ctx);
  if (backward) {
    nn::rope_backward(ctx, qkv, kHeads, kKvHeads, kTheta, pos);
  } else {
    nn::rope_forward(ctx, qkv, kHeads, kKvHeads, kTheta, pos);
  }
  return qkv.to_host<X>();
}

template <class X>
void rope_positions(DeviceContext& ctx, std::mt19937& rng) {
  const auto x = random_values<X>(rng, B * T * kWidth);
  for (const bool backward : {false, true}) {
    const auto full = rope<X>(ctx, x, {}, backward);
    EXPECT_EQ(bits_of(rope<X>(ctx, x, identity_positions(T), backward)), bits_of(full)) << "backward " << backward;
    for (int r = 0; r < kCp; ++r) {
      const Positions pos = split_positions(T, kCp, r);
      EXPECT_EQ(bits_of(rope<X>(ctx, gather_rows(x, T, kWidth, pos), pos, backward)),
                bits_of(gather_rows(full, T, kWidth, pos)))
          << "rank " << r << " backward " << backward;
    }
  }
}

TEST_P(PositionKernels, RopeAtPositionsIsTheFullSequenceAtThosePositions) {
  rope_positions<float>(ctx, rng);
  rope_positions<bf16>(ctx, rng);
}

// The same on a GPU: the position and full runs take the same kernels there, so the same bits.
TEST(PositionKernelsGpu, CausalSplitRowsAreTheFullSequenceAtTheirPositions) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext ctx(DeviceOptions{Device::cuda(0), 0, 1});
  std::mt19937 rng(37);
  embedding_identity_positions_change_nothing<float>(ctx, rng);
  embedding_identity_positions_change_nothing<bf16>(ctx, rng);
  embedding_split_matches_full<float>(ctx, rng);
  embedding_split_matches_full<bf16>(ctx, rng);
  rope_positions<float>(ctx, rng);
  rope_positions<bf16>(ctx, rng);
}

}  // namespace
}  // namespace mt
