// The llama family's kernels of runtime/nn_kernels.h (RMSNorm, RoPE, SwiGLU, grouped-query
// attention) on the CPU, at 1 and 2 threads, against the double-precision references of
// reference_gpt.h: each fp32 forward against the reference forward, each fp32 backward against
// central differences in double of L = sum(dout * forward(inputs)), with the tolerances of
// kernel_checks.h. Also: "+=" outputs accumulate, aliasing where the header allows it, RoPE's
// convention pinned by a hand-computed case and its backward undoing its forward, a tensor-parallel
// shard of grouped-query attention giving exactly the full computation's heads, bf16 within one
// rounding of fp32, and the same bits at 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "models/tests/kernel_checks.h"  // defines: Tol, all_close, f32, random_vec, fd_grad, values_of, bits_of
#include "models/tests/reference_gpt.h"  // defines: ref::rmsnorm, ref::rope, ref::swiglu, ref::attention
#include "runtime/context.h"             // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"               // defines: Error
#include "runtime/kernels.h"             // defines: kernels::cast
#include "runtime/nn_kernels.h"          // defines: nn::rmsnorm_forward, nn::rmsnorm_backward_input, nn::rmsnorm_backward_params, nn::rope_forward, nn::rope_backward, nn::swiglu_forward, nn::swiglu_backward, nn::attention_forward, nn::attention_backward
#include "runtime/tensor.h"              // defines: Tensor

namespace mt {
namespace {

using namespace kernel_checks;  // NOLINT: the shared checks, tolerances and data helpers

class LlamaKernels : public ::testing::TestWithParam<int> {
 protected:
  LlamaKernels() : ctx(DeviceOptions{Device::cpu(), 0, GetParam()}) {}
  DeviceContext ctx;
  std::mt19937 rng{20250522u};
};

INSTANTIATE_TEST_SUITE_P(CpuThreads, LlamaKernels, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return "threads" + std::to_string(param.param);
                         });

Vec row_of(const Vec& v, int n, int C) { return Vec(v.begin() + i64{n} * C, v.begin() + i64{n + 1} * C); }

// ---- RMSNorm ----------------------------------------------------------------------------------

// Rows around 0, one far from 0 (no mean is removed: rstd is small) and one tiny (mean(x^2) ~ 3e-4,
// where eps 1e-5 moves rstd by ~2%).
Vec rmsnorm_input(std::mt19937& rng, int N, int C) {
  Vec x = random_vec(rng, idx(i64{N} * C), -2, 2);
  for (int c = 0; c < C; ++c) {
    x[idx(1 * C + c)] = static_cast<float>(3.0 + 0.5 * x[idx(1 * C + c)]);
    x[idx(2 * C + c)] = static_cast<float>(0.015 * x[idx(2 * C + c)]);
  }
  return x;
}
constexpr float kEps = 1e-5f;

TEST_P(LlamaKernels, RmsNormForwardMatchesReference) {
  const int N = 5, C = 12;
  const Vec x = rmsnorm_input(rng, N, C), w = random_vec(rng, C, 0.5, 1.5);
  Tensor out = f32(Vec(idx(N * C), kGarbage), {N, C}, ctx), rstd = f32(Vec(idx(N), kGarbage), {N}, ctx);
  nn::rmsnorm_forward(ctx, f32(x, {N, C}, ctx), f32(w, {C}, ctx), kEps, out, rstd);
  Vec want_rstd;
  const Vec want = ref::rmsnorm(x, w, N, C, static_cast<double>(kEps), &want_rstd);
  EXPECT_TRUE(all_close(values_of(out), want, kForwardTol)) << "out";
  EXPECT_TRUE(all_close(values_of(rstd), want_rstd, Tol{0.0, kForwardTol.rel})) << "rstd";
}

TEST_P(LlamaKernels, RmsNormBackwardAccumulatesFiniteDifferenceGradients) {
  const int N = 5, C = 12;
  const Vec x = rmsnorm_input(rng, N, C), w = random_vec(rng, C, 0.5, 1.5);
  const Vec dout = random_vec(rng, idx(N * C), -1, 1);
  const Vec dx0 = random_vec(rng, idx(N * C), -1, 1), dw0 = random_vec(rng, C, -1, 1);
  const Tensor xt = f32(x, {N, C}, ctx), wt = f32(w, {C}, ctx), doutt = f32(dout, {N, C}, ctx);
  Tensor out = Tensor::empty({N, C}, DType::F32, ctx), rstd = Tensor::empty({N}, DType::F32, ctx);
  nn::rmsnorm_forward(ctx, xt, wt, kEps, out, rstd);
  Tensor dx = f32(dx0, {N, C}, ctx), dw = f32(dw0, {C}, ctx);
  nn::rmsnorm_backward_input(ctx, doutt, xt, wt, rstd, dx);
  nn::rmsnorm_backward_params(ctx, doutt, xt, rstd, dw);

  const double eps = static_cast<double>(kEps);
  const Vec gx = fd_grad([&](const Vec& v) { return ref::rmsnorm(v, w, N, C, eps); }, dout, x);
  const Vec gw = fd_grad([&](const Vec& v) { return ref::rmsnorm(x, v, N, C, eps); }, dout, w);
  // The tiny row's dx is ~60x the others': each row at its own scale.
  const Vec got_dx = values_of(dx);
  for (int n = 0; n < N; ++n)
    EXPECT_TRUE(all_close(row_of(got_dx, n, C), plus(row_of(dx0, n, C), row_of(gx, n, C)), kBackwardTol))
        << "dx row " << n;
  EXPECT_TRUE(all_close(values_of(dw), plus(dw0, gw), kBackwardTol)) << "dweight";
}

// ---- RoPE -------------------------------------------------------------------------------------

// Hugging Face's rotate_half layout, by hand: head size 4, theta 10000, so inv_freq = {1, 0.01}
// and channel 0 pairs with 2, channel 1 with 3. One q head, one kv head; positions 0 and 1.
TEST_P(LlamaKernels, RopeFollowsTheHalfSplitConventionByHand) {
  const int T = 2, hs = 4, row = 3 * hs;
  Vec qkv(idx(T * row));
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < row; ++c) qkv[idx(t * row + c)] = 1 + c + 0.5 * t;  // q = 1.5 2.5 3.5 4.5 at t = 1
  Tensor x = f32(qkv, {1, T, row}, ctx);
  nn::rope_forward(ctx, x, 1, 1, 10000.0f);
  const Vec got = values_of(x);
  for (int c = 0; c < row; ++c) EXPECT_EQ(got[idx(c)], qkv[idx(c)]) << "position 0 turns by 0: channel " << c;
  for (int block = 0; block < 2; ++block) {  // q, then k
    const double* in = qkv.data() + row + block * hs;
    const double* out = got.data() + row + block * hs;
    const double a0 = in[0], a1 = in[1], b0 = in[2], b1 = in[3];
    EXPECT_NEAR(out[0], a0 * std::cos(1.0) - b0 * std::sin(1.0), 4e-6) << "block " << block;
    EXPECT_NEAR(out[2], b0 * std::cos(1.0) + a0 * std::sin(1.0), 4e-6) << "block " << block;
    EXPECT_NEAR(out[1], a1 * std::cos(0.01) - b1 * std::sin(0.01), 4e-6) << "block " << block;
    EXPECT_NEAR(out[3], b1 * std::cos(0.01) + a1 * std::sin(0.01), 4e-6) << "block " << block;
  }
  for (int c = 2 * hs; c < row; ++c) EXPECT_EQ(got[idx(row + c)], qkv[idx(row + c)]) << "v channel " << c;
}

struct RopeCase {
  int B = 2, T = 6, q_heads = 4, kv_heads = 2, hs = 8;
  int row() const { return (q_heads + 2 * kv_heads) * hs; }
  i64 numel() const { return i64{B} * T * row(); }
};

TEST_P(LlamaKernels, RopeForwardMatchesReferenceAndBackwardIsItsAdjoint) {
  const RopeCase r;
  const Vec qkv = random_vec(rng, idx(r.numel()), -2, 2), dout = random_vec(rng, idx(r.numel()), -1, 1);
  for (float theta : {10000.0f, 500000.0f}) {
    const auto f = [&](const Vec& v) { return ref::rope(v, r.B, r.T, r.q_heads, r.kv_heads, r.hs, theta); };
    Tensor x = f32(qkv, {r.B, r.T, r.row()}, ctx);
    nn::rope_forward(ctx, x, r.q_heads, r.kv_heads, theta);
    // The kernel's angles t * inv_freq are fp32 (as in transformers), the reference's double: with
    // t < 6 they differ by < 6 * 2^-24, far inside the tolerance.
    EXPECT_TRUE(all_close(values_of(x), f(qkv), kForwardTol)) << "theta " << theta;
    Tensor d = f32(dout, {r.B, r.T, r.row()}, ctx);
    nn::rope_backward(ctx, d, r.q_heads, r.kv_heads, theta);
    EXPECT_TRUE(all_close(values_of(d), fd_grad(f, dout, qkv), kBackwardTol)) << "theta " << theta;
    // Backward undoes forward (the rotation is orthogonal): within fp32 rounding of each element's pair.
    nn::rope_backward(ctx, x, r.q_heads, r.kv_heads, theta);
    EXPECT_TRUE(all_close(values_of(x), qkv, Tol{1e-6, 1e-6})) << "backward after forward, theta " << theta;
  }
}

// ---- SwiGLU -----------------------------------------------------------------------------------

TEST_P(LlamaKernels, SwigluForwardAndBackwardMatchReferenceAndMayAlias) {
  const int N = 4, F = 7;
  Vec gu = random_vec(rng, idx(N * 2 * F), -4, 4);
  gu[0] = 0.0;  // silu'(0) = 1/2
  gu[1] = -30.0;  // exp(-g) huge: silu -> -0
  gu[2] = 30.0;   // silu -> g
  const Vec dout = random_vec(rng, idx(N * F), -1, 1);
  const Tensor gut = f32(gu, {N, 2 * F}, ctx);
  Tensor out = f32(Vec(idx(N * F), kGarbage), {N, F}, ctx);
  nn::swiglu_forward(ctx, gut, out);
  EXPECT_TRUE(all_close(values_of(out), ref::swiglu(gu, N, F), kForwardTol)) << "out";

  Tensor dgu = f32(Vec(idx(N * 2 * F), kGarbage), {N, 2 * F}, ctx);  // overwritten
  nn::swiglu_backward(ctx, gut, f32(dout, {N, F}, ctx), dgu);
  const Vec g = fd_grad([&](const Vec& v) { return ref::swiglu(v, N, F); }, dout, gu);
  EXPECT_TRUE(all_close(values_of(dgu), g, kBackwardTol)) << "dgate_up";
  // dgate_up may be gate_up itself: the same bits.
  Tensor inplace = f32(gu, {N, 2 * F}, ctx);
  nn::swiglu_backward(ctx, inplace, f32(dout, {N, F}, ctx), inplace);
  EXPECT_EQ(bits_of(inplace), bits_of(dgu)) << "dgate_up aliasing gate_up";
}

// ---- Grouped-query attention ------------------------------------------------------------------

struct GqaCase {
  int B = 2, T = 5, hs = 4;
  nn::AttentionHeads heads{4, 2, 0, 2, 0};
  int row() const { return (heads.q_heads + 2 * heads.kv_heads) * hs; }
  i64 qkv_numel() const { return i64{B} * T * row(); }
  i64 out_numel() const { return i64{B} * T * heads.q_heads * hs; }
  ref::AttentionGroups groups() const {
    return {heads.q_heads, heads.kv_heads, heads.q_begin, heads.group, heads.kv_begin};
  }
};

struct AttentionRun {
  Tensor out, att, dqkv;
};
AttentionRun run_attention(DeviceContext& ctx, const GqaCase& a, const Vec& qkv, const Vec& dout) {
  const Tensor qkvt = f32(qkv, {a.B, a.T, a.row()}, ctx);
  AttentionRun r{f32(Vec(idx(a.out_numel()), kGarbage), {a.B, a.T, a.heads.q_heads * a.hs}, ctx),
                 f32(Vec(idx(i64{a.B} * a.heads.q_heads * a.T * a.T), kGarbage), {a.B, a.heads.q_heads, a.T, a.T}, ctx),
                 f32(Vec(idx(a.qkv_numel()), kGarbage), {a.B, a.T, a.row()}, ctx)};
  nn::attention_forward(ctx, qkvt, a.heads, r.out, r.att);
  nn::attention_backward(ctx, f32(dout, {a.B, a.T, a.heads.q_heads * a.hs}, ctx), qkvt, r.att, a.heads, r.dqkv);
  return r;
}

// The channels [begin, begin + count) of each row of v [rows, width].
Vec columns(const Vec& v, int width, int begin, int count) {
  Vec out;
  for (std::size_t r = 0; r < v.size() / idx(width); ++r)
    out.insert(out.end(), v.begin() + i64(r) * width + begin, v.begin() + i64(r) * width + begin + count);
  return out;
}

TEST_P(LlamaKernels, GroupedQueryAttentionMatchesReferenceAndFiniteDifferences) {
  const GqaCase a;
  const Vec qkv = random_vec(rng, idx(a.qkv_numel()), -1.5, 1.5), dout = random_vec(rng, idx(a.out_numel()), -1, 1);
  const AttentionRun r = run_attention(ctx, a, qkv, dout);
  Vec want_att;
  const Vec want = ref::attention(qkv, a.B, a.T, a.hs, a.groups(), &want_att);
  EXPECT_TRUE(all_close(values_of(r.out), want, kForwardTol)) << "out";
  EXPECT_TRUE(all_close(values_of(r.att), want_att, kForwardTol)) << "att";
  const Vec g = fd_grad([&](const Vec& v) { return ref::attention(v, a.B, a.T, a.hs, a.groups()); }, dout, qkv);
  // q, k and v gradients have different scales: each block on its own.
  const int q = a.heads.q_heads * a.hs, kv = a.heads.kv_heads * a.hs;
  const Vec got = values_of(r.dqkv);
  EXPECT_TRUE(all_close(columns(got, a.row(), 0, q), columns(g, a.row(), 0, q), kBackwardTol)) << "dq";
  EXPECT_TRUE(all_close(columns(got, a.row(), q, kv), columns(g, a.row(), q, kv), kBackwardTol)) << "dk";
  EXPECT_TRUE(all_close(columns(got, a.row(), q + kv, kv), columns(g, a.row(), q + kv, kv), kBackwardTol)) << "dv";
}

// Multi-head attention through AttentionHeads {heads, heads, 0, 1, 0} is the int overload's bits,
// and the reference's grouped form with group 1 is its multi-head form.
TEST_P(LlamaKernels, MultiHeadIsGroupedQueryWithGroupOne) {
  GqaCase a;
  a.heads = {2, 2, 0, 1, 0};
  const Vec qkv = random_vec(rng, idx(a.qkv_numel()), -1.5, 1.5), dout = random_vec(rng, idx(a.out_numel()), -1, 1);
  const AttentionRun r = run_attention(ctx, a, qkv, dout);
  const Tensor qkvt = f32(qkv, {a.B, a.T, a.row()}, ctx);
  Tensor out = Tensor::empty({a.B, a.T, 2 * a.hs}, DType::F32, ctx), att = Tensor::empty({a.B, 2, a.T, a.T}, DType::F32, ctx);
  Tensor dqkv = Tensor::empty({a.B, a.T, a.row()}, DType::F32, ctx);
  nn::attention_forward(ctx, qkvt, 2, out, att);
  nn::attention_backward(ctx, f32(dout, {a.B, a.T, 2 * a.hs}, ctx), qkvt, att, 2, dqkv);
  EXPECT_EQ(bits_of(out), bits_of(r.out));
  EXPECT_EQ(bits_of(att), bits_of(r.att));
  EXPECT_EQ(bits_of(dqkv), bits_of(r.dqkv));
  EXPECT_EQ(ref::attention(qkv, a.B, a.T, a.hs, a.groups()), ref::attention(qkv, a.B, a.T, 2 * a.hs, 2));
}

// A tensor-parallel shard's qkv: the q heads [q0, q0 + nq) and kv heads [kv0, kv0 + nkv) of the
// full one, in the [q | k | v] layout.
Vec shard_qkv(const Vec& full, const GqaCase& f, int q0, int nq, int kv0, int nkv) {
  const int hs = f.hs, H = f.heads.q_heads, KV = f.heads.kv_heads;
  Vec out;
  for (std::size_t r = 0; r < full.size() / idx(f.row()); ++r) {
    const auto at = [&](int c) { return full.begin() + i64(r) * f.row() + c; };
    out.insert(out.end(), at(q0 * hs), at((q0 + nq) * hs));
    out.insert(out.end(), at((H + kv0) * hs), at((H + kv0 + nkv) * hs));
    out.insert(out.end(), at((H + KV + kv0) * hs), at((H + KV + kv0 + nkv) * hs));
  }
  return out;
}
// The heads [h0, h0 + n) of att [B, H, T, T].
Vec att_heads(const Vec& att, const GqaCase& f, int h0, int n) {
  Vec out;
  const i64 TT = i64{f.T} * f.T;
  for (int b = 0; b < f.B; ++b)
    out.insert(out.end(), att.begin() + (i64{b} * f.heads.q_heads + h0) * TT,
               att.begin() + (i64{b} * f.heads.q_heads + h0 + n) * TT);
  return out;
}

// 4 q heads on 2 kv heads split over tp 2: rank 1 holds q heads 2, 3 and kv head 1
// ({2, 1, 2, 2, 1}); everything it computes is the full computation's bits for those heads.
TEST_P(LlamaKernels, GroupedQueryShardEqualsTheFullHeadsExactly) {
  const GqaCase full;
  const Vec qkv = random_vec(rng, idx(full.qkv_numel()), -1.5, 1.5), dout = random_vec(rng, idx(full.out_numel()), -1, 1);
  const AttentionRun f = run_attention(ctx, full, qkv, dout);
  GqaCase part;
  part.heads = {2, 1, 2, 2, 1};
  const int hs = full.hs;
  const AttentionRun p =
      run_attention(ctx, part, shard_qkv(qkv, full, 2, 2, 1, 1), columns(dout, 4 * hs, 2 * hs, 2 * hs));
  EXPECT_EQ(values_of(p.out), columns(values_of(f.out), 4 * hs, 2 * hs, 2 * hs)) << "out";
  EXPECT_EQ(values_of(p.att), att_heads(values_of(f.att), full, 2, 2)) << "att";
  EXPECT_EQ(values_of(p.dqkv), shard_qkv(values_of(f.dqkv), full, 2, 2, 1, 1)) << "dqkv";
}

// kv heads tp cannot split are replicated: 4 q heads on 2 kv heads over tp 4, each rank holding one
// q head and both kv heads (kv_begin 0). Rank 3 ({1, 2, 3, 2, 0}) reads kv head 1: out and dq are
// the full bits, kv head 0 (no local q head reads it) gets exactly zero gradient, and the ranks'
// dk, dv summed are the full ones (added in another order: within fp32 rounding).
TEST_P(LlamaKernels, ReplicatedKvHeadsGetPartialGradientsThatSumToTheFullOnes) {
  const GqaCase full;
  const Vec qkv = random_vec(rng, idx(full.qkv_numel()), -1.5, 1.5), dout = random_vec(rng, idx(full.out_numel()), -1, 1);
  const AttentionRun f = run_attention(ctx, full, qkv, dout);
  const int hs = full.hs, kv = 2 * hs;
  const Vec full_dqkv = values_of(f.dqkv);
  Vec dkv_sum(idx(i64{full.B} * full.T * 2 * kv), 0.0);
  for (int rank = 0; rank < 4; ++rank) {
    GqaCase part;
    part.heads = {1, 2, rank, 2, 0};
    const AttentionRun p =
        run_attention(ctx, part, shard_qkv(qkv, full, rank, 1, 0, 2), columns(dout, 4 * hs, rank * hs, hs));
    EXPECT_EQ(values_of(p.out), columns(values_of(f.out), 4 * hs, rank * hs, hs)) << "out, rank " << rank;
    const Vec got = values_of(p.dqkv);
    EXPECT_EQ(columns(got, part.row(), 0, hs), columns(full_dqkv, full.row(), rank * hs, hs)) << "dq, rank " << rank;
    const Vec dkv = columns(got, part.row(), hs, 2 * kv);
    const int unread = rank < 2 ? 1 : 0;  // the kv head this rank's q head does not read
    for (int block = 0; block < 2; ++block)  // k, then v
      EXPECT_EQ(columns(dkv, 2 * kv, block * kv + unread * hs, hs), Vec(idx(i64{full.B} * full.T * hs), 0.0))
          << "rank " << rank << ": the unread kv head's d" << "kv"[block];
    for (std::size_t i = 0; i < dkv.size(); ++i) dkv_sum[i] += dkv[i];
  }
  EXPECT_TRUE(all_close(dkv_sum, columns(full_dqkv, full.row(), 4 * hs, 2 * kv), kForwardTol)) << "summed dk, dv";
}

TEST_P(LlamaKernels, AttentionRejectsHeadsThatReadMissingKvHeads) {
  GqaCase a;
  a.heads = {4, 2, 0, 1, 0};  // group 1: q head 3 would read kv head 3 of 2
  const Tensor qkv = f32(Vec(idx(a.qkv_numel()), 0.5), {a.B, a.T, a.row()}, ctx);
  Tensor out = Tensor::empty({a.B, a.T, 4 * a.hs}, DType::F32, ctx), att = Tensor::empty({a.B, 4, a.T, a.T}, DType::F32, ctx);
  EXPECT_THROW(nn::attention_forward(ctx, qkv, a.heads, out, att), Error);
  a.heads = {2, 1, 2, 2, 0};  // q heads 2, 3 read global kv head 1, but the shard holds kv head 0 only
  const Tensor shard = f32(Vec(idx(a.qkv_numel()), 0.5), {a.B, a.T, a.row()}, ctx);
  Tensor out2 = Tensor::empty({a.B, a.T, 2 * a.hs}, DType::F32, ctx), att2 = Tensor::empty({a.B, 2, a.T, a.T}, DType::F32, ctx);
  EXPECT_THROW(nn::attention_forward(ctx, shard, a.heads, out2, att2), Error);
  a.heads.kv_begin = 1;  // the same shard holding kv head 1: fine
  EXPECT_NO_THROW(nn::attention_forward(ctx, shard, a.heads, out2, att2));
}

// ---- bf16 -------------------------------------------------------------------------------------
//
// On bf16-exact inputs every op computes in fp32 exactly what its fp32 run computes and rounds once
// into bf16 (8 significant bits), so each bf16 output is within half a bf16 ulp, 2^-8 of its
// magnitude, of the fp32 output; fp32 outputs (rstd, att, dweight) agree within fp32 rounding.
Tensor to_dtype(DeviceContext& ctx, const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype, ctx);
  kernels::cast(ctx, t, out);
  return out;
}
Vec bf16_exact(const Vec& v) {
  Vec out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(bf16::from_float(static_cast<float>(v[i])).to_float());
  return out;
}
::testing::AssertionResult one_bf16_rounding(DeviceContext& ctx, const Tensor& got_bf16, const Tensor& want_f32) {
  return all_close(values_of(to_dtype(ctx, got_bf16, DType::F32)), values_of(want_f32), Tol{0.0, 1.0 / 256});
}

TEST_P(LlamaKernels, Bf16RunsAreOneRoundingFromFp32) {
  const int N = 6, C = 16, F = 16;
  const auto bf = [&](const Tensor& t) { return to_dtype(ctx, t, DType::BF16); };
  {  // RMSNorm
    const Tensor x = f32(bf16_exact(rmsnorm_input(rng, N, C)), {N, C}, ctx), w = f32(random_vec(rng, C, 0.5, 1.5), {C}, ctx);
    const Tensor dout = f32(bf16_exact(random_vec(rng, idx(N * C), -1, 1)), {N, C}, ctx);
    const Vec dx0 = bf16_exact(random_vec(rng, idx(N * C), -1, 1));
    Tensor out = Tensor::empty({N, C}, DType::F32, ctx), rstd = Tensor::empty({N}, DType::F32, ctx);
    Tensor out_b = Tensor::empty({N, C}, DType::BF16, ctx), rstd_b = Tensor::empty({N}, DType::F32, ctx);
    nn::rmsnorm_forward(ctx, x, w, kEps, out, rstd);
    nn::rmsnorm_forward(ctx, bf(x), w, kEps, out_b, rstd_b);
    EXPECT_TRUE(one_bf16_rounding(ctx, out_b, out)) << "rmsnorm out";
    EXPECT_TRUE(all_close(values_of(rstd_b), values_of(rstd), Tol{0.0, 1e-6})) << "rmsnorm rstd";
    Tensor dx = f32(dx0, {N, C}, ctx), dx_b = bf(f32(dx0, {N, C}, ctx));
    Tensor dw = Tensor::zeros({C}, DType::F32, ctx), dw_b = Tensor::zeros({C}, DType::F32, ctx);
    nn::rmsnorm_backward_input(ctx, dout, x, w, rstd, dx);
    nn::rmsnorm_backward_input(ctx, bf(dout), bf(x), w, rstd, dx_b);
    nn::rmsnorm_backward_params(ctx, dout, x, rstd, dw);
    nn::rmsnorm_backward_params(ctx, bf(dout), bf(x), rstd, dw_b);
    EXPECT_TRUE(one_bf16_rounding(ctx, dx_b, dx)) << "rmsnorm dx";
    EXPECT_TRUE(all_close(values_of(dw_b), values_of(dw), Tol{0.0, 1e-6})) << "rmsnorm dweight";
  }
  {  // RoPE, forward and backward
    const RopeCase r;
    Tensor x = f32(bf16_exact(random_vec(rng, idx(r.numel()), -2, 2)), {r.B, r.T, r.row()}, ctx);
    Tensor x_b = bf(x);
    nn::rope_forward(ctx, x, r.q_heads, r.kv_heads, 10000.0f);
    nn::rope_forward(ctx, x_b, r.q_heads, r.kv_heads, 10000.0f);
    EXPECT_TRUE(one_bf16_rounding(ctx, x_b, x)) << "rope forward";
    x = to_dtype(ctx, x_b, DType::F32);  // the same bf16-exact input for backward
    nn::rope_backward(ctx, x, r.q_heads, r.kv_heads, 10000.0f);
    nn::rope_backward(ctx, x_b, r.q_heads, r.kv_heads, 10000.0f);
    EXPECT_TRUE(one_bf16_rounding(ctx, x_b, x)) << "rope backward";
  }
  {  // SwiGLU
    const Tensor gu = f32(bf16_exact(random_vec(rng, idx(N * 2 * F), -4, 4)), {N, 2 * F}, ctx);
    const Tensor dout = f32(bf16_exact(random_vec(rng, idx(N * F), -1, 1)), {N, F}, ctx);
    Tensor out = Tensor::empty({N, F}, DType::F32, ctx), out_b = Tensor::empty({N, F}, DType::BF16, ctx);
    nn::swiglu_forward(ctx, gu, out);
    nn::swiglu_forward(ctx, bf(gu), out_b);
    EXPECT_TRUE(one_bf16_rounding(ctx, out_b, out)) << "swiglu out";
    Tensor d = Tensor::empty({N, 2 * F}, DType::F32, ctx), d_b = bf(gu);  // in place in bf16
    nn::swiglu_backward(ctx, gu, dout, d);
    nn::swiglu_backward(ctx, d_b, bf(dout), d_b);
    EXPECT_TRUE(one_bf16_rounding(ctx, d_b, d)) << "swiglu dgate_up";
  }
  {  // Grouped-query attention
    const GqaCase a;
    const Tensor qkv = f32(bf16_exact(random_vec(rng, idx(a.qkv_numel()), -1.5, 1.5)), {a.B, a.T, a.row()}, ctx);
    const Tensor dout = f32(bf16_exact(random_vec(rng, idx(a.out_numel()), -1, 1)), {a.B, a.T, 4 * a.hs}, ctx);
    Tensor out = Tensor::empty({a.B, a.T, 4 * a.hs}, DType::F32, ctx), att = Tensor::empty({a.B, 4, a.T, a.T}, DType::F32, ctx);
    Tensor out_b = Tensor::empty({a.B, a.T, 4 * a.hs}, DType::BF16, ctx), att_b = Tensor::empty({a.B, 4, a.T, a.T}, DType::F32, ctx);
    nn::attention_forward(ctx, qkv, a.heads, out, att);
    nn::attention_forward(ctx, bf(qkv), a.heads, out_b, att_b);
    EXPECT_TRUE(one_bf16_rounding(ctx, out_b, out)) << "attention out";
    EXPECT_TRUE(all_close(values_of(att_b), values_of(att), Tol{0.0, 1e-6})) << "attention att";
    Tensor dqkv = Tensor::empty({a.B, a.T, a.row()}, DType::F32, ctx), dqkv_b = Tensor::empty({a.B, a.T, a.row()}, DType::BF16, ctx);
    nn::attention_backward(ctx, dout, qkv, att, a.heads, dqkv);
    nn::attention_backward(ctx, bf(dout), bf(qkv), att, a.heads, dqkv_b);
    EXPECT_TRUE(one_bf16_rounding(ctx, dqkv_b, dqkv)) << "attention dqkv";
  }
}

// ---- Thread-count independence -----------------------------------------------------------------

// Every new kernel once, on sizes that split into several units per thread (C 96: two 64-column
// blocks; 80 rows), fp32 and bf16, outputs by name.
std::map<std::string, std::vector<std::uint32_t>> run_llama_kernels(int threads, DType dtype) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, threads});
  std::mt19937 rng(77);
  const int B = 2, T = 40, N = B * T, C = 96, F = 80, hs = 16;
  const nn::AttentionHeads heads{6, 2, 0, 3, 0};
  const int row = (6 + 2 * 2) * hs;
  const auto act = [&](const Vec& v, Shape shape) {
    const Tensor t = f32(v, std::move(shape), ctx);
    return dtype == DType::F32 ? t : to_dtype(ctx, t, dtype);
  };
  const auto bits = [&](const Tensor& t) { return bits_of(t.dtype() == DType::F32 ? t : to_dtype(ctx, t, DType::F32)); };
  std::map<std::string, std::vector<std::uint32_t>> r;

  const Tensor x = act(random_vec(rng, idx(N * C), -2, 2), {N, C}), w = f32(random_vec(rng, C, 0.5, 1.5), {C}, ctx);
  const Tensor d_nc = act(random_vec(rng, idx(N * C), -1, 1), {N, C});
  Tensor out = Tensor::empty({N, C}, dtype, ctx), rstd = Tensor::empty({N}, DType::F32, ctx);
  nn::rmsnorm_forward(ctx, x, w, kEps, out, rstd);
  Tensor dx = act(random_vec(rng, idx(N * C), -1, 1), {N, C}), dw = f32(random_vec(rng, C, -1, 1), {C}, ctx);
  nn::rmsnorm_backward_input(ctx, d_nc, x, w, rstd, dx);
  nn::rmsnorm_backward_params(ctx, d_nc, x, rstd, dw);
  r["rmsnorm.out"] = bits(out);
  r["rmsnorm.rstd"] = bits(rstd);
  r["rmsnorm.dx"] = bits(dx);
  r["rmsnorm.dweight"] = bits(dw);

  Tensor qkv = act(random_vec(rng, idx(N * row), -1.5, 1.5), {B, T, row});
  nn::rope_forward(ctx, qkv, heads.q_heads, heads.kv_heads, 500000.0f);
  r["rope.forward"] = bits(qkv);
  Tensor aout = Tensor::empty({B, T, 6 * hs}, dtype, ctx), att = Tensor::empty({B, 6, T, T}, DType::F32, ctx);
  nn::attention_forward(ctx, qkv, heads, aout, att);
  Tensor dqkv = Tensor::empty({B, T, row}, dtype, ctx);
  nn::attention_backward(ctx, act(random_vec(rng, idx(N * 6 * hs), -1, 1), {B, T, 6 * hs}), qkv, att, heads, dqkv);
  r["attention.out"] = bits(aout);
  r["attention.att"] = bits(att);
  r["attention.dqkv"] = bits(dqkv);
  nn::rope_backward(ctx, dqkv, heads.q_heads, heads.kv_heads, 500000.0f);
  r["rope.backward"] = bits(dqkv);

  const Tensor gu = act(random_vec(rng, idx(N * 2 * F), -4, 4), {N, 2 * F});
  Tensor sout = Tensor::empty({N, F}, dtype, ctx), dgu = Tensor::empty({N, 2 * F}, dtype, ctx);
  nn::swiglu_forward(ctx, gu, sout);
  nn::swiglu_backward(ctx, gu, act(random_vec(rng, idx(N * F), -1, 1), {N, F}), dgu);
  r["swiglu.out"] = bits(sout);
  r["swiglu.dgate_up"] = bits(dgu);
  return r;
}

TEST(LlamaKernelsThreads, OutputsAreBitwiseIdenticalAtOneAndTwoThreads) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    const auto one = run_llama_kernels(1, dtype), two = run_llama_kernels(2, dtype);
    ASSERT_EQ(one.size(), two.size());
    for (const auto& [name, bits] : one) {
      const auto& other = two.at(name);
      ASSERT_EQ(bits.size(), other.size()) << name;
      std::size_t differ = 0;
      for (std::size_t i = 0; i < bits.size(); ++i) differ += bits[i] != other[i];
      EXPECT_EQ(differ, 0u) << dtype_name(dtype) << " " << name << ": " << differ << " of " << bits.size()
                            << " elements differ in their bits";
    }
  }
}

}  // namespace
}  // namespace mt
