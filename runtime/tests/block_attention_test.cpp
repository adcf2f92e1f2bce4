// Block attention (runtime/block_attention.h) as context parallelism will use it, emulated on one
// device: a sequence of T positions cut into 2 x cp chunks, cp rank r holding chunks r and
// 2cp-1-r; every rank's query chunks meet every visible kv chunk in ring order (its own from its
// fused qkv, then those of ranks r-1, r-2, ... as the packed [k | v] blocks block_attention_pack_kv
// makes): full blocks before the diagonal, the diagonal causal, later blocks skipped; the partial
// outputs merged by log-sum-exp, the backward run pair by pair with dq kept by the query chunk and
// dk, dv travelling with their kv chunk. Checked:
//   - the output and dq, dk, dv against the full causal Reference attention (runtime/attention.h),
//     gpt2-like multi-head and llama-like grouped-query heads (also a tensor-parallel slice of
//     them), fp32 and bf16, cp 1, 2 and 4;
//   - the same bits at 1 and 2 OpenMP threads;
//   - each mask against attention computed here in double, keys by position (a wrong mask fails);
//   - the batched-GEMM pair (runtime/block_attention_gemm.h, the CPU's default) against the unit
//     ops: every mask (a causal block with queries that see no key too), fused and packed kv,
//     each head layout, fp32 and bf16, pair by pair and over the whole fold, forward and backward;
//     MESHTRAIN_ATTENTION picks the implementation (`reference` gives the unit ops on the CPU);
//   - where a GPU is usable, the GPU against the CPU within the ops' tolerances, its bits twice.
//
// Tolerances against the Reference, relative to the largest magnitude of its result (plus the same
// of each element):
//   fp32  2e-6: the same math with the exponentials and sums grouped by block (each block's own
//         maximum, the partial outputs rescaled in the merge, dq summed block by block, delta from
//         the output instead of the sum of p dp): a few fp32 roundings of the sums (2.5e-7 seen).
//   bf16  2e-6 + kBf16Step (1/128): the output and every gradient are rounded to bf16 once, as the
//         Reference's, from fp32 values a few roundings apart, which may round to neighbouring
//         bf16 numbers; and delta = dout . out reads the rounded output (2^-9 relative) where the
//         Reference sums p dp in fp32 (1.7e-3 seen on the gradients, the output's bits equal).
// Those are the unit ops' (AttentionKernel::Reference). The batched-GEMM pair (BatchedGemm), against
// the unit ops and the full Reference alike, takes whole-sequence BatchedGemm's (kBatchedGemmTolerance,
// runtime/ops/attention.h):
//   fp32  2e-5: the scores' and the products' dot products summed in the GEMM's order instead of
//         position order, and dq, dk, dv added per pair as one GEMM result instead of term by term
//         (1.0e-6 seen on a pair, 3.9e-7 over the fold);
//   bf16  2e-2: P and dS are rounded to bf16 before the GEMMs that read them, where the unit ops
//         keep them in fp32 (3.2e-3 seen over the fold, 2.2e-3 on a pair).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/attention.h"        // defines: nn::attention_forward, nn::attention_backward
#include "runtime/block_attention.h"  // defines: nn::block_attention_forward, nn::block_attention_merge,
                                      // nn::block_attention_delta, nn::block_attention_backward,
                                      // nn::block_attention_store, nn::block_attention_pack_kv,
                                      // SequenceBlock, BlockMask
#include "runtime/context.h"          // defines: DeviceContext, DeviceOptions
#include "runtime/kernels.h"          // defines: kernels::fill
#include "runtime/tensor.h"           // defines: Tensor
#include "tests/float_bits.h"         // defines: same_bits
#include "tests/gpu_skip.h"           // defines: MT_SKIP_WITHOUT_GPU
#include "tests/test_helpers.h"       // defines: expect_near
#include "tests/random_values.h"      // defines: random_values
#include "tests/dtype_values.h"

namespace mt {
namespace {

using testing::rounded_random_values;
using testing::tensor_of;
using testing::widened;

using testing::expect_near;

using i64 = std::int64_t;
using nn::AttentionHeads;
using nn::BlockMask;
using nn::SequenceBlock;
using testing::random_values;
using testing::same_bits;

DeviceOptions cpu_options(int threads) { return DeviceOptions{Device::cpu(), 0, threads}; }
DeviceOptions gpu_options() { return DeviceOptions{Device::cuda(0), 0, 1}; }

struct Case {
  std::string name;
  i64 B, T, head_size;
  AttentionHeads heads;
  i64 row() const { return (heads.q_heads + 2 * heads.kv_heads) * head_size; }
  i64 out_row() const { return heads.q_heads * head_size; }
  i64 kv_row() const { return 2 * heads.kv_heads * head_size; }
};

// T divides into 2 x cp chunks for cp 1, 2 and 4 (chunks of 5, 7 and 4 positions at cp 4). The
// tensor-parallel slice holds q heads 2-5 of 8 (groups of 2) and all 4 kv heads, of which it reads
// kv heads 1 and 2 only: the others get zero gradients, as from the Reference.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"gpt2_like", 2, 40, 16, {3, 3, 0, 1, 0}},
      {"llama_like", 2, 56, 8, {6, 2, 0, 3, 0}},
      {"llama_tp_slice", 1, 32, 8, {4, 4, 2, 2, 0}},
  };
  return all;
}

using nn::AttentionKernel;
constexpr AttentionKernel kUnitOps = AttentionKernel::Reference;
constexpr AttentionKernel kGemm = AttentionKernel::BatchedGemm;

double tolerance(DType dtype, AttentionKernel kernel = kUnitOps) {
  if (kernel == kGemm) return dtype == DType::BF16 ? nn_math::kBatchedGemmTolerance.bf16 : nn_math::kBatchedGemmTolerance.fp32;
  return 2e-6 + (dtype == DType::BF16 ? nn_math::kBf16Step : 0.0);
}

struct Inputs {
  std::vector<float> qkv, dout;  // [B, T, row], [B, T, out_row]
};
Inputs inputs(const Case& c, DType dtype) {
  return {rounded_random_values(static_cast<std::size_t>(c.B * c.T * c.row()), 11, 1.5f, dtype),
          rounded_random_values(static_cast<std::size_t>(c.B * c.T * c.out_row()), 12, 1.0f, dtype)};
}

struct Result {
  std::vector<float> out, dqkv;  // the full sequence's [B, T, out_row], [B, T, row]
};

Result reference(const DeviceOptions& options, const Case& c, DType dtype) {
  DeviceContext ctx(options);
  const Inputs in = inputs(c, dtype);
  const Tensor qkv = tensor_of(ctx, in.qkv, {c.B, c.T, c.row()}, dtype);
  const Tensor dout = tensor_of(ctx, in.dout, {c.B, c.T, c.out_row()}, dtype);
  Tensor out = Tensor::empty({c.B, c.T, c.out_row()}, dtype, ctx);
  Tensor att = Tensor::empty({c.B, c.heads.q_heads, c.T, c.T}, DType::F32, ctx);
  nn::attention_forward(ctx, qkv, c.heads, out, att);
  Tensor dqkv = Tensor::empty({c.B, c.T, c.row()}, dtype, ctx);
  nn::attention_backward(ctx, dout, qkv, att, c.heads, dqkv);
  return {widened(out), widened(dqkv)};
}

// Rows [first, first + count) of every sequence of a [B, T, width] host array, moved to rows
// [to, to + count) of a [B, T2, width] one.
void copy_rows(const std::vector<float>& src, i64 T, i64 first, std::vector<float>& dst, i64 T2, i64 to, i64 count,
               i64 B, i64 width) {
  for (i64 b = 0; b < B; ++b)
    for (i64 t = 0; t < count; ++t)
      for (i64 c = 0; c < width; ++c)
        dst[static_cast<std::size_t>((b * T2 + to + t) * width + c)] =
            src[static_cast<std::size_t>((b * T + first + t) * width + c)];
}

// The load-balanced causal split over cp ranks, run as the ring would run it (file comment).
Result context_parallel(const DeviceOptions& options, const Case& c, DType dtype, int cp, AttentionKernel kernel) {
  DeviceContext ctx(options);
  const Inputs in = inputs(c, dtype);
  const i64 chunks = 2 * cp, Tc = c.T / chunks, local = 2 * Tc, B = c.B, H = c.heads.q_heads;
  const i64 q_cols = c.out_row(), kv_cols = c.kv_row();
  // Global chunk of rank r's local slot j (rows [j Tc, (j + 1) Tc) of its tensors).
  auto chunk_of = [&](i64 r, i64 j) { return j == 0 ? r : chunks - 1 - r; };
  auto fp32 = [&](Shape s) { return Tensor::zeros(std::move(s), DType::F32, ctx); };

  std::vector<Tensor> qkv, dout, out, dqkv;
  std::vector<Tensor> packed(static_cast<std::size_t>(chunks));  // each chunk's [k | v], as the ring sends it
  for (i64 r = 0; r < cp; ++r) {
    std::vector<float> q(static_cast<std::size_t>(B * local * c.row()));
    std::vector<float> g(static_cast<std::size_t>(B * local * q_cols));
    for (i64 j = 0; j < 2; ++j) {
      const i64 g0 = chunk_of(r, j) * Tc;
      copy_rows(in.qkv, c.T, g0, q, local, j * Tc, Tc, B, c.row());
      copy_rows(in.dout, c.T, g0, g, local, j * Tc, Tc, B, q_cols);
    }
    qkv.push_back(tensor_of(ctx, q, {B, local, c.row()}, dtype));
    for (i64 j = 0; j < 2; ++j) {
      Tensor& kv = packed[static_cast<std::size_t>(chunk_of(r, j))];
      kv = Tensor::empty({B, Tc, kv_cols}, dtype, ctx);
      nn::block_attention_pack_kv(ctx, qkv.back(), c.heads, j * Tc, kv);
    }
    dout.push_back(tensor_of(ctx, g, {B, local, q_cols}, dtype));
    out.push_back(Tensor::empty({B, local, q_cols}, dtype, ctx));
    dqkv.push_back(Tensor::empty({B, local, c.row()}, dtype, ctx));
  }
  auto q_block = [&](i64 r, i64 j) { return SequenceBlock{j * Tc, Tc, chunk_of(r, j) * Tc}; };

  // Every visible (rank, q slot, kv chunk) pair in the ring's order: at step k rank r holds the kv
  // of rank (r - k) mod cp; k outer, then ranks, q slots and kv slots ascending. f(r, j, src, jj, mask).
  auto for_pairs = [&](auto&& f) {
    for (i64 k = 0; k < cp; ++k)
      for (i64 r = 0; r < cp; ++r)
        for (i64 j = 0; j < 2; ++j)
          for (i64 jj = 0; jj < 2; ++jj) {
            const i64 src = (r - k + cp) % cp, qc = chunk_of(r, j), kc = chunk_of(src, jj);
            if (kc > qc) continue;  // wholly after the queries
            f(r, j, src, jj, kc == qc ? BlockMask::Causal : BlockMask::Full);
          }
  };
  // The kv operand of a pair: the rank's own fused qkv, or the chunk's packed block.
  auto kv_of = [&](i64 r, i64 src, i64 jj, const Tensor** kv, SequenceBlock* k) {
    const i64 kc = chunk_of(src, jj);
    *kv = src == r ? &qkv[static_cast<std::size_t>(r)] : &packed[static_cast<std::size_t>(kc)];
    *k = SequenceBlock{src == r ? jj * Tc : 0, Tc, kc * Tc};
  };

  std::vector<Tensor> acc_out, acc_lse;  // per (rank, q slot): the running merge
  std::vector<bool> started(static_cast<std::size_t>(2 * cp), false);
  for (i64 s = 0; s < 2 * cp; ++s) {
    acc_out.push_back(fp32({B, Tc, q_cols}));
    acc_lse.push_back(fp32({B, H, Tc}));
  }
  Tensor block_out = fp32({B, Tc, q_cols}), block_lse = fp32({B, H, Tc});
  for_pairs([&](i64 r, i64 j, i64 src, i64 jj, BlockMask mask) {
    const Tensor* kv;
    SequenceBlock k;
    kv_of(r, src, jj, &kv, &k);
    const auto slot = static_cast<std::size_t>(2 * r + j);
    if (!started[slot]) {
      nn::block_attention_forward(ctx, kernel, qkv[static_cast<std::size_t>(r)], q_block(r, j), *kv, k, c.heads,
                                  mask, acc_out[slot], acc_lse[slot]);
      started[slot] = true;
    } else {
      nn::block_attention_forward(ctx, kernel, qkv[static_cast<std::size_t>(r)], q_block(r, j), *kv, k, c.heads,
                                  mask, block_out, block_lse);
      nn::block_attention_merge(ctx, acc_out[slot], acc_lse[slot], block_out, block_lse);
    }
  });
  for (i64 r = 0; r < cp; ++r)
    for (i64 j = 0; j < 2; ++j)
      nn::block_attention_store(ctx, acc_out[static_cast<std::size_t>(2 * r + j)], out[static_cast<std::size_t>(r)],
                                j * Tc, 0);

  std::vector<Tensor> delta, dq, dkv;
  for (i64 r = 0; r < cp; ++r)
    for (i64 j = 0; j < 2; ++j) {
      delta.push_back(fp32({B, H, Tc}));
      nn::block_attention_delta(ctx, dout[static_cast<std::size_t>(r)], out[static_cast<std::size_t>(r)],
                                q_block(r, j), delta.back());
      dq.push_back(fp32({B, Tc, q_cols}));
    }
  for (i64 kc = 0; kc < chunks; ++kc) dkv.push_back(fp32({B, Tc, kv_cols}));
  for_pairs([&](i64 r, i64 j, i64 src, i64 jj, BlockMask mask) {
    const Tensor* kv;
    SequenceBlock k;
    kv_of(r, src, jj, &kv, &k);
    const auto slot = static_cast<std::size_t>(2 * r + j);
    nn::block_attention_backward(ctx, kernel, qkv[static_cast<std::size_t>(r)], q_block(r, j), *kv, k, c.heads, mask,
                                 dout[static_cast<std::size_t>(r)], acc_lse[slot], delta[slot], dq[slot],
                                 dkv[static_cast<std::size_t>(chunk_of(src, jj))]);
  });
  for (i64 r = 0; r < cp; ++r)
    for (i64 j = 0; j < 2; ++j) {
      Tensor& d = dqkv[static_cast<std::size_t>(r)];
      nn::block_attention_store(ctx, dq[static_cast<std::size_t>(2 * r + j)], d, j * Tc, 0);
      nn::block_attention_store(ctx, dkv[static_cast<std::size_t>(chunk_of(r, j))], d, j * Tc, q_cols);
    }

  // The ranks' rows back into the whole sequence.
  Result res{std::vector<float>(static_cast<std::size_t>(B * c.T * q_cols)),
             std::vector<float>(static_cast<std::size_t>(B * c.T * c.row()))};
  for (i64 r = 0; r < cp; ++r) {
    const std::vector<float> o = widened(out[static_cast<std::size_t>(r)]);
    const std::vector<float> d = widened(dqkv[static_cast<std::size_t>(r)]);
    for (i64 j = 0; j < 2; ++j) {
      copy_rows(o, local, j * Tc, res.out, c.T, chunk_of(r, j) * Tc, Tc, B, q_cols);
      copy_rows(d, local, j * Tc, res.dqkv, c.T, chunk_of(r, j) * Tc, Tc, B, c.row());
    }
  }
  return res;
}

class BlockAttention : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Dtypes, BlockAttention, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

TEST_P(BlockAttention, ContextParallelSplitAgreesWithFullCausalAttention) {
  const DType dtype = GetParam();
  for (const Case& c : cases()) {
    const Result want = reference(cpu_options(2), c, dtype);
    for (const AttentionKernel kernel : {kUnitOps, kGemm})
      for (int cp : {1, 2, 4}) {
        const Result got = context_parallel(cpu_options(2), c, dtype, cp, kernel);
        const std::string what =
            c.name + " cp " + std::to_string(cp) + " " + nn::attention_kernel_name(kernel);
        expect_near(got.out, want.out, tolerance(dtype, kernel), what + " output");
        expect_near(got.dqkv, want.dqkv, tolerance(dtype, kernel), what + " dqkv");
      }
  }
}

// The whole fold (every mask of the split, fused and packed kv, forward, merge, backward) by the
// batched-GEMM pairs against the same fold by the unit ops.
TEST_P(BlockAttention, GemmFoldAgreesWithTheUnitOps) {
  const DType dtype = GetParam();
  for (const Case& c : cases())
    for (int cp : {1, 2, 4}) {
      const Result want = context_parallel(cpu_options(2), c, dtype, cp, kUnitOps);
      const Result got = context_parallel(cpu_options(2), c, dtype, cp, kGemm);
      const std::string what = c.name + " cp " + std::to_string(cp) + " gemm vs unit ops";
      expect_near(got.out, want.out, tolerance(dtype, kGemm), what + " output");
      expect_near(got.dqkv, want.dqkv, tolerance(dtype, kGemm), what + " dqkv");
    }
}

TEST_P(BlockAttention, SameBitsAtOneAndTwoThreads) {
  for (const AttentionKernel kernel : {kUnitOps, kGemm})
    for (const Case& c : cases())
      for (int cp : {1, 2, 4}) {
        const Result one = context_parallel(cpu_options(1), c, GetParam(), cp, kernel);
        const Result two = context_parallel(cpu_options(2), c, GetParam(), cp, kernel);
        const Result again = context_parallel(cpu_options(2), c, GetParam(), cp, kernel);
        EXPECT_TRUE(same_bits(one.out, two.out) && same_bits(one.dqkv, two.dqkv))
            << c.name << " cp " << cp << " " << nn::attention_kernel_name(kernel);
        EXPECT_TRUE(same_bits(again.out, two.out) && same_bits(again.dqkv, two.dqkv))
            << c.name << " cp " << cp << " " << nn::attention_kernel_name(kernel) << ": a rerun";
      }
}

// One pair of every mask kind (Full; Causal on the diagonal; Causal on a block whose first keys
// come after the first queries, so queries 10-12 see none), kv fused or packed, run by both
// implementations from the same lse and delta: out and lse, then dq and [dk | dv] added onto
// nonzero accumulators. q_len queries from row 10 at position 1000, 136 keys at 1000 + kv_offset:
// more rows than a causal row block's 128 (runtime/block_attention_gemm.cpp), so blocks are skipped.
struct PairGrads {
  std::vector<float> out, lse, dq, dkv;
};
PairGrads pair_grads(const Case& c, DType dtype, AttentionKernel kernel, bool fused, i64 kv_offset, BlockMask mask,
                     i64 q_len, int threads = 2) {
  DeviceContext ctx(cpu_options(threads));
  const i64 Tq = 24 + q_len, Tk = 136, H = c.heads.q_heads, q_first = 10;
  const Tensor qkv = tensor_of(ctx, rounded_random_values(static_cast<std::size_t>(c.B * Tq * c.row()), 41, 1.5f, dtype),
                               {c.B, Tq, c.row()}, dtype);
  const i64 kv_cols = fused ? c.row() : c.kv_row();
  const Tensor kv = tensor_of(ctx, rounded_random_values(static_cast<std::size_t>(c.B * Tk * kv_cols), 42, 1.5f, dtype),
                              {c.B, Tk, kv_cols}, dtype);
  const Tensor dout = tensor_of(
      ctx, rounded_random_values(static_cast<std::size_t>(c.B * Tq * c.out_row()), 43, 1.0f, dtype),
      {c.B, Tq, c.out_row()}, dtype);
  const SequenceBlock q{q_first, q_len, 1000}, k{0, Tk, 1000 + kv_offset};
  // The same lse for both (the unit ops'), and a delta of its own: the backward is defined for any.
  Tensor out = Tensor::empty({c.B, q_len, c.out_row()}, DType::F32, ctx);
  Tensor lse = Tensor::empty({c.B, H, q_len}, DType::F32, ctx);
  nn::block_attention_forward(ctx, kUnitOps, qkv, q, kv, k, c.heads, mask, out, lse);
  const Tensor delta = Tensor::from_host(random_values(static_cast<std::size_t>(c.B * H * q_len), 44), {c.B, H, q_len}, ctx);
  Tensor dq = Tensor::from_host(random_values(static_cast<std::size_t>(c.B * q_len * c.out_row()), 45),
                                {c.B, q_len, c.out_row()}, ctx);
  Tensor dkv = Tensor::from_host(random_values(static_cast<std::size_t>(c.B * Tk * c.kv_row()), 46),
                                 {c.B, Tk, c.kv_row()}, ctx);
  nn::block_attention_backward(ctx, kernel, qkv, q, kv, k, c.heads, mask, dout, lse, delta, dq, dkv);
  Tensor out2 = Tensor::empty({c.B, q_len, c.out_row()}, DType::F32, ctx);
  Tensor lse2 = Tensor::empty({c.B, H, q_len}, DType::F32, ctx);
  nn::block_attention_forward(ctx, kernel, qkv, q, kv, k, c.heads, mask, out2, lse2);
  return {out2.to_host<float>(), lse2.to_host<float>(), dq.to_host<float>(), dkv.to_host<float>()};
}

TEST_P(BlockAttention, GemmPairsOfEveryMaskAgreeWithTheUnitOps) {
  const DType dtype = GetParam();
  struct PairCase {
    i64 kv_offset;  // the kv block's position relative to the query block's
    BlockMask mask;
    i64 q_len;
  };
  // Full: the kv block wholly before; Causal on the diagonal (q_len = kv_len); Causal with the kv
  // block starting 3 after the queries (their first 3 see no key) and one 200 after (none does).
  for (const PairCase& pc : {PairCase{-136, BlockMask::Full, 136}, PairCase{0, BlockMask::Causal, 136},
                             PairCase{3, BlockMask::Causal, 136}, PairCase{200, BlockMask::Causal, 100}})
    for (const Case& c : cases())
      for (const bool fused : {true, false}) {
        const PairGrads want = pair_grads(c, dtype, kUnitOps, fused, pc.kv_offset, pc.mask, pc.q_len);
        const PairGrads got = pair_grads(c, dtype, kGemm, fused, pc.kv_offset, pc.mask, pc.q_len);
        const std::string what = c.name + (fused ? " fused" : " packed") + " mask " +
                                 std::to_string(static_cast<int>(pc.mask)) + " at " + std::to_string(pc.kv_offset);
        const double tol = tolerance(dtype, kGemm);
        if (std::all_of(want.out.begin(), want.out.end(), [](float x) { return x == 0.0f; })) {
          EXPECT_TRUE(same_bits(got.out, want.out)) << what << " out";  // no query sees a key
        } else {
          expect_near(got.out, want.out, tol, what + " out");
        }
        expect_near(got.dq, want.dq, tol, what + " dq");
        expect_near(got.dkv, want.dkv, tol, what + " dkv");
        // lse: from fp32 scores either way (no bf16 rounding before it); kNoKeysLse exactly.
        for (std::size_t i = 0; i < want.lse.size(); ++i) {
          if (want.lse[i] == nn_math::kNoKeysLse) {
            EXPECT_EQ(got.lse[i], nn_math::kNoKeysLse) << what << " lse " << i;
          } else {
            EXPECT_NEAR(got.lse[i], want.lse[i], 2e-5 * (1.0 + std::abs(want.lse[i]))) << what << " lse " << i;
          }
        }
      }
}

// One pair against attention computed here in double over the keys the mask lets through, by
// global position: queries at positions [10, 18) against keys at kv_start.. of a packed block.
// Full before the diagonal, Causal on it, and Causal on a block starting at 13 (queries 10-12 see
// no key: lse kNoKeysLse, output zero). The Full block's pair run with Causal, and the diagonal
// with Full, must miss.
struct MaskCase {
  i64 kv_start;
  BlockMask mask;
};
struct PairResult {
  std::vector<float> out, lse;
};

PairResult run_pair(const Case& c, i64 kv_start, BlockMask mask, const std::vector<float>& qkv,
                    const std::vector<float>& kv) {
  DeviceContext ctx(cpu_options(2));
  const i64 Tq = 8, Tk = 8, H = c.heads.q_heads;
  const Tensor q = Tensor::from_host(qkv, {c.B, 24, c.row()}, ctx);
  const Tensor k = Tensor::from_host(kv, {c.B, Tk, c.kv_row()}, ctx);
  Tensor out = Tensor::empty({c.B, Tq, c.out_row()}, DType::F32, ctx);
  Tensor lse = Tensor::empty({c.B, H, Tq}, DType::F32, ctx);
  nn::block_attention_forward(ctx, q, {10, Tq, 10}, k, {0, Tk, kv_start}, c.heads, mask, out, lse);
  return {out.to_host<float>(), lse.to_host<float>()};
}

PairResult expected_pair(const Case& c, i64 kv_start, BlockMask mask, const std::vector<float>& qkv,
                         const std::vector<float>& kv) {
  const i64 Tq = 8, Tk = 8, H = c.heads.q_heads, hs = c.head_size, KV = c.heads.kv_heads;
  PairResult r{std::vector<float>(static_cast<std::size_t>(c.B * Tq * c.out_row())),
               std::vector<float>(static_cast<std::size_t>(c.B * H * Tq))};
  for (i64 b = 0; b < c.B; ++b)
    for (i64 i = 0; i < Tq; ++i)
      for (i64 h = 0; h < H; ++h) {
        const i64 kvh = h / c.heads.group;
        std::vector<double> score;
        for (i64 s = 0; s < Tk; ++s) {
          if (mask == BlockMask::Causal && kv_start + s > 10 + i) break;
          double dot = 0;
          for (i64 x = 0; x < hs; ++x)
            dot += double{qkv[static_cast<std::size_t>((b * 24 + 10 + i) * c.row() + h * hs + x)]} *
                   kv[static_cast<std::size_t>((b * Tk + s) * c.kv_row() + kvh * hs + x)];
          score.push_back(dot / std::sqrt(double(hs)));
        }
        const std::size_t at = static_cast<std::size_t>((b * H + h) * Tq + i);
        if (score.empty()) {
          r.lse[at] = nn_math::kNoKeysLse;
          continue;
        }
        const double m = *std::max_element(score.begin(), score.end());
        double sum = 0;
        for (double sc : score) sum += std::exp(sc - m);
        r.lse[at] = static_cast<float>(m + std::log(sum));
        for (i64 x = 0; x < hs; ++x) {
          double o = 0;
          for (std::size_t s = 0; s < score.size(); ++s)
            o += std::exp(score[s] - m) / sum *
                 kv[(static_cast<std::size_t>(b * Tk) + s) * static_cast<std::size_t>(c.kv_row()) +
                    static_cast<std::size_t>((KV + kvh) * hs + x)];
          r.out[static_cast<std::size_t>((b * Tq + i) * c.out_row() + h * hs + x)] = static_cast<float>(o);
        }
      }
  return r;
}

bool agrees(const PairResult& got, const PairResult& want) {
  for (std::size_t i = 0; i < want.out.size(); ++i)
    if (!(std::abs(got.out[i] - want.out[i]) <= 1e-5 * (1.0 + std::abs(want.out[i])))) return false;
  for (std::size_t i = 0; i < want.lse.size(); ++i)
    if (!(std::abs(got.lse[i] - want.lse[i]) <= 1e-5 * (1.0 + std::abs(want.lse[i])))) return false;
  return true;
}

TEST(BlockAttentionMask, EachMaskSeesTheKeysItsPositionsAllow) {
  const Case& c = cases()[1];  // grouped-query heads
  const std::vector<float> qkv = random_values(static_cast<std::size_t>(c.B * 24 * c.row()), 21, -1.5f, 1.5f);
  const std::vector<float> kv = random_values(static_cast<std::size_t>(c.B * 8 * c.kv_row()), 22, -1.5f, 1.5f);
  for (const MaskCase& m : {MaskCase{0, BlockMask::Full}, MaskCase{10, BlockMask::Causal},
                            MaskCase{13, BlockMask::Causal}}) {
    const PairResult got = run_pair(c, m.kv_start, m.mask, qkv, kv);
    EXPECT_TRUE(agrees(got, expected_pair(c, m.kv_start, m.mask, qkv, kv)))
        << "keys from " << m.kv_start << ", mask " << static_cast<int>(m.mask);
  }
  // The test tells the masks apart.
  EXPECT_FALSE(agrees(run_pair(c, 10, BlockMask::Full, qkv, kv), expected_pair(c, 10, BlockMask::Causal, qkv, kv)));
  EXPECT_FALSE(agrees(run_pair(c, 6, BlockMask::Causal, qkv, kv), expected_pair(c, 6, BlockMask::Full, qkv, kv)));
  // Queries before every key: nothing seen, nothing written but zeros and kNoKeysLse.
  const PairResult none = run_pair(c, 13, BlockMask::Causal, qkv, kv);
  for (i64 b = 0; b < c.B; ++b)
    for (i64 h = 0; h < c.heads.q_heads; ++h)
      for (i64 i = 0; i < 3; ++i)
        EXPECT_EQ(none.lse[static_cast<std::size_t>((b * c.heads.q_heads + h) * 8 + i)], nn_math::kNoKeysLse);
}

// The GEMM pairs past one causal row block (136 rows: blocks of 128 and 8), at 1 and 2 threads.
TEST_P(BlockAttention, GemmPairsSameBitsAtOneAndTwoThreads) {
  for (const Case& c : cases())
    for (const BlockMask mask : {BlockMask::Full, BlockMask::Causal}) {
      const i64 offset = mask == BlockMask::Full ? -136 : 3;
      const PairGrads one = pair_grads(c, GetParam(), kGemm, false, offset, mask, 136, 1);
      const PairGrads two = pair_grads(c, GetParam(), kGemm, false, offset, mask, 136, 2);
      EXPECT_TRUE(same_bits(one.out, two.out) && same_bits(one.lse, two.lse) && same_bits(one.dq, two.dq) &&
                  same_bits(one.dkv, two.dkv))
          << c.name << " mask " << static_cast<int>(mask);
    }
}

// MESHTRAIN_ATTENTION picks the pair's implementation on the CPU as it does whole-sequence
// attention's: unset, the GEMMs; `reference`, the unit ops; `gemm`, the GEMMs.
TEST(BlockAttentionSelection, TheEnvironmentPicksTheImplementation) {
  const Case& c = cases()[1];
  const std::string saved = std::getenv("MESHTRAIN_ATTENTION") ? std::getenv("MESHTRAIN_ATTENTION") : "";
  auto run_default = [&](const char* env) {
    if (env) ::setenv("MESHTRAIN_ATTENTION", env, 1); else ::unsetenv("MESHTRAIN_ATTENTION");
    DeviceContext ctx(cpu_options(1));
    const Inputs in = inputs(c, DType::F32);
    const Tensor qkv = tensor_of(ctx, in.qkv, {c.B, c.T, c.row()}, DType::F32);
    Tensor out = Tensor::empty({c.B, 20, c.out_row()}, DType::F32, ctx);
    Tensor lse = Tensor::empty({c.B, c.heads.q_heads, 20}, DType::F32, ctx);
    nn::block_attention_forward(ctx, qkv, {20, 20, 20}, qkv, {0, 20, 0}, c.heads, BlockMask::Full, out, lse);
    return out.to_host<float>();
  };
  auto run_named = [&](AttentionKernel kernel) {
    DeviceContext ctx(cpu_options(1));
    const Inputs in = inputs(c, DType::F32);
    const Tensor qkv = tensor_of(ctx, in.qkv, {c.B, c.T, c.row()}, DType::F32);
    Tensor out = Tensor::empty({c.B, 20, c.out_row()}, DType::F32, ctx);
    Tensor lse = Tensor::empty({c.B, c.heads.q_heads, 20}, DType::F32, ctx);
    nn::block_attention_forward(ctx, kernel, qkv, {20, 20, 20}, qkv, {0, 20, 0}, c.heads, BlockMask::Full, out, lse);
    return out.to_host<float>();
  };
  const std::vector<float> unit = run_named(kUnitOps), gemm = run_named(kGemm);
  EXPECT_FALSE(same_bits(unit, gemm));  // the test tells them apart
  EXPECT_TRUE(same_bits(run_default(nullptr), gemm));
  EXPECT_TRUE(same_bits(run_default("reference"), unit));
  EXPECT_TRUE(same_bits(run_default("gemm"), gemm));
  if (saved.empty()) ::unsetenv("MESHTRAIN_ATTENTION"); else ::setenv("MESHTRAIN_ATTENTION", saved.c_str(), 1);
}

// A block of queries that see nothing weighs nothing: merging it leaves the running bits as they
// are, and merging into an empty running state copies the block's.
TEST(BlockAttentionMerge, EmptyBlocksWeighNothing) {
  DeviceContext ctx(cpu_options(2));
  const std::vector<float> o = random_values(2 * 4 * 6, 31), l = random_values(2 * 3 * 4, 32);
  Tensor out = Tensor::from_host(o, {2, 4, 6}, ctx), lse = Tensor::from_host(l, {2, 3, 4}, ctx);
  const Tensor zeros = Tensor::zeros({2, 4, 6}, DType::F32, ctx);
  Tensor empty_lse = Tensor::empty({2, 3, 4}, DType::F32, ctx);
  kernels::fill(ctx, empty_lse, nn_math::kNoKeysLse);
  nn::block_attention_merge(ctx, out, lse, zeros, empty_lse);
  EXPECT_TRUE(same_bits(out.to_host<float>(), o) && same_bits(lse.to_host<float>(), l));
  Tensor into = Tensor::zeros({2, 4, 6}, DType::F32, ctx);
  nn::block_attention_merge(ctx, into, empty_lse, out, lse);
  EXPECT_TRUE(same_bits(into.to_host<float>(), o) && same_bits(empty_lse.to_host<float>(), l));
}

// On a GPU: the emulation against the CPU's within the ops' tolerances compounded over the chain
// (forward, merge, delta, backward: 1e-5 each, FMAs and CUDA's logf) plus one bf16 step where the
// results are stored in bf16; twice on the GPU, the same bits.
TEST_P(BlockAttention, OnTheGpuAgreesWithTheCpuAndRepeats) {
  MT_SKIP_WITHOUT_GPU();
  const DType dtype = GetParam();
  const double tol = 4 * nn_math::tolerance_of<nn_math::BlockAttentionForward>().fp32 +
                     (dtype == DType::BF16 ? nn_math::kBf16Step : 0.0);
  for (const Case& c : cases())
    for (int cp : {1, 2, 4}) {
      const std::string what = c.name + " cp " + std::to_string(cp);
      const Result gpu = context_parallel(gpu_options(), c, dtype, cp, kUnitOps);
      const Result cpu = context_parallel(cpu_options(2), c, dtype, cp, kUnitOps);
      expect_near(gpu.out, cpu.out, tol, what + " GPU vs CPU output");
      expect_near(gpu.dqkv, cpu.dqkv, tol, what + " GPU vs CPU dqkv");
      const Result again = context_parallel(gpu_options(), c, dtype, cp, kUnitOps);
      EXPECT_TRUE(same_bits(again.out, gpu.out) && same_bits(again.dqkv, gpu.dqkv)) << what << ": a second GPU run";
    }
}

}  // namespace
}  // namespace mt
