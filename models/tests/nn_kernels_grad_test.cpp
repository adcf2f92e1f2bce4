// The transformer kernels of runtime/nn_kernels.h on the CPU, at 1 and 2 threads, against the
// double-precision reference ops of reference_gpt.h: each fp32 forward against the reference
// forward, and each fp32 backward against central differences, taken in double on the reference,
// of the scalar L = sum(dout * forward(inputs)) for a random dout. Also what the header promises
// beyond the math: "+=" outputs accumulate onto what is there, overwritten outputs ignore it,
// cross_entropy's padding columns neither reach the loss nor get a gradient, the attention mask
// is causal, repeated tokens accumulate, dloss scales, aliasing is allowed where stated, and the
// results are bitwise identical at 1 and 2 threads.
//
// Every random input is an fp32 value, so the reference evaluates exactly the function the
// kernels evaluate, at exactly the same point; only their arithmetic differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "models/tests/kernel_checks.h"  // defines: Tol, all_close, f32, i32, random_vec, fd_grad, values_of, bits_of, plus, idx
#include "models/tests/reference_gpt.h"  // defines: ref::embedding, ref::layernorm, ref::linear, ref::gelu,
//          ref::attention, ref::cross_entropy, ref::softmax_rows, ref::dot, ref::central_difference_gradient
#include "runtime/context.h"             // defines: DeviceContext, DeviceOptions
#include "runtime/gemm.h"                // defines: matmul, MatmulEpilogue
#include "runtime/nn_kernels.h"          // defines: nn::embedding_forward, nn::embedding_backward,
//          nn::layernorm_forward, nn::layernorm_backward, nn::broadcast_rows, nn::bias_backward, nn::gelu_forward,
//          nn::gelu_backward, nn::attention_forward, nn::attention_backward, nn::softmax_rows, nn::cross_entropy
#include "runtime/tensor.h"              // defines: Tensor

namespace mt {
namespace {

using ref::Vec;
using i64 = std::int64_t;

using namespace kernel_checks;  // NOLINT: the shared checks, tolerances and data helpers

// ---- Per-kernel tests, at 1 and 2 CPU threads --------------------------------------------------

class NnKernels : public ::testing::TestWithParam<int> {
 protected:
  NnKernels() : ctx(DeviceOptions{Device::cpu(), 0, GetParam()}) {}
  DeviceContext ctx;
  std::mt19937 rng{20240611u};
};

INSTANTIATE_TEST_SUITE_P(CpuThreads, NnKernels, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return "threads" + std::to_string(param.param);
                         });

TEST_P(NnKernels, EmbeddingForwardAddsTokenAndPositionRows) {
  const int B = 2, T = 3, C = 5, rows = 7, maxT = 4;
  const std::vector<int> tokens = {3, 1, 3, 3, 0, 6};
  const Vec wte = random_vec(rng, rows * C, -1, 1), wpe = random_vec(rng, maxT * C, -1, 1);
  Tensor out = Tensor::empty({B, T, C}, DType::F32, ctx);
  nn::embedding_forward(ctx, i32(tokens, {B, T}, ctx), f32(wte, {rows, C}, ctx), f32(wpe, {maxT, C}, ctx), out);
  // One fp32 addition of two fp32 numbers: the reference sum rounded to fp32, exactly.
  const Vec want = ref::embedding(tokens, wte, wpe, B, T, C);
  const Vec got = values_of(out);
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i], static_cast<double>(static_cast<float>(want[i]))) << "element " << i;
}

TEST_P(NnKernels, EmbeddingBackwardAccumulatesRepeatedTokens) {
  const int B = 2, T = 3, C = 5, rows = 7, maxT = 4;
  const std::vector<int> tokens = {3, 1, 3, 3, 0, 6};  // token 3 three times; 2, 4, 5 never
  const Vec wte = random_vec(rng, rows * C, -1, 1), wpe = random_vec(rng, maxT * C, -1, 1);
  const Vec dout = random_vec(rng, B * T * C, -1, 1);
  const Vec dwte0 = random_vec(rng, rows * C, -1, 1), dwpe0 = random_vec(rng, maxT * C, -1, 1);
  Tensor dwte = f32(dwte0, {rows, C}, ctx), dwpe = f32(dwpe0, {maxT, C}, ctx);
  nn::embedding_backward(ctx, i32(tokens, {B, T}, ctx), f32(dout, {B, T, C}, ctx), dwte, dwpe);

  const Vec gwte = fd_grad([&](const Vec& v) { return ref::embedding(tokens, v, wpe, B, T, C); }, dout, wte);
  const Vec gwpe = fd_grad([&](const Vec& v) { return ref::embedding(tokens, wte, v, B, T, C); }, dout, wpe);
  EXPECT_TRUE(all_close(values_of(dwte), plus(dwte0, gwte), kBackwardTol)) << "dwte";
  EXPECT_TRUE(all_close(values_of(dwpe), plus(dwpe0, gwpe), kBackwardTol)) << "dwpe";
  // Row 3 of dwte is the sum of three rows of dout; rows never used, and position 3 (beyond T),
  // keep exactly what they held.
  const Vec got_wte = values_of(dwte), got_wpe = values_of(dwpe);
  for (int c = 0; c < C; ++c) {
    const double sum3 = dout[idx(0 * C + c)] + dout[idx(2 * C + c)] + dout[idx(3 * C + c)];
    EXPECT_NEAR(got_wte[idx(3 * C + c)], dwte0[idx(3 * C + c)] + sum3, 1e-6) << "dwte[3, " << c << "]";
    for (int unused : {2, 4, 5}) EXPECT_EQ(got_wte[idx(unused * C + c)], dwte0[idx(unused * C + c)]);
    EXPECT_EQ(got_wpe[idx(3 * C + c)], dwpe0[idx(3 * C + c)]);
  }
}

// Rows of x for layernorm: random around 0, one offset far from 0 (the mean must be removed
// before squaring), one of small variance (rstd ~ 30, where eps = 1e-5 shifts rstd by ~0.5%).
Vec layernorm_input(std::mt19937& rng, int N, int C) {
  Vec x = random_vec(rng, idx(i64{N} * C), -2, 2);
  for (int c = 0; c < C; ++c) {
    x[idx(1 * C + c)] = static_cast<float>(3.0 + 0.5 * x[idx(1 * C + c)]);
    x[idx(2 * C + c)] = static_cast<float>(0.03 * x[idx(2 * C + c)]);
  }
  return x;
}

TEST_P(NnKernels, LayerNormForwardMatchesReference) {
  const int N = 5, C = 12;
  const Vec x = layernorm_input(rng, N, C);
  const Vec w = random_vec(rng, C, 0.5, 1.5), b = random_vec(rng, C, -0.5, 0.5);
  Tensor out = Tensor::empty({N, C}, DType::F32, ctx);
  Tensor mean = Tensor::empty({N}, DType::F32, ctx), rstd = Tensor::empty({N}, DType::F32, ctx);
  nn::layernorm_forward(ctx, f32(x, {N, C}, ctx), f32(w, {C}, ctx), f32(b, {C}, ctx), out, mean, rstd);
  Vec want_mean, want_rstd;
  const Vec want = ref::layernorm(x, w, b, N, C, &want_mean, &want_rstd);
  EXPECT_TRUE(all_close(values_of(out), want, kForwardTol)) << "out";
  EXPECT_TRUE(all_close(values_of(mean), want_mean, kForwardTol)) << "mean";
  // rstd spans 0.5 .. 30 over the rows: compare each relative to itself.
  EXPECT_TRUE(all_close(values_of(rstd), want_rstd, Tol{0.0, kForwardTol.rel})) << "rstd";
}

TEST_P(NnKernels, LayerNormBackwardAccumulatesFiniteDifferenceGradients) {
  const int N = 5, C = 12;
  const Vec x = layernorm_input(rng, N, C);
  const Vec w = random_vec(rng, C, 0.5, 1.5), b = random_vec(rng, C, -0.5, 0.5);
  const Vec dout = random_vec(rng, idx(i64{N} * C), -1, 1);
  const Vec dx0 = random_vec(rng, idx(i64{N} * C), -1, 1), dw0 = random_vec(rng, C, -1, 1),
            db0 = random_vec(rng, C, -1, 1);
  const Tensor xt = f32(x, {N, C}, ctx), wt = f32(w, {C}, ctx), bt = f32(b, {C}, ctx);
  Tensor out = Tensor::empty({N, C}, DType::F32, ctx);
  Tensor mean = Tensor::empty({N}, DType::F32, ctx), rstd = Tensor::empty({N}, DType::F32, ctx);
  nn::layernorm_forward(ctx, xt, wt, bt, out, mean, rstd);
  Tensor dx = f32(dx0, {N, C}, ctx), dw = f32(dw0, {C}, ctx), db = f32(db0, {C}, ctx);
  nn::layernorm_backward(ctx, f32(dout, {N, C}, ctx), xt, wt, mean, rstd, dx, dw, db);

  const Vec gx = fd_grad([&](const Vec& v) { return ref::layernorm(v, w, b, N, C); }, dout, x);
  const Vec gw = fd_grad([&](const Vec& v) { return ref::layernorm(x, v, b, N, C); }, dout, w);
  const Vec gb = fd_grad([&](const Vec& v) { return ref::layernorm(x, w, v, N, C); }, dout, b);
  // dx of the small-variance row is ~30x the others: compare row by row at each row's own scale.
  const Vec got_dx = values_of(dx);
  for (int n = 0; n < N; ++n) {
    const auto row = [&](const Vec& v) { return Vec(v.begin() + n * C, v.begin() + (n + 1) * C); };
    EXPECT_TRUE(all_close(row(got_dx), plus(row(dx0), row(gx)), kBackwardTol)) << "dx row " << n;
  }
  EXPECT_TRUE(all_close(values_of(dw), plus(dw0, gw), kBackwardTol)) << "dweight";
  EXPECT_TRUE(all_close(values_of(db), plus(db0, gb), kBackwardTol)) << "dbias";
}

TEST_P(NnKernels, BroadcastRowsCopiesTheBiasAndBiasBackwardAccumulatesColumnSums) {
  const int N = 6, J = 7;
  const Vec bias = random_vec(rng, J, -1, 1);
  Tensor out = f32(Vec(idx(N * J), kGarbage), {N, J}, ctx);
  nn::broadcast_rows(ctx, f32(bias, {J}, ctx), out);
  const Vec got = values_of(out);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < J; ++j) EXPECT_EQ(got[idx(n * J + j)], bias[idx(j)]) << "row " << n << " col " << j;

  const Vec dout = random_vec(rng, idx(N * J), -1, 1), db0 = random_vec(rng, J, -1, 1);
  Tensor db = f32(db0, {J}, ctx);
  nn::bias_backward(ctx, f32(dout, {N, J}, ctx), db);
  // y = x W^T + b with x = 0: the gradient of b alone.
  const Vec gb = fd_grad([&](const Vec& v) { return ref::linear(Vec(idx(N), 0.0), Vec(idx(J), 0.0), v, N, 1, J); },
                         dout, bias);
  EXPECT_TRUE(all_close(values_of(db), plus(db0, gb), kBackwardTol)) << "dbias";
}

// y = x W^T + b as the model computes it: one GEMM with the bias in its epilogue; backward
// dx = dy W, dW += dy^T x with db += column sums of dy in the same GEMM's epilogue. Checks the
// [out, in] layout end to end.
TEST_P(NnKernels, LinearFromGemmEpiloguesMatchesReference) {
  const int N = 4, in = 6, out = 5;
  const Vec x = random_vec(rng, idx(N * in), -1, 1), w = random_vec(rng, idx(out * in), -1, 1),
            b = random_vec(rng, out, -1, 1), dy = random_vec(rng, idx(N * out), -1, 1);
  const Tensor xt = f32(x, {N, in}, ctx), wt = f32(w, {out, in}, ctx), bt = f32(b, {out}, ctx);
  Tensor y = f32(Vec(idx(N * out), kGarbage), {N, out}, ctx);
  matmul(ctx, xt, false, wt, true, y, 1.0f, 0.0f, MatmulEpilogue::with_bias(bt));
  EXPECT_TRUE(all_close(values_of(y), ref::linear(x, w, b, N, in, out), kForwardTol)) << "y";

  const Tensor dyt = f32(dy, {N, out}, ctx);
  const Vec dw0 = random_vec(rng, idx(out * in), -1, 1), db0 = random_vec(rng, out, -1, 1);
  Tensor dx = Tensor::empty({N, in}, DType::F32, ctx), dw = f32(dw0, {out, in}, ctx), db = f32(db0, {out}, ctx);
  matmul(ctx, dyt, false, wt, false, dx);
  matmul(ctx, dyt, true, xt, false, dw, 1.0f, 1.0f, MatmulEpilogue::bias_grad_of_a(db));
  EXPECT_TRUE(all_close(values_of(dx), fd_grad([&](const Vec& v) { return ref::linear(v, w, b, N, in, out); }, dy, x),
                        kBackwardTol))
      << "dx";
  EXPECT_TRUE(all_close(values_of(dw),
                        plus(dw0, fd_grad([&](const Vec& v) { return ref::linear(x, v, b, N, in, out); }, dy, w)),
                        kBackwardTol))
      << "dweight";
  EXPECT_TRUE(all_close(values_of(db),
                        plus(db0, fd_grad([&](const Vec& v) { return ref::linear(x, w, v, N, in, out); }, dy, b)),
                        kBackwardTol))
      << "dbias";
}

// gpt2's MLP through the epilogues: post = gelu(x W^T + b) keeping pre; and the gradient at the
// input of a linear layer fed by a GELU, dpre = gelu'(pre) * (dy W), written over pre.
TEST_P(NnKernels, GeluEpiloguesMatchReference) {
  const int N = 4, in = 6, out = 5;
  const Vec x = random_vec(rng, idx(N * in), -2, 2), w = random_vec(rng, idx(out * in), -1, 1),
            b = random_vec(rng, out, -1, 1), dy = random_vec(rng, idx(N * out), -1, 1);
  const Tensor xt = f32(x, {N, in}, ctx), wt = f32(w, {out, in}, ctx), bt = f32(b, {out}, ctx);
  Tensor pre = f32(Vec(idx(N * out), kGarbage), {N, out}, ctx), post = f32(Vec(idx(N * out), kGarbage), {N, out}, ctx);
  matmul(ctx, xt, false, wt, true, post, 1.0f, 0.0f, MatmulEpilogue::bias_gelu(&bt, pre));
  const Vec want_pre = ref::linear(x, w, b, N, in, out);
  EXPECT_TRUE(all_close(values_of(pre), want_pre, kForwardTol)) << "pre";
  EXPECT_TRUE(all_close(values_of(post), ref::gelu(want_pre), kForwardTol)) << "post";

  // The layer after the GELU reads gelu(h) for h [N, in]: the gradient at h.
  Tensor h = f32(x, {N, in}, ctx);
  matmul(ctx, f32(dy, {N, out}, ctx), false, wt, false, h, 1.0f, 0.0f, MatmulEpilogue::dgelu(h));
  const Vec zero_bias(idx(out), 0.0);
  const Vec gh = fd_grad([&](const Vec& v) { return ref::linear(ref::gelu(v), w, zero_bias, N, in, out); }, dy, x);
  EXPECT_TRUE(all_close(values_of(h), gh, kBackwardTol)) << "dpre";
}

TEST_P(NnKernels, GeluForwardAndBackwardMatchReference) {
  const int N = 3, C = 9;
  Vec x = random_vec(rng, idx(N * C), -4, 4);
  x[0] = 0.0f;
  x[1] = -3.0f;  // the tail where the tanh saturates
  x[2] = 6.0f;
  const Vec dout = random_vec(rng, idx(N * C), -1, 1);
  const Tensor xt = f32(x, {N, C}, ctx);
  Tensor out = f32(Vec(idx(N * C), kGarbage), {N, C}, ctx);
  nn::gelu_forward(ctx, xt, out);
  EXPECT_TRUE(all_close(values_of(out), ref::gelu(x), kForwardTol)) << "out";

  // dx is overwritten (no "+=" in the header): prefilled with garbage.
  const Vec gx = fd_grad([](const Vec& v) { return ref::gelu(v); }, dout, x);
  Tensor dx = f32(Vec(idx(N * C), kGarbage), {N, C}, ctx);
  nn::gelu_backward(ctx, xt, f32(dout, {N, C}, ctx), dx);
  EXPECT_TRUE(all_close(values_of(dx), gx, kBackwardTol)) << "dx";
  // dx may alias dout.
  Tensor inplace = f32(dout, {N, C}, ctx);
  nn::gelu_backward(ctx, xt, inplace, inplace);
  EXPECT_EQ(bits_of(inplace), bits_of(dx)) << "dx aliasing dout";
}

struct AttentionCase {
  int B = 2, T = 5, C = 8, heads = 2;
  i64 qkv_numel() const { return i64{B} * T * 3 * C; }
  i64 out_numel() const { return i64{B} * T * C; }
  i64 att_numel() const { return i64{B} * heads * T * T; }
};

TEST_P(NnKernels, AttentionForwardMatchesReferenceAndIsCausal) {
  const AttentionCase a;
  const Vec qkv = random_vec(rng, idx(a.qkv_numel()), -1.5, 1.5);
  Tensor out = f32(Vec(idx(a.out_numel()), kGarbage), {a.B, a.T, a.C}, ctx);
  Tensor att = f32(Vec(idx(a.att_numel()), kGarbage), {a.B, a.heads, a.T, a.T}, ctx);
  nn::attention_forward(ctx, f32(qkv, {a.B, a.T, 3 * a.C}, ctx), a.heads, out, att);
  Vec want_att;
  const Vec want = ref::attention(qkv, a.B, a.T, a.C, a.heads, &want_att);
  EXPECT_TRUE(all_close(values_of(out), want, kForwardTol)) << "out";
  EXPECT_TRUE(all_close(values_of(att), want_att, kForwardTol)) << "att";
  // Above the diagonal exactly zero; each row a distribution.
  const Vec got_att = values_of(att);
  for (int bh = 0; bh < a.B * a.heads; ++bh)
    for (int t = 0; t < a.T; ++t) {
      double sum = 0.0;
      for (int s = 0; s < a.T; ++s) {
        const double p = got_att[idx((i64{bh} * a.T + t) * a.T + s)];
        if (s > t) {
          EXPECT_EQ(p, 0.0) << "att[" << bh << ", " << t << ", " << s << "]";
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }

  // Changing q, k and v of the last two positions of sequence 0 leaves every earlier output, and
  // all of sequence 1, bit for bit.
  Vec changed = qkv;
  for (int t = 3; t < a.T; ++t)
    for (int c = 0; c < 3 * a.C; ++c) changed[idx(i64{t} * 3 * a.C + c)] = static_cast<float>(-2.0 * changed[idx(i64{t} * 3 * a.C + c)]);
  Tensor out2 = Tensor::empty({a.B, a.T, a.C}, DType::F32, ctx);
  Tensor att2 = Tensor::empty({a.B, a.heads, a.T, a.T}, DType::F32, ctx);
  nn::attention_forward(ctx, f32(changed, {a.B, a.T, 3 * a.C}, ctx), a.heads, out2, att2);
  const std::vector<std::uint32_t> before = bits_of(out), after = bits_of(out2);
  for (int b = 0; b < a.B; ++b)
    for (int t = 0; t < a.T; ++t) {
      const bool same = std::equal(before.begin() + (i64{b} * a.T + t) * a.C,
                                   before.begin() + (i64{b} * a.T + t + 1) * a.C,
                                   after.begin() + (i64{b} * a.T + t) * a.C);
      EXPECT_EQ(same, !(b == 0 && t >= 3)) << "sequence " << b << " position " << t;
    }
}

TEST_P(NnKernels, AttentionBackwardMatchesFiniteDifferencesAndOverwrites) {
  const AttentionCase a;
  const Vec qkv = random_vec(rng, idx(a.qkv_numel()), -1.5, 1.5);
  const Vec dout = random_vec(rng, idx(a.out_numel()), -1, 1);
  const Tensor qkvt = f32(qkv, {a.B, a.T, 3 * a.C}, ctx);
  Tensor out = Tensor::empty({a.B, a.T, a.C}, DType::F32, ctx);
  Tensor att = Tensor::empty({a.B, a.heads, a.T, a.T}, DType::F32, ctx);
  nn::attention_forward(ctx, qkvt, a.heads, out, att);
  Tensor dqkv = f32(Vec(idx(a.qkv_numel()), kGarbage), {a.B, a.T, 3 * a.C}, ctx);  // overwritten
  nn::attention_backward(ctx, f32(dout, {a.B, a.T, a.C}, ctx), qkvt, att, a.heads, dqkv);
  const Vec g = fd_grad([&](const Vec& v) { return ref::attention(v, a.B, a.T, a.C, a.heads); }, dout, qkv);
  // q, k and v gradients have different scales: compare each part on its own.
  const Vec got = values_of(dqkv);
  for (int part = 0; part < 3; ++part) {
    Vec got_part, want_part;
    for (i64 row = 0; row < i64{a.B} * a.T; ++row)
      for (int c = 0; c < a.C; ++c) {
        got_part.push_back(got[idx(row * 3 * a.C + part * a.C + c)]);
        want_part.push_back(g[idx(row * 3 * a.C + part * a.C + c)]);
      }
    EXPECT_TRUE(all_close(got_part, want_part, kBackwardTol)) << "d" << "qkv"[part];
  }
}

TEST_P(NnKernels, AttentionBackwardGivesFuturePositionsNoGradient) {
  // With dout zero from position 3 on, nothing that depends on positions >= 3 is asked for: their
  // dq, dk and dv are exactly zero; earlier positions get the gradient of the truncated loss.
  const AttentionCase a;
  const int t0 = 3;
  const Vec qkv = random_vec(rng, idx(a.qkv_numel()), -1.5, 1.5);
  Vec dout = random_vec(rng, idx(a.out_numel()), -1, 1);
  for (int b = 0; b < a.B; ++b)
    for (int t = t0; t < a.T; ++t)
      for (int c = 0; c < a.C; ++c) dout[idx((i64{b} * a.T + t) * a.C + c)] = 0.0;
  const Tensor qkvt = f32(qkv, {a.B, a.T, 3 * a.C}, ctx);
  Tensor out = Tensor::empty({a.B, a.T, a.C}, DType::F32, ctx);
  Tensor att = Tensor::empty({a.B, a.heads, a.T, a.T}, DType::F32, ctx);
  nn::attention_forward(ctx, qkvt, a.heads, out, att);
  Tensor dqkv = f32(Vec(idx(a.qkv_numel()), kGarbage), {a.B, a.T, 3 * a.C}, ctx);
  nn::attention_backward(ctx, f32(dout, {a.B, a.T, a.C}, ctx), qkvt, att, a.heads, dqkv);
  const Vec got = values_of(dqkv);
  for (int b = 0; b < a.B; ++b)
    for (int t = 0; t < a.T; ++t) {
      double norm = 0.0;
      for (int c = 0; c < 3 * a.C; ++c) norm += std::abs(got[idx((i64{b} * a.T + t) * 3 * a.C + c)]);
      if (t >= t0) {
        EXPECT_EQ(norm, 0.0) << "sequence " << b << " position " << t;
      } else {
        EXPECT_GT(norm, 0.0) << "sequence " << b << " position " << t;
      }
    }
  const Vec g = fd_grad([&](const Vec& v) { return ref::attention(v, a.B, a.T, a.C, a.heads); }, dout, qkv);
  EXPECT_TRUE(all_close(got, g, kBackwardTol)) << "dqkv";
}

struct CrossEntropyCase {
  int N = 4, V = 11, Vp = 16;
  std::vector<int> targets = {3, 0, 10, 3};  // the first and last column, and a repeat
};

// Logits with the padding columns set to `pad`.
Vec ce_logits(std::mt19937& rng, const CrossEntropyCase& c, double pad) {
  Vec logits = random_vec(rng, idx(i64{c.N} * c.Vp), -3, 3);
  for (int n = 0; n < c.N; ++n)
    for (int j = c.V; j < c.Vp; ++j) logits[idx(i64{n} * c.Vp + j)] = pad;
  return logits;
}

TEST_P(NnKernels, CrossEntropyLossIgnoresPaddingColumns) {
  const CrossEntropyCase c;
  const Vec logits = ce_logits(rng, c, 0.0);
  const Vec want = ref::cross_entropy(logits, c.targets, c.N, c.Vp, c.V);
  // Padding of 0, of 1e4 (would dominate any max or sum over Vp) and NaN (would poison it).
  for (double pad : {0.0, 1e4, std::numeric_limits<double>::quiet_NaN()}) {
    Vec padded = logits;
    for (int n = 0; n < c.N; ++n)
      for (int j = c.V; j < c.Vp; ++j) padded[idx(i64{n} * c.Vp + j)] = pad;
    Tensor losses = f32(Vec(idx(c.N), kGarbage), {c.N}, ctx);
    nn::cross_entropy(ctx, f32(padded, {c.N, c.Vp}, ctx), i32(c.targets, {c.N}, ctx), c.V, losses, nullptr, 1.0f);
    EXPECT_TRUE(all_close(values_of(losses), want, kForwardTol)) << "losses with padding " << pad;
  }
}

TEST_P(NnKernels, CrossEntropyGradientIsScaledByDlossAndZeroInPadding) {
  const CrossEntropyCase c;
  const Vec logits = ce_logits(rng, c, 1e4);  // padding the reference ignores: FD gives exactly 0 there
  const Tensor logits_t = f32(logits, {c.N, c.Vp}, ctx);
  const Tensor targets = i32(c.targets, {c.N}, ctx);
  for (float dloss : {1.0f / 4.0f, 0.37f, 0.0f}) {
    // L = dloss * sum of the losses: the mean over N rows when dloss = 1 / N.
    const Vec g = ref::central_difference_gradient(
        [&](const Vec& v) {
          return static_cast<double>(dloss) * ref::dot(Vec(idx(c.N), 1.0), ref::cross_entropy(v, c.targets, c.N, c.Vp, c.V));
        },
        logits, kStep);
    Tensor losses = Tensor::empty({c.N}, DType::F32, ctx);
    Tensor dlogits = f32(Vec(idx(i64{c.N} * c.Vp), kGarbage), {c.N, c.Vp}, ctx);
    nn::cross_entropy(ctx, logits_t, targets, c.V, losses, &dlogits, dloss);
    EXPECT_TRUE(all_close(values_of(losses), ref::cross_entropy(logits, c.targets, c.N, c.Vp, c.V), kForwardTol))
        << "losses, dloss " << dloss;
    const Vec got = values_of(dlogits);
    EXPECT_TRUE(all_close(got, g, kBackwardTol)) << "dlogits, dloss " << dloss;
    for (int n = 0; n < c.N; ++n)
      for (int j = c.V; j < c.Vp; ++j)
        EXPECT_EQ(got[idx(i64{n} * c.Vp + j)], 0.0) << "padding dlogits[" << n << ", " << j << "], dloss " << dloss;
    if (dloss == 0.0f) {
      for (double v : got) EXPECT_EQ(v, 0.0) << "dloss 0";
    }

    // dlogits may be the logits themselves: same bits.
    Tensor inplace = f32(logits, {c.N, c.Vp}, ctx);
    Tensor losses2 = Tensor::empty({c.N}, DType::F32, ctx);
    nn::cross_entropy(ctx, inplace, targets, c.V, losses2, &inplace, dloss);
    EXPECT_EQ(bits_of(inplace), bits_of(dlogits)) << "dlogits aliasing logits, dloss " << dloss;
    EXPECT_EQ(bits_of(losses2), bits_of(losses)) << "losses with dlogits aliasing logits, dloss " << dloss;
  }
}

TEST_P(NnKernels, SoftmaxRowsMatchesReferenceWithTemperature) {
  const CrossEntropyCase c;
  const Vec logits = ce_logits(rng, c, 1e4);
  for (float temperature : {1.0f, 0.7f, 2.5f}) {
    Tensor probs = f32(Vec(idx(i64{c.N} * c.V), kGarbage), {c.N, c.V}, ctx);
    nn::softmax_rows(ctx, f32(logits, {c.N, c.Vp}, ctx), c.V, temperature, probs);
    EXPECT_TRUE(all_close(values_of(probs), ref::softmax_rows(logits, c.N, c.Vp, c.V, temperature), kForwardTol))
        << "temperature " << temperature;
  }
}

// ---- Thread-count independence -----------------------------------------------------------------

// Every kernel once, forward and backward, on sizes that split into several units per thread
// (C 96 = two 64-column blocks; 80 rows), with outputs by name.
std::map<std::string, std::vector<std::uint32_t>> run_all_kernels(int threads) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, threads});
  std::mt19937 rng(99);
  const int B = 2, T = 40, C = 96, heads = 4, V = 250, Vp = 256, N = B * T;
  std::vector<int> tokens(idx(N)), targets(idx(N));
  std::uniform_int_distribution<int> tok(0, V - 1);
  for (int& t : tokens) t = tok(rng) % 17;  // many repeats
  for (int& t : targets) t = tok(rng);
  const Tensor tokens_t = i32(tokens, {B, T}, ctx), targets_t = i32(targets, {N}, ctx);
  std::map<std::string, std::vector<std::uint32_t>> r;

  const Tensor wte = f32(random_vec(rng, idx(Vp * C), -1, 1), {Vp, C}, ctx);
  const Tensor wpe = f32(random_vec(rng, idx(T * C), -1, 1), {T, C}, ctx);
  Tensor emb = Tensor::empty({B, T, C}, DType::F32, ctx);
  nn::embedding_forward(ctx, tokens_t, wte, wpe, emb);
  r["embedding.out"] = bits_of(emb);
  const Tensor d_nc = f32(random_vec(rng, idx(N * C), -1, 1), {B, T, C}, ctx);
  Tensor dwte = f32(random_vec(rng, idx(Vp * C), -1, 1), {Vp, C}, ctx);
  Tensor dwpe = f32(random_vec(rng, idx(T * C), -1, 1), {T, C}, ctx);
  nn::embedding_backward(ctx, tokens_t, d_nc, dwte, dwpe);
  r["embedding.dwte"] = bits_of(dwte);
  r["embedding.dwpe"] = bits_of(dwpe);

  const Tensor x = emb.reshape({N, C});
  const Tensor w = f32(random_vec(rng, C, 0.5, 1.5), {C}, ctx), b = f32(random_vec(rng, C, -1, 1), {C}, ctx);
  Tensor ln = Tensor::empty({N, C}, DType::F32, ctx), mean = Tensor::empty({N}, DType::F32, ctx),
         rstd = Tensor::empty({N}, DType::F32, ctx);
  nn::layernorm_forward(ctx, x, w, b, ln, mean, rstd);
  r["layernorm.out"] = bits_of(ln);
  r["layernorm.mean"] = bits_of(mean);
  r["layernorm.rstd"] = bits_of(rstd);
  Tensor dx = f32(random_vec(rng, idx(N * C), -1, 1), {N, C}, ctx);
  Tensor dw = f32(random_vec(rng, C, -1, 1), {C}, ctx), db = f32(random_vec(rng, C, -1, 1), {C}, ctx);
  nn::layernorm_backward(ctx, d_nc.reshape({N, C}), x, w, mean, rstd, dx, dw, db);
  r["layernorm.dx"] = bits_of(dx);
  r["layernorm.dweight"] = bits_of(dw);
  r["layernorm.dbias"] = bits_of(db);

  Tensor rows = Tensor::empty({N, 3 * C}, DType::F32, ctx);
  nn::broadcast_rows(ctx, f32(random_vec(rng, idx(3 * C), -1, 1), {3 * C}, ctx), rows);
  r["broadcast_rows.out"] = bits_of(rows);
  Tensor dbias = f32(random_vec(rng, idx(3 * C), -1, 1), {3 * C}, ctx);
  nn::bias_backward(ctx, f32(random_vec(rng, idx(N * 3 * C), -1, 1), {N, 3 * C}, ctx), dbias);
  r["bias_backward.dbias"] = bits_of(dbias);

  const Tensor gx = f32(random_vec(rng, idx(N * 4 * C), -4, 4), {N, 4 * C}, ctx);
  Tensor gout = Tensor::empty({N, 4 * C}, DType::F32, ctx), gdx = Tensor::empty({N, 4 * C}, DType::F32, ctx);
  nn::gelu_forward(ctx, gx, gout);
  nn::gelu_backward(ctx, gx, f32(random_vec(rng, idx(N * 4 * C), -1, 1), {N, 4 * C}, ctx), gdx);
  r["gelu.out"] = bits_of(gout);
  r["gelu.dx"] = bits_of(gdx);

  const Tensor qkv = f32(random_vec(rng, idx(N * 3 * C), -1.5, 1.5), {B, T, 3 * C}, ctx);
  Tensor aout = Tensor::empty({B, T, C}, DType::F32, ctx), att = Tensor::empty({B, heads, T, T}, DType::F32, ctx);
  nn::attention_forward(ctx, qkv, heads, aout, att);
  Tensor dqkv = Tensor::empty({B, T, 3 * C}, DType::F32, ctx);
  nn::attention_backward(ctx, d_nc, qkv, att, heads, dqkv);
  r["attention.out"] = bits_of(aout);
  r["attention.att"] = bits_of(att);
  r["attention.dqkv"] = bits_of(dqkv);

  const Tensor logits = f32(random_vec(rng, idx(N * Vp), -4, 4), {N, Vp}, ctx);
  Tensor losses = Tensor::empty({N}, DType::F32, ctx), dlogits = Tensor::empty({N, Vp}, DType::F32, ctx);
  nn::cross_entropy(ctx, logits, targets_t, V, losses, &dlogits, 1.0f / N);
  r["cross_entropy.losses"] = bits_of(losses);
  r["cross_entropy.dlogits"] = bits_of(dlogits);
  Tensor probs = Tensor::empty({N, V}, DType::F32, ctx);
  nn::softmax_rows(ctx, logits, V, 0.8f, probs);
  r["softmax_rows.probs"] = bits_of(probs);
  return r;
}

TEST(NnKernelsThreads, OutputsAreBitwiseIdenticalAtOneAndTwoThreads) {
  const auto one = run_all_kernels(1), two = run_all_kernels(2);
  ASSERT_EQ(one.size(), two.size());
  for (const auto& [name, bits] : one) {
    const auto& other = two.at(name);
    ASSERT_EQ(bits.size(), other.size()) << name;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < bits.size(); ++i) differ += bits[i] != other[i];
    EXPECT_EQ(differ, 0u) << name << ": " << differ << " of " << bits.size() << " elements differ in their bits";
  }
}

}  // namespace
}  // namespace mt
