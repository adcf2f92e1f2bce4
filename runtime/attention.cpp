// The attention family: the checks both implementations share, the Reference implementation (one
// unit per position and head, runtime/ops/attention.h), and the batched-GEMM one (runtime/attention.h).
#include "runtime/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/gemm.h"
#include "runtime/kernels.h"
#include "runtime/nn_run.h"

namespace mt::nn {

nn_math::AttentionLayout attention_layout(const Tensor& qkv, const AttentionHeads& h) {
  MT_CHECK(h.q_heads > 0 && h.kv_heads > 0 && h.group > 0 && h.q_begin >= 0 && h.kv_begin >= 0,
           "attention: heads {q ", h.q_heads, ", kv ", h.kv_heads, ", q_begin ", h.q_begin, ", group ", h.group,
           ", kv_begin ", h.kv_begin, "} must be positive counts and non-negative offsets");
  const std::int64_t blocks = std::int64_t{h.q_heads} + 2 * std::int64_t{h.kv_heads};
  MT_CHECK(qkv.rank() == 3 && qkv.dim(2) % blocks == 0, "attention: qkv must be [B, T, (", h.q_heads, " + 2 x ",
           h.kv_heads, ") heads x head size], got ", qkv.describe());
  const nn_math::AttentionLayout layout{qkv.dim(2) / blocks, h.q_heads, h.kv_heads, h.q_begin, h.group, h.kv_begin};
  // kv_of is monotonic in the q head: the first and the last local q head bound them all.
  const std::int64_t first = layout.kv_of(0), last = layout.kv_of(h.q_heads - 1);
  MT_CHECK(first >= 0 && last < h.kv_heads, "attention: q heads [", h.q_begin, ", ", h.q_begin + h.q_heads,
           ") in groups of ", h.group, " read kv heads [", first + h.kv_begin, ", ", last + h.kv_begin,
           "], outside the local kv heads [", h.kv_begin, ", ", h.kv_begin + h.kv_heads, ")");
  return layout;
}

namespace {

struct AttentionShape {
  std::int64_t B, T;
  nn_math::AttentionLayout heads;
};
AttentionShape attention_shape(const Tensor& qkv, const AttentionHeads& h) {
  return {qkv.dim(0), qkv.dim(1), attention_layout(qkv, h)};
}

// Multi-head attention as grouped-query attention with one q head per kv head.
AttentionHeads multi_head(const Tensor& qkv, int heads) {
  MT_CHECK(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, "attention: qkv must be [B, T, 3C], got ", qkv.describe());
  const std::int64_t C = qkv.dim(2) / 3;
  MT_CHECK(heads > 0 && C % heads == 0, "attention: ", C, " channels do not split into ", heads, " heads");
  return {heads, heads, 0, 1, 0};
}

}  // namespace

AttentionKernel attention_kernel_for(bool cpu) {
  const char* env = std::getenv("MESHTRAIN_ATTENTION");
  if (env == nullptr || *env == '\0') return cpu ? AttentionKernel::BatchedGemm : AttentionKernel::Reference;
  const std::string name = env;
  MT_REQUIRE_ENV(name == "reference" || name == "gemm", "MESHTRAIN_ATTENTION=", name,
                 " is not an attention implementation: use reference or gemm (or leave it unset)");
  return name == "reference" ? AttentionKernel::Reference : AttentionKernel::BatchedGemm;
}

Shape attention_saved_shape(std::int64_t batch, std::int64_t seq_len, const AttentionHeads& heads) {
  return {batch, heads.q_heads, seq_len, seq_len};
}

DType attention_saved_dtype(AttentionKernel kernel, DType activations) {
  return kernel == AttentionKernel::Reference ? DType::F32 : activations;
}

Tensor attention_saved(DeviceContext& ctx, AttentionKernel kernel, std::int64_t batch, std::int64_t seq_len,
                       const AttentionHeads& heads, DType activations) {
  return Tensor::empty(attention_saved_shape(batch, seq_len, heads), attention_saved_dtype(kernel, activations), ctx);
}


namespace {

// The checks both implementations share; each returns the shape.
AttentionShape check_forward(const DeviceContext& ctx, const Tensor& qkv, const AttentionHeads& heads,
                             const Tensor& out) {
  expect_on(ctx, qkv, "qkv");
  expect_on(ctx, out, "attention output");
  const AttentionShape s = attention_shape(qkv, heads);
  expect_numel(out, s.B * s.T * s.heads.out_row(), "attention output");
  MT_CHECK(out.dtype() == qkv.dtype(), "attention: output ", out.describe(), " for qkv ", qkv.describe());
  return s;
}

AttentionShape check_backward(const DeviceContext& ctx, const Tensor& dout, const Tensor& qkv,
                              const AttentionHeads& heads, const Tensor& dqkv) {
  expect_on(ctx, dout, "attention output gradient");
  expect_on(ctx, qkv, "qkv");
  expect_on(ctx, dqkv, "qkv gradient");
  const AttentionShape s = attention_shape(qkv, heads);
  expect_numel(dout, s.B * s.T * s.heads.out_row(), "attention output gradient");
  expect_numel(dqkv, qkv.numel(), "qkv gradient");
  MT_CHECK(dout.dtype() == qkv.dtype() && dqkv.dtype() == qkv.dtype(), "attention backward: mixed activation dtypes");
  return s;
}

// The state the forward keeps, as attention_saved makes it for `kernel`.
void check_saved(const DeviceContext& ctx, AttentionKernel kernel, const Tensor& saved, const AttentionShape& s,
                 DType activations) {
  expect_on(ctx, saved, "attention's saved state");
  const DType want = attention_saved_dtype(kernel, activations);
  MT_CHECK(saved.dtype() == want && saved.numel() == s.B * s.heads.q_heads * s.T * s.T, "attention (",
           attention_kernel_name(kernel), "): saved state ", saved.describe(), ", expected [", s.B, ", ",
           s.heads.q_heads, ", ", s.T, ", ", s.T, "] ", dtype_name(want));
}

// Reference: one unit per (sequence, position, q head); att [B, q_heads, T, T] fp32.
void reference_forward(DeviceContext& ctx, const AttentionShape& s, const Tensor& qkv, Tensor& out, Tensor& att) {
  run<nn_math::AttentionForward>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const T_>(qkv), ptr<T_>(out), ptr<float>(att), s.B, s.T, s.heads};
  });
}

void reference_backward(DeviceContext& ctx, const AttentionShape& s, const Tensor& dout, const Tensor& qkv,
                        const Tensor& att, Tensor& dqkv) {
  // The gradient of the attention scores, att's size; the passes are those of runtime/ops/attention.h.
  Tensor dscore = Tensor::empty({s.B, s.heads.q_heads, s.T, s.T}, DType::F32, ctx);
  const std::int64_t width = unit_width(ctx);
  run<nn_math::AttentionBackwardDots>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.qkv)>>;
    op = {ptr<const T_>(dout), ptr<const T_>(qkv), ptr<float>(dscore), s.B, s.T, s.heads, width};
  });
  run<nn_math::AttentionBackwardSoftmax>(ctx, qkv.dtype(), [&](auto& op) {
    op = {ptr<const float>(att), ptr<float>(dscore), s.B, s.T, s.heads};
  });
  run<nn_math::AttentionBackwardQuery>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dqkv)>;
    op = {ptr<const T_>(qkv), ptr<const float>(dscore), ptr<T_>(dqkv), s.B, s.T, s.heads, width};
  });
  run<nn_math::AttentionBackwardKeyValue>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dqkv)>;
    op = {ptr<const T_>(dout), ptr<const T_>(qkv),  ptr<const float>(att), ptr<const float>(dscore),
          ptr<T_>(dqkv),       s.B, s.T, s.heads, width};
  });
}

}  // namespace

void attention_forward(DeviceContext& ctx, const Tensor& qkv, const AttentionHeads& heads, Tensor& out, Tensor& att) {
  attention_forward(ctx, AttentionKernel::Reference, qkv, heads, out, att);
}

void attention_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        const AttentionHeads& heads, Tensor& dqkv) {
  attention_backward(ctx, AttentionKernel::Reference, dout, qkv, att, heads, dqkv);
}

void attention_forward(DeviceContext& ctx, const Tensor& qkv, int heads, Tensor& out, Tensor& att) {
  attention_forward(ctx, qkv, multi_head(qkv, heads), out, att);
}

void attention_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& att, int heads,
                        Tensor& dqkv) {
  attention_backward(ctx, dout, qkv, att, multi_head(qkv, heads), dqkv);
}

namespace {

// Byte address of element `offset` of a tensor of element size `esz`.
template <class P>
P* at(P* base, std::int64_t offset, std::size_t esz) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(base) + offset * static_cast<std::int64_t>(esz));
}

// A set of (q head, kv head) pairs one strided-batched GEMM covers: q heads q0 + j * q_step read kv
// heads kv0 + j * kv_step, j < count.
struct HeadBatch {
  std::int64_t q0, q_step, kv0, kv_step, count;
};

// Every local q head once, in batches as large as the layout allows. When each kv head is read by a
// whole group of local q heads (gpt2; llama without tensor parallelism, or with kv heads split over
// tp), batch i takes the i-th q head of every group, so each GEMM spans all kv heads; otherwise (a
// tp rank whose q heads cut groups) one batch per kv head, over its q heads, the kv head reached
// through a zero stride. Batches come in ascending order of the q heads they hold within a kv head:
// summing dK and dV batch by batch adds each kv head's q heads in ascending order.
std::vector<HeadBatch> head_batches(const nn_math::AttentionLayout& L) {
  std::vector<HeadBatch> batches;
  const bool whole_groups = L.q_heads == L.kv_heads * L.group && L.q_begin == L.kv_begin * L.group;
  if (whole_groups) {
    for (std::int64_t i = 0; i < L.group; ++i) batches.push_back({i, L.group, 0, 1, L.kv_heads});
    return batches;
  }
  for (std::int64_t kv = 0; kv < L.kv_heads; ++kv)
    for (std::int64_t h = L.first_q(kv); h < L.end_q(kv); ++h) batches.push_back({h, 1, kv, 0, 1});
  return batches;
}

// True when some local kv head is read by no local q head (its gradients are zeros).
bool unread_kv_heads(const nn_math::AttentionLayout& L) {
  for (std::int64_t kv = 0; kv < L.kv_heads; ++kv)
    if (L.first_q(kv) == L.end_q(kv)) return true;
  return false;
}

// An operand of the products: a row-major matrix per head, `head_stride` elements apart, indexed by
// the q head or by the kv head of each pair of a HeadBatch.
struct Operand {
  const void* base;
  std::int64_t ld, head_stride;
  bool by_q;  // indexed by the q head (else by the kv head)
  std::size_t esz;
  // The same matrices from element (row, col) on.
  Operand shift(std::int64_t row, std::int64_t col = 0) const {
    return {at(base, row * ld + col, esz), ld, head_stride, by_q, esz};
  }
};

// Causal products skip the blocks above the diagonal: rows are taken in blocks of kCausalRows (a
// function of T alone, so the bits do not depend on the thread count), and block [r0, r1) of the
// scores needs the keys [0, r1) only. That halves the attention GEMMs' work at long T; at T <=
// kCausalRows it is one block, the whole matrix.
constexpr std::int64_t kCausalRows = 128;

struct GemmAttention {
  DeviceContext& ctx;
  AttentionShape s;
  DType act;
  std::size_t esz;
  float scale;
  std::vector<HeadBatch> batches;

  GemmAttention(DeviceContext& c, const AttentionShape& shape, DType activations)
      : ctx(c), s(shape), act(activations), esz(dtype_size(activations)),
        scale(1.0f / std::sqrt(static_cast<float>(shape.heads.head_size))), batches(head_batches(shape.heads)) {}

  std::int64_t T() const { return s.T; }
  std::int64_t hs() const { return s.heads.head_size; }
  std::int64_t H() const { return s.heads.q_heads; }
  std::int64_t square() const { return s.T * s.T; }
  // f(r0, r1) for the causal row blocks, in order.
  template <class F>
  void for_blocks(F&& f) const {
    for (std::int64_t r0 = 0; r0 < T(); r0 += kCausalRows) f(r0, std::min(r0 + kCausalRows, T()));
  }
  Operand act_operand(const void* base, std::int64_t ld, std::int64_t head_stride, bool by_q) const {
    return {base, ld, head_stride, by_q, esz};
  }
  static Operand f32_operand(const void* base, std::int64_t ld, std::int64_t head_stride, bool by_q) {
    return {base, ld, head_stride, by_q, sizeof(float)};
  }

  // C = op(A) op(B) (+ C when accumulate) for every pair of the batch: m x n outputs over k, C of
  // dtype `out`.
  void product(const HeadBatch& hb, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const Operand& a, const Operand& b, const Operand& c, DType out, bool accumulate = false) {
    auto first = [&](const Operand& x) { return (x.by_q ? hb.q0 : hb.kv0) * x.head_stride; };
    auto step = [&](const Operand& x) { return (x.by_q ? hb.q_step : hb.kv_step) * x.head_stride; };
    GemmArgs g;
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.m = m;
    g.n = n;
    g.k = k;
    g.beta = accumulate ? 1.0f : 0.0f;
    g.a = at(a.base, first(a), a.esz);
    g.lda = a.ld;
    g.b = at(b.base, first(b), b.esz);
    g.ldb = b.ld;
    g.c = const_cast<void*>(at(c.base, first(c), c.esz));
    g.ldc = c.ld;
    g.batch = hb.count;
    g.stride_a = step(a);
    g.stride_b = step(b);
    g.stride_c = step(c);
    g.dtype = act;
    g.c_dtype = out;
    gemm(ctx, g);
  }

  void forward(const Tensor& qkv, Tensor& out, Tensor& saved) {
    const auto& L = s.heads;
    const bool in_place = act == DType::F32;  // fp32 scores become the saved probabilities in place
    Tensor scores = in_place ? Tensor() : Tensor::empty({H(), T(), T()}, DType::F32, ctx);
    for (std::int64_t b = 0; b < s.B; ++b) {
      const void* x_b = at(qkv.data(), b * T() * L.row(), esz);
      void* p_b = at(saved.data(), b * H() * square(), esz);
      void* s_b = in_place ? p_b : scores.data();
      const Operand q = act_operand(at(x_b, L.q_offset(0), esz), L.row(), hs(), true);
      const Operand k = act_operand(at(x_b, L.k_offset(0), esz), L.row(), hs(), false);
      const Operand v = act_operand(at(x_b, L.v_offset(0), esz), L.row(), hs(), false);
      const Operand sc = f32_operand(s_b, T(), square(), true);
      const Operand p = act_operand(p_b, T(), square(), true);
      const Operand o = act_operand(at(out.data(), b * T() * L.out_row(), esz), L.out_row(), hs(), true);
      for (const HeadBatch& hb : batches)
        for_blocks([&](std::int64_t r0, std::int64_t r1) {
          product(hb, false, true, r1 - r0, r1, hs(), q.shift(r0), k, sc.shift(r0), DType::F32);
        });
      // Reads each row's entries up to the diagonal only: the ones the blocks skipped are never read.
      run<nn_math::CausalSoftmaxForward>(ctx, act, [&](auto& op) {
        using T_ = std::remove_pointer_t<decltype(op.p)>;
        op = {static_cast<const float*>(s_b), static_cast<T_*>(p_b), H() * T(), T(), scale};
      });
      for (const HeadBatch& hb : batches)
        for_blocks([&](std::int64_t r0, std::int64_t r1) {
          product(hb, false, false, r1 - r0, hs(), r1, p.shift(r0), v, o.shift(r0), act);
        });
    }
  }

  void backward(const Tensor& dout, const Tensor& qkv, const Tensor& saved, Tensor& dqkv) {
    const auto& L = s.heads;
    Tensor dp_t = Tensor::empty({H(), T(), T()}, DType::F32, ctx);
    Tensor ds_narrow = act == DType::F32 ? Tensor() : Tensor::empty({H(), T(), T()}, act, ctx);
    void* ds_b = act == DType::F32 ? dp_t.data() : ds_narrow.data();  // dS in the activation dtype
    // Every kv head's dK and dV, summed over its q heads in fp32: [2, kv heads, T, hs].
    Tensor kv_sums = Tensor::empty({2, L.kv_heads, T(), hs()}, DType::F32, ctx);
    float* dk_sum = static_cast<float*>(kv_sums.data());
    float* dv_sum = dk_sum + L.kv_heads * T() * hs();
    // A kv head no local q head reads is never written: zero its sums once for every sequence.
    if (unread_kv_heads(L)) kernels::fill(ctx, kv_sums, 0.0);
    for (std::int64_t b = 0; b < s.B; ++b) {
      const void* x_b = at(qkv.data(), b * T() * L.row(), esz);
      void* d_b = at(dqkv.data(), b * T() * L.row(), esz);
      const Operand q = act_operand(at(x_b, L.q_offset(0), esz), L.row(), hs(), true);
      const Operand k = act_operand(at(x_b, L.k_offset(0), esz), L.row(), hs(), false);
      const Operand v = act_operand(at(x_b, L.v_offset(0), esz), L.row(), hs(), false);
      const Operand g = act_operand(at(dout.data(), b * T() * L.out_row(), esz), L.out_row(), hs(), true);
      const Operand p = act_operand(at(saved.data(), b * H() * square(), esz), T(), square(), true);
      const Operand dp = f32_operand(dp_t.data(), T(), square(), true);
      const Operand ds = act_operand(ds_b, T(), square(), true);
      const Operand dq = act_operand(at(d_b, L.q_offset(0), esz), L.row(), hs(), true);
      const Operand dk = f32_operand(dk_sum, hs(), T() * hs(), false);
      const Operand dv = f32_operand(dv_sum, hs(), T() * hs(), false);
      for (const HeadBatch& hb : batches)
        for_blocks([&](std::int64_t r0, std::int64_t r1) {
          product(hb, false, true, r1 - r0, r1, hs(), g.shift(r0), v, dp.shift(r0), DType::F32);
        });
      run<nn_math::CausalSoftmaxBackward>(ctx, act, [&](auto& op) {
        using T_ = std::remove_pointer_t<decltype(op.ds)>;
        op = {static_cast<const T_*>(p.base), static_cast<const float*>(dp.base), static_cast<T_*>(ds_b), H() * T(),
              T(), scale};
      });
      std::vector<bool> started(static_cast<std::size_t>(L.kv_heads), false);
      for (const HeadBatch& hb : batches) {
        // A kv head's first batch starts its sums; later ones (its next q heads) add to them.
        const bool accumulate = started[static_cast<std::size_t>(hb.kv0)];
        for (std::int64_t j = 0; j < hb.count; ++j) started[static_cast<std::size_t>(hb.kv0 + j * hb.kv_step)] = true;
        for_blocks([&](std::int64_t r0, std::int64_t r1) {
          // dQ rows [r0, r1) read the keys [0, r1); dK and dV rows [r0, r1) the queries [r0, T) (dS
          // and P are zero above the diagonal, so the rows before r0 add nothing).
          product(hb, false, false, r1 - r0, hs(), r1, ds.shift(r0), k, dq.shift(r0), act);
          product(hb, true, false, r1 - r0, hs(), T() - r0, ds.shift(r0, r0), q.shift(r0), dk.shift(r0), DType::F32,
                  accumulate);
          product(hb, true, false, r1 - r0, hs(), T() - r0, p.shift(r0, r0), g.shift(r0), dv.shift(r0), DType::F32,
                  accumulate);
        });
      }
      store(dk_sum, at(d_b, L.k_offset(0), esz));
      store(dv_sum, at(d_b, L.v_offset(0), esz));
    }
  }

  // Every kv head's compact fp32 [T, hs] sums into its columns of one sequence's dqkv.
  void store(const float* src, void* dst) {
    run<nn_math::StoreColumns>(ctx, act, [&](auto& op) {
      using T_ = std::remove_pointer_t<decltype(op.dst)>;
      op = {src, static_cast<T_*>(dst), s.heads.kv_heads, T(), hs(), s.heads.row()};
    });
  }
};

}  // namespace

void attention_forward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& qkv, const AttentionHeads& heads,
                       Tensor& out, Tensor& saved) {
  const AttentionShape s = check_forward(ctx, qkv, heads, out);
  check_saved(ctx, kernel, saved, s, qkv.dtype());
  if (kernel == AttentionKernel::Reference) {
    reference_forward(ctx, s, qkv, out, saved);
  } else {
    GemmAttention(ctx, s, qkv.dtype()).forward(qkv, out, saved);
  }
}

void attention_backward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& dout, const Tensor& qkv,
                        const Tensor& saved, const AttentionHeads& heads, Tensor& dqkv) {
  const AttentionShape s = check_backward(ctx, dout, qkv, heads, dqkv);
  check_saved(ctx, kernel, saved, s, qkv.dtype());
  if (kernel == AttentionKernel::Reference) {
    reference_backward(ctx, s, dout, qkv, saved, dqkv);
  } else {
    GemmAttention(ctx, s, qkv.dtype()).backward(dout, qkv, saved, dqkv);
  }
}

}  // namespace mt::nn
