// The attention family: the checks both implementations share, the Reference implementation (one
// unit per position and head, runtime/nn_functors.h), and the batched-GEMM one (runtime/attention.h).
#include "runtime/attention.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "runtime/gemm.h"
#include "runtime/kernels.h"
#include "runtime/nn_run.h"

namespace mt::nn {
namespace {

struct AttentionShape {
  std::int64_t B, T;
  nn_math::AttentionLayout heads;
};
AttentionShape attention_shape(const Tensor& qkv, const AttentionHeads& h) {
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
  return {qkv.dim(0), qkv.dim(1), layout};
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


void attention_forward(DeviceContext& ctx, const Tensor& qkv, const AttentionHeads& heads, Tensor& out, Tensor& att) {
  expect_on(ctx, qkv, "qkv");
  expect_on(ctx, out, "attention output");
  expect_f32(ctx, att, "attention probabilities");
  const AttentionShape s = attention_shape(qkv, heads);
  expect_numel(out, s.B * s.T * s.heads.out_row(), "attention output");
  expect_numel(att, s.B * s.heads.q_heads * s.T * s.T, "attention probabilities");
  MT_CHECK(out.dtype() == qkv.dtype(), "attention: output ", out.describe(), " for qkv ", qkv.describe());
  run<nn_math::AttentionForward>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const T_>(qkv), ptr<T_>(out), ptr<float>(att), s.B, s.T, s.heads};
  });
}

void attention_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        const AttentionHeads& heads, Tensor& dqkv) {
  expect_on(ctx, dout, "attention output gradient");
  expect_on(ctx, qkv, "qkv");
  expect_on(ctx, dqkv, "qkv gradient");
  expect_f32(ctx, att, "attention probabilities");
  const AttentionShape s = attention_shape(qkv, heads);
  expect_numel(dout, s.B * s.T * s.heads.out_row(), "attention output gradient");
  expect_numel(att, s.B * s.heads.q_heads * s.T * s.T, "attention probabilities");
  expect_numel(dqkv, qkv.numel(), "qkv gradient");
  MT_CHECK(dout.dtype() == qkv.dtype() && dqkv.dtype() == qkv.dtype(), "attention backward: mixed activation dtypes");
  // The gradient of the attention scores, att's size; the passes are those of nn_functors.h.
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

// One sequence's strided-batched product over the local q heads [h0, h1) that read one kv head:
// the q-head operand steps by `step_a` / `step_c` elements from head to head, the kv head's by none.
GemmArgs head_batch(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const void* a,
                    std::int64_t lda, std::int64_t step_a, const void* b, std::int64_t ldb, void* c, std::int64_t ldc,
                    std::int64_t step_c, std::int64_t heads, DType inputs, DType output, float beta = 0.0f) {
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.beta = beta;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = c;
  g.ldc = ldc;
  g.batch = heads;
  g.stride_a = step_a;
  g.stride_b = 0;
  g.stride_c = step_c;
  g.dtype = inputs;
  g.c_dtype = output;
  return g;
}

struct GemmAttention {
  DeviceContext& ctx;
  AttentionShape s;
  DType act;
  std::size_t esz;
  float scale;

  GemmAttention(DeviceContext& c, const AttentionShape& shape, DType activations)
      : ctx(c), s(shape), act(activations), esz(dtype_size(activations)),
        scale(1.0f / std::sqrt(static_cast<float>(shape.heads.head_size))) {}

  std::int64_t T() const { return s.T; }
  std::int64_t hs() const { return s.heads.head_size; }
  std::int64_t H() const { return s.heads.q_heads; }
  std::int64_t square() const { return s.T * s.T; }

  void forward(const Tensor& qkv, Tensor& out, Tensor& saved) {
    const auto& L = s.heads;
    const bool in_place = act == DType::F32;  // fp32 scores become the saved probabilities in place
    Tensor scores = in_place ? Tensor() : Tensor::empty({H(), T(), T()}, DType::F32, ctx);
    for (std::int64_t b = 0; b < s.B; ++b) {
      const void* q_b = at(qkv.data(), b * T() * L.row(), esz);
      void* p_b = at(saved.data(), b * H() * square(), esz);
      float* s_b = in_place ? static_cast<float*>(p_b) : static_cast<float*>(scores.data());
      for (std::int64_t kv = 0; kv < L.kv_heads; ++kv) {
        const std::int64_t h0 = L.first_q(kv), n = L.end_q(kv) - h0;
        if (n == 0) continue;
        gemm(ctx, head_batch(false, true, T(), T(), hs(), at(q_b, L.q_offset(h0), esz), L.row(), hs(),
                             at(q_b, L.k_offset(kv), esz), L.row(), s_b + h0 * square(), T(), square(), n, act,
                             DType::F32));
      }
      run<nn_math::CausalSoftmaxForward>(ctx, act, [&](auto& op) {
        using T_ = std::remove_pointer_t<decltype(op.p)>;
        op = {s_b, static_cast<T_*>(p_b), H() * T(), T(), scale};
      });
      void* o_b = at(out.data(), b * T() * L.out_row(), esz);
      for (std::int64_t kv = 0; kv < L.kv_heads; ++kv) {
        const std::int64_t h0 = L.first_q(kv), n = L.end_q(kv) - h0;
        if (n == 0) continue;
        gemm(ctx, head_batch(false, false, T(), hs(), T(), at(p_b, h0 * square(), esz), T(), square(),
                             at(q_b, L.v_offset(kv), esz), L.row(), at(o_b, L.q_offset(h0), esz), L.out_row(), hs(), n,
                             act, act));
      }
    }
  }

  void backward(const Tensor& dout, const Tensor& qkv, const Tensor& saved, Tensor& dqkv) {
    const auto& L = s.heads;
    Tensor dp = Tensor::empty({H(), T(), T()}, DType::F32, ctx);
    Tensor ds_narrow = act == DType::F32 ? Tensor() : Tensor::empty({H(), T(), T()}, act, ctx);
    void* ds = act == DType::F32 ? dp.data() : ds_narrow.data();  // dS in the activation dtype
    Tensor kv_sum = Tensor::empty({2, T(), hs()}, DType::F32, ctx);  // one kv head's dK and dV, fp32
    float* dk_sum = static_cast<float*>(kv_sum.data());
    float* dv_sum = dk_sum + T() * hs();
    for (std::int64_t b = 0; b < s.B; ++b) {
      const void* q_b = at(qkv.data(), b * T() * L.row(), esz);
      const void* g_b = at(dout.data(), b * T() * L.out_row(), esz);
      const void* p_b = at(saved.data(), b * H() * square(), esz);
      void* d_b = at(dqkv.data(), b * T() * L.row(), esz);
      float* dp_b = static_cast<float*>(dp.data());
      for (std::int64_t kv = 0; kv < L.kv_heads; ++kv) {
        const std::int64_t h0 = L.first_q(kv), n = L.end_q(kv) - h0;
        if (n == 0) continue;
        gemm(ctx, head_batch(false, true, T(), T(), hs(), at(g_b, L.q_offset(h0), esz), L.out_row(), hs(),
                             at(q_b, L.v_offset(kv), esz), L.row(), dp_b + h0 * square(), T(), square(), n, act,
                             DType::F32));
      }
      run<nn_math::CausalSoftmaxBackward>(ctx, act, [&](auto& op) {
        using T_ = std::remove_pointer_t<decltype(op.ds)>;
        op = {static_cast<const T_*>(p_b), dp_b, static_cast<T_*>(ds), H() * T(), T(), scale};
      });
      for (std::int64_t kv = 0; kv < L.kv_heads; ++kv) {
        const std::int64_t h0 = L.first_q(kv), h1 = L.end_q(kv);
        if (h1 > h0) {
          gemm(ctx, head_batch(false, false, T(), hs(), T(), at(ds, h0 * square(), esz), T(), square(),
                               at(q_b, L.k_offset(kv), esz), L.row(), at(d_b, L.q_offset(h0), esz), L.row(), hs(),
                               h1 - h0, act, act));
          // dK and dV sum the q heads that read the kv head, in ascending order, in fp32.
          for (std::int64_t h = h0; h < h1; ++h) {
            const float beta = h == h0 ? 0.0f : 1.0f;
            gemm(ctx, head_batch(true, false, T(), hs(), T(), at(ds, h * square(), esz), T(), 0,
                                 at(q_b, L.q_offset(h), esz), L.row(), dk_sum, hs(), 0, 1, act, DType::F32, beta));
            gemm(ctx, head_batch(true, false, T(), hs(), T(), at(p_b, h * square(), esz), T(), 0,
                                 at(g_b, L.q_offset(h), esz), L.out_row(), dv_sum, hs(), 0, 1, act, DType::F32, beta));
          }
        } else {
          kernels::fill(ctx, kv_sum, 0.0);  // no local q head reads this kv head
        }
        store(dk_sum, at(d_b, L.k_offset(kv), esz));
        store(dv_sum, at(d_b, L.v_offset(kv), esz));
      }
    }
  }

  // A compact fp32 [T, hs] block into a kv head's columns of one sequence's dqkv.
  void store(const float* src, void* dst) {
    run<nn_math::StoreColumns>(ctx, act, [&](auto& op) {
      using T_ = std::remove_pointer_t<decltype(op.dst)>;
      op = {src, static_cast<T_*>(dst), T(), hs(), s.heads.row()};
    });
  }
};

void check_saved(const DeviceContext& ctx, AttentionKernel kernel, const Tensor& saved, const AttentionShape& s,
                 DType activations) {
  expect_on(ctx, saved, "attention's saved state");
  const DType want = attention_saved_dtype(kernel, activations);
  MT_CHECK(saved.dtype() == want && saved.numel() == s.B * s.heads.q_heads * s.T * s.T, "attention (",
           attention_kernel_name(kernel), "): saved state ", saved.describe(), ", expected [", s.B, ", ",
           s.heads.q_heads, ", ", s.T, ", ", s.T, "] ", dtype_name(want));
}

}  // namespace

void attention_forward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& qkv, const AttentionHeads& heads,
                       Tensor& out, Tensor& saved) {
  if (kernel == AttentionKernel::Reference) {
    attention_forward(ctx, qkv, heads, out, saved);
    return;
  }
  expect_on(ctx, qkv, "qkv");
  expect_on(ctx, out, "attention output");
  const AttentionShape s = attention_shape(qkv, heads);
  expect_numel(out, s.B * s.T * s.heads.out_row(), "attention output");
  MT_CHECK(out.dtype() == qkv.dtype(), "attention: output ", out.describe(), " for qkv ", qkv.describe());
  check_saved(ctx, kernel, saved, s, qkv.dtype());
  GemmAttention(ctx, s, qkv.dtype()).forward(qkv, out, saved);
}

void attention_backward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& dout, const Tensor& qkv,
                        const Tensor& saved, const AttentionHeads& heads, Tensor& dqkv) {
  if (kernel == AttentionKernel::Reference) {
    attention_backward(ctx, dout, qkv, saved, heads, dqkv);
    return;
  }
  expect_on(ctx, dout, "attention output gradient");
  expect_on(ctx, qkv, "qkv");
  expect_on(ctx, dqkv, "qkv gradient");
  const AttentionShape s = attention_shape(qkv, heads);
  expect_numel(dout, s.B * s.T * s.heads.out_row(), "attention output gradient");
  expect_numel(dqkv, qkv.numel(), "qkv gradient");
  MT_CHECK(dout.dtype() == qkv.dtype() && dqkv.dtype() == qkv.dtype(), "attention backward: mixed activation dtypes");
  check_saved(ctx, kernel, saved, s, qkv.dtype());
  GemmAttention(ctx, s, qkv.dtype()).backward(dout, qkv, saved, dqkv);
}

}  // namespace mt::nn
