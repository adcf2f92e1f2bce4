// Block attention by batched GEMMs (runtime/block_attention_gemm.h): the GEMMs of runtime/gemm.h
// around the row ops BlockSoftmaxForward / BlockSoftmaxBackward of runtime/ops/block_attention.h.
#include "runtime/block_attention_gemm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "runtime/gemm.h"
#include "runtime/nn_run.h"

namespace mt::nn {
namespace {

using nn_math::AttentionLayout;
using nn_math::BlockPair;

// Rows of a causal pair's score blocks: a constant, so the GEMM shapes (and bits) depend on the
// pair alone. Row block [r0, r1) needs the keys [0, keys_seen(r1 - 1)) only.
constexpr std::int64_t kBlockRows = 128;

// A row-major matrix per q head of the batch, head_stride elements apart (0: the kv head's, shared).
struct Mat {
  const void* base;
  std::int64_t ld, head_stride;
  DType dtype;
  Mat shift(std::int64_t row, std::int64_t col = 0) const {
    return {static_cast<const char*>(base) + (row * ld + col) * static_cast<std::int64_t>(dtype_size(dtype)), ld,
            head_stride, dtype};
  }
  Mat head(std::int64_t g) const {
    return {static_cast<const char*>(base) + g * head_stride * static_cast<std::int64_t>(dtype_size(dtype)), ld,
            head_stride, dtype};
  }
};

// C = op(A) op(B) (+ C when accumulate) for `batch` heads; A and B share a dtype, C is fp32 or theirs.
void product(DeviceContext& ctx, std::int64_t batch, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
             std::int64_t k, const Mat& a, const Mat& b, const Mat& c, bool accumulate) {
  if (m == 0 || n == 0 || k == 0) return;  // nothing seen: C keeps what it holds (its zeros)
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.a = a.base;
  g.lda = a.ld;
  g.b = b.base;
  g.ldb = b.ld;
  g.c = const_cast<void*>(c.base);
  g.ldc = c.ld;
  g.batch = batch;
  g.stride_a = a.head_stride;
  g.stride_b = b.head_stride;
  g.stride_c = c.head_stride;
  g.dtype = a.dtype;
  g.c_dtype = c.dtype;
  gemm(ctx, g);
}

// The pair's operands for one sequence b and kv head: its G q heads from h0 on.
struct Group {
  std::int64_t b, kv_head, h0, count;
};

struct BlockGemm {
  DeviceContext& ctx;
  const BlockGemmPair& p;
  DType act;
  std::int64_t G;  // the most q heads one kv head has: the scratch's batch

  BlockGemm(DeviceContext& c, const BlockGemmPair& pair, DType activations)
      : ctx(c), p(pair), act(activations), G(0) {
    for (std::int64_t kv = 0; kv < p.heads.kv_heads; ++kv) G = std::max(G, p.heads.end_q(kv) - p.heads.first_q(kv));
  }

  const BlockPair& pr() const { return p.pair; }
  std::int64_t hs() const { return p.heads.head_size; }
  std::int64_t square() const { return pr().q_len * pr().kv_len; }
  Shape scratch_shape() const { return {G, pr().q_len, pr().kv_len}; }

  // f(group) for every (sequence, kv head) some local q head reads, in order.
  template <class F>
  void for_groups(F&& f) const {
    for (std::int64_t b = 0; b < pr().batch; ++b)
      for (std::int64_t kv = 0; kv < p.heads.kv_heads; ++kv) {
        const std::int64_t h0 = p.heads.first_q(kv), n = p.heads.end_q(kv) - h0;
        if (n > 0) f(Group{b, kv, h0, n});
      }
  }
  // f(r0, r1, keys) for the query row blocks that see any key, keys the most any row of them sees.
  template <class F>
  void for_row_blocks(F&& f) const {
    const std::int64_t step = pr().mask == nn_math::BlockMask::Full ? pr().q_len : kBlockRows;
    for (std::int64_t r0 = 0; r0 < pr().q_len; r0 += step) {
      const std::int64_t r1 = std::min(r0 + step, pr().q_len), keys = pr().keys_seen(r1 - 1);
      if (keys > 0) f(r0, r1, keys);
    }
  }
  // f(s0, s1, first) for the key blocks some query sees, first the first query seeing key s0.
  template <class F>
  void for_key_blocks(F&& f) const {
    const std::int64_t step = pr().mask == nn_math::BlockMask::Full ? pr().kv_len : kBlockRows;
    for (std::int64_t s0 = 0; s0 < pr().kv_len; s0 += step) {
      const std::int64_t first = pr().first_query(s0);
      if (first < pr().q_len) f(s0, std::min(s0 + step, pr().kv_len), first);
    }
  }

  Mat q(const Tensor& qkv, const Group& g) const {
    const std::int64_t at = pr().q_row(g.b, 0) * p.heads.row() + p.heads.q_offset(g.h0);
    return {static_cast<const char*>(qkv.data()) + at * static_cast<std::int64_t>(dtype_size(act)), p.heads.row(),
            hs(), act};
  }
  Mat k(const Tensor& kv, const Group& g) const {
    const std::int64_t at = pr().kv_row(g.b, 0) * p.kv_width + p.k_channel + g.kv_head * hs();
    return {static_cast<const char*>(kv.data()) + at * static_cast<std::int64_t>(dtype_size(act)), p.kv_width, 0,
            act};
  }
  Mat v(const Tensor& kv, const Group& g) const { return k(kv, g).shift(0, p.heads.kv_heads * hs()); }
  // The query side's [B, *, q_heads x hs] rows: dout (the layer's rows at q_first, the activation
  // dtype) or a fp32 block tensor (out, dq: rows from 0).
  Mat dout(const Tensor& t, const Group& g) const {
    const std::int64_t at = pr().q_row(g.b, 0) * p.heads.out_row() + p.heads.q_offset(g.h0);
    return {static_cast<const char*>(t.data()) + at * static_cast<std::int64_t>(dtype_size(act)), p.heads.out_row(),
            hs(), act};
  }
  Mat block_rows(const Tensor& t, const Group& g) const {
    const std::int64_t at = g.b * pr().q_len * p.heads.out_row() + p.heads.q_offset(g.h0);
    return {static_cast<const float*>(t.data()) + at, p.heads.out_row(), hs(), DType::F32};
  }
  // dk of the group's kv head in the block's [B, kv_len, 2 x kv_heads x hs] [dk | dv]; dv follows.
  Mat dk(const Tensor& dkv, const Group& g) const {
    const std::int64_t width = 2 * p.heads.kv_heads * hs();
    return {static_cast<const float*>(dkv.data()) + g.b * pr().kv_len * width + g.kv_head * hs(), width, 0,
            DType::F32};
  }
  Mat scratch(const Tensor& t) const {
    return {t.data(), pr().kv_len, square(), t.dtype()};
  }

  // S = Q K^T for the row blocks that see keys (fp32, unscaled).
  void scores(const Mat& q, const Mat& k, const Mat& s, std::int64_t heads) const {
    for_row_blocks([&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
      product(ctx, heads, false, true, r1 - r0, keys, hs(), q.shift(r0), k, s.shift(r0), false);
    });
  }

  void forward(const Tensor& qkv, const Tensor& kv, Tensor& out, Tensor& lse) {
    Tensor s_t = Tensor::empty(scratch_shape(), DType::F32, ctx);
    // fp32: the probabilities overwrite the scores in place; bf16: rounded into a buffer of their own.
    Tensor p_t = act == DType::F32 ? s_t : Tensor::empty(scratch_shape(), act, ctx);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs()));
    for_groups([&](const Group& g) {
      const Mat s = scratch(s_t), pm = scratch(p_t), o = block_rows(out, g);
      scores(q(qkv, g), k(kv, g), s, g.count);
      run<nn_math::BlockSoftmaxForward>(ctx, act, [&](auto& op) {
        using T_ = std::remove_pointer_t<decltype(op.p)>;
        op = {ptr<const float>(s_t), ptr<T_>(p_t), ptr<float>(lse), ptr<float>(out), pr(), p.heads,
              g.b, g.h0, g.count, scale};
      });
      // Rows of a block that sees no key were zeroed by the softmax; the others are written here.
      const Mat vm = v(kv, g);
      for_row_blocks([&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
        product(ctx, g.count, false, false, r1 - r0, hs(), keys, pm.shift(r0), vm, o.shift(r0), false);
      });
    });
  }

  void backward(const Tensor& qkv, const Tensor& kv, const Tensor& dout_t, const Tensor& lse, const Tensor& delta,
                Tensor& dq, Tensor& dkv) {
    Tensor s_t = Tensor::empty(scratch_shape(), DType::F32, ctx);
    Tensor dp_t = Tensor::empty(scratch_shape(), DType::F32, ctx);
    // fp32: P over the scores and dS over dP in place; bf16: each rounded into a buffer of its own.
    Tensor p_t = act == DType::F32 ? s_t : Tensor::empty(scratch_shape(), act, ctx);
    Tensor ds_t = act == DType::F32 ? dp_t : Tensor::empty(scratch_shape(), act, ctx);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs()));
    for_groups([&](const Group& g) {
      const Mat qm = q(qkv, g), km = k(kv, g), vm = v(kv, g), gm = dout(dout_t, g);
      const Mat s = scratch(s_t), dp = scratch(dp_t), pm = scratch(p_t), ds = scratch(ds_t);
      scores(qm, km, s, g.count);
      for_row_blocks([&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
        product(ctx, g.count, false, true, r1 - r0, keys, hs(), gm.shift(r0), vm, dp.shift(r0), false);
      });
      run<nn_math::BlockSoftmaxBackward>(ctx, act, [&](auto& op) {
        using T_ = std::remove_pointer_t<decltype(op.p)>;
        op = {ptr<const float>(s_t), ptr<const float>(dp_t), ptr<T_>(p_t), ptr<T_>(ds_t), ptr<const float>(lse),
              ptr<const float>(delta), pr(), p.heads, g.b, g.h0, g.count, scale};
      });
      const Mat dqm = block_rows(dq, g);
      for_row_blocks([&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
        product(ctx, g.count, false, false, r1 - r0, hs(), keys, ds.shift(r0), km, dqm.shift(r0), true);
      });
      // dk and dv of the kv head: its q heads one at a time, ascending, each added onto the sums.
      const Mat dkm = dk(dkv, g), dvm = dkm.shift(0, p.heads.kv_heads * hs());
      for (std::int64_t h = 0; h < g.count; ++h)
        for_key_blocks([&](std::int64_t s0, std::int64_t s1, std::int64_t first) {
          const std::int64_t rows = pr().q_len - first;
          product(ctx, 1, true, false, s1 - s0, hs(), rows, ds.head(h).shift(first, s0), qm.head(h).shift(first),
                  dkm.shift(s0), true);
          product(ctx, 1, true, false, s1 - s0, hs(), rows, pm.head(h).shift(first, s0), gm.head(h).shift(first),
                  dvm.shift(s0), true);
        });
    });
  }
};

}  // namespace

void block_attention_gemm_forward(DeviceContext& ctx, const BlockGemmPair& p, const Tensor& qkv, const Tensor& kv,
                                  Tensor& out, Tensor& lse) {
  BlockGemm(ctx, p, qkv.dtype()).forward(qkv, kv, out, lse);
}

void block_attention_gemm_backward(DeviceContext& ctx, const BlockGemmPair& p, const Tensor& qkv, const Tensor& kv,
                                   const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor& dq,
                                   Tensor& dkv) {
  BlockGemm(ctx, p, qkv.dtype()).backward(qkv, kv, dout, lse, delta, dq, dkv);
}

}  // namespace mt::nn
