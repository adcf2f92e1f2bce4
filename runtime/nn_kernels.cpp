// Checks shapes, builds the op of its family (runtime/ops/<family>.h) and runs it on the context's
// device's backend (runtime/backend.h).
#include "runtime/nn_kernels.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "runtime/backend.h"
#include "runtime/nn_run.h"
#include "runtime/op_profile.h"

namespace mt::nn {

using nn_math::kColumnBlock;

namespace {
// The optional positions of the position ops (wpe, RoPE): null when undefined (row t at position
// t), else an int32 [T] on the context's device. On the CPU the values are checked here, in
// [0, limit) and, where `distinct` (the wpe gradient: one unit per row owns its dwpe row), all
// different; on a GPU that would cost a copy and a sync, so there they are the caller's promise.
const std::int32_t* positions_ptr(DeviceContext& ctx, const Tensor& positions, std::int64_t T, std::int64_t limit,
                                  bool distinct, const char* what) {
  if (!positions.defined()) return nullptr;
  expect_on(ctx, positions, what);
  MT_CHECK(positions.dtype() == DType::I32 && positions.numel() == T, what, ": positions must be int32 [", T,
           "], got ", positions.describe());
  const std::int32_t* p = ptr<const std::int32_t>(positions);
  if (ctx.device().is_cpu()) {
    for (std::int64_t t = 0; t < T; ++t)
      MT_CHECK(p[t] >= 0 && p[t] < limit, what, ": position ", p[t], " of row ", t, " is outside [0, ", limit, ")");
    if (distinct) {
      std::vector<std::int32_t> sorted(p, p + T);
      std::sort(sorted.begin(), sorted.end());
      MT_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), what,
               ": positions repeat (each dwpe row is summed by one row's unit)");
    }
  }
  return p;
}

// The embedding ops over the vocabulary rows [vocab_begin, vocab_begin + wte.dim(0)) (all of them
// with vocab_begin 0); wpe / dwpe may be null. Ids are checked by the callers that need it.
void embedding_forward_rows(DeviceContext& ctx, const Tensor& tokens, const Tensor& wte, std::int64_t vocab_begin,
                            const Tensor* wpe, Tensor& out, const Tensor& positions) {
  expect_on(ctx, tokens, "tokens");
  expect_f32(ctx, wte, "wte");
  expect_on(ctx, out, "embedding output");
  MT_CHECK(tokens.dtype() == DType::I32, "tokens must be int32, got ", tokens.describe());
  MT_CHECK(tokens.rank() == 2 && wte.rank() == 2, "embedding: tokens [B, T], wte [V, C]");
  MT_CHECK(vocab_begin >= 0, "embedding: vocab_begin ", vocab_begin, " is negative");
  const std::int64_t B = tokens.dim(0), T = tokens.dim(1), C = wte.dim(1);
  const std::int32_t* pos = nullptr;
  if (wpe != nullptr) {
    expect_f32(ctx, *wpe, "wpe");
    MT_CHECK(wpe->rank() == 2, "embedding: wpe must be [maxT, C], got ", wpe->describe());
    MT_CHECK(wpe->dim(1) == C && (positions.defined() || T <= wpe->dim(0)), "embedding: sequence length ", T,
             " needs wpe with at least ", T, " rows of ", C, ", got ", wpe->describe());
    pos = positions_ptr(ctx, positions, T, wpe->dim(0), false, "embedding");
  }
  expect_numel(out, B * T * C, "embedding output");
  run<nn_math::EmbeddingForward>(ctx, out.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const std::int32_t>(tokens), ptr<const float>(wte), wpe != nullptr ? ptr<const float>(*wpe) : nullptr,
          ptr<T_>(out), B * T, T, C, vocab_begin, wte.dim(0), pos};
  });
}

void embedding_backward_rows(DeviceContext& ctx, const Tensor& tokens, const Tensor& dout, std::int64_t vocab_begin,
                             Tensor& dwte, Tensor* dwpe, const Tensor& positions) {
  expect_on(ctx, tokens, "tokens");
  expect_on(ctx, dout, "embedding output gradient");
  expect_f32(ctx, dwte, "dwte");
  MT_CHECK(tokens.dtype() == DType::I32, "tokens must be int32, got ", tokens.describe());
  MT_CHECK(tokens.rank() == 2 && dwte.rank() == 2, "embedding backward: tokens [B, T], dwte [V, C]");
  MT_CHECK(vocab_begin >= 0, "embedding backward: vocab_begin ", vocab_begin, " is negative");
  const std::int64_t B = tokens.dim(0), T = tokens.dim(1), C = dwte.dim(1);
  expect_numel(dout, B * T * C, "embedding output gradient");
  const std::int32_t* pos = nullptr;
  if (dwpe != nullptr) {
    expect_f32(ctx, *dwpe, "dwpe");
    MT_CHECK(dwpe->rank() == 2 && dwpe->dim(1) == C && (positions.defined() || T <= dwpe->dim(0)),
             "embedding backward: dwpe ", dwpe->describe(), " for T=", T);
    pos = positions_ptr(ctx, positions, T, dwpe->dim(0), true, "embedding backward");
  }
  const std::int64_t N = B * T, V = dwte.dim(0), width = unit_width(ctx);
  // Positions and keys are int32 in the index.
  MT_CHECK(N < std::numeric_limits<std::int32_t>::max() && V < std::numeric_limits<std::int32_t>::max(),
           "embedding backward: ", N, " tokens or ", V, " table rows do not fit the int32 index");
  // The positions sorted by token (row 0) and their keys (row 1), so each table row is summed by
  // one unit in position order without every unit scanning every token. Built where the tokens
  // are: on a GPU by EmbeddingTokenOrder's O(N^2) pass, on the CPU by a stable sort (O(N log N))
  // with the same keys, which gives the same index.
  Tensor index = Tensor::empty({2, N}, DType::I32, ctx);
  std::int32_t* order = ptr<std::int32_t>(index);
  std::int32_t* sorted_key = order + N;
  if (ctx.device().is_cpu()) {
    const nn_math::EmbeddingTokenOrder<float> keys{ptr<const std::int32_t>(tokens), order, sorted_key, N,
                                                   vocab_begin, V};
    std::iota(order, order + N, 0);
    std::stable_sort(order, order + N, [&](std::int32_t a, std::int32_t b) { return keys.key(a) < keys.key(b); });
    for (std::int64_t s = 0; s < N; ++s) sorted_key[s] = static_cast<std::int32_t>(keys.key(order[s]));
  } else {
    run<nn_math::EmbeddingTokenOrder>(ctx, dout.dtype(), [&](auto& op) {
      op = {ptr<const std::int32_t>(tokens), order, sorted_key, N, vocab_begin, V};
    });
  }
  run<nn_math::EmbeddingBackwardTokens>(ctx, dout.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.dout)>>;
    op = {order, sorted_key, ptr<const T_>(dout), ptr<float>(dwte), N, C, V, width};
  });
  if (dwpe == nullptr) return;
  run<nn_math::EmbeddingBackwardPositions>(ctx, dout.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.dout)>>;
    op = {ptr<const T_>(dout), ptr<float>(*dwpe), B, T, C, width, pos};
  });
}
}  // namespace

void embedding_forward(DeviceContext& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out,
                       const Tensor& positions) {
  expect_on(ctx, tokens, "tokens");
  expect_f32(ctx, wte, "wte");
  MT_CHECK(tokens.rank() == 2 && wte.rank() == 2 && wpe.rank() == 2, "embedding: tokens [B, T], wte [V, C], wpe [maxT, C]");
  check_ids(tokens, "tokens");
  embedding_forward_rows(ctx, tokens, wte, 0, &wpe, out, positions);
}

void embedding_backward(DeviceContext& ctx, const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe,
                        const Tensor& positions) {
  expect_on(ctx, tokens, "tokens");
  expect_f32(ctx, dwte, "dwte");
  MT_CHECK(tokens.rank() == 2 && dwte.rank() == 2, "embedding backward: tokens [B, T], dwte [V, C]");
  check_ids(tokens, "tokens");
  embedding_backward_rows(ctx, tokens, dout, 0, dwte, &dwpe, positions);
}

void embedding_forward_slice(DeviceContext& ctx, const Tensor& tokens, const Tensor& wte_slice,
                             std::int64_t vocab_begin, const Tensor* wpe, Tensor& out, const Tensor& positions) {
  embedding_forward_rows(ctx, tokens, wte_slice, vocab_begin, wpe, out, positions);
}

void embedding_backward_slice(DeviceContext& ctx, const Tensor& tokens, const Tensor& dout, std::int64_t vocab_begin,
                              Tensor& dwte_slice, Tensor* dwpe, const Tensor& positions) {
  embedding_backward_rows(ctx, tokens, dout, vocab_begin, dwte_slice, dwpe, positions);
}

namespace {
// Rows of C channels in x (N of them), with dout / out / dx of x's shape and dtype.
std::int64_t norm_rows(const Tensor& x, std::int64_t C, const char* what) {
  const std::int64_t N = C > 0 ? x.numel() / C : 0;
  MT_CHECK(C > 0 && x.numel() == N * C, what, ": input ", x.describe(), " is not rows of ", C);
  return N;
}

// The arguments of a layernorm forward (`what`: which), fused or not: returns the rows.
std::int64_t check_layernorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& out, const Tensor& mean, const Tensor& rstd, const char* what) {
  expect_on(ctx, x, "layernorm input");
  expect_f32(ctx, weight, "layernorm weight");
  expect_f32(ctx, bias, "layernorm bias");
  expect_f32(ctx, mean, "layernorm mean");
  expect_f32(ctx, rstd, "layernorm rstd");
  expect_on(ctx, out, "layernorm output");
  const std::int64_t C = weight.numel(), N = norm_rows(x, C, what);
  expect_numel(bias, C, "layernorm bias");
  expect_numel(out, N * C, "layernorm output");
  expect_numel(mean, N, "layernorm mean");
  expect_numel(rstd, N, "layernorm rstd");
  MT_CHECK(out.dtype() == x.dtype(), what, ": output ", out.describe(), " for input ", x.describe());
  return N;
}

// The same for an rmsnorm forward.
std::int64_t check_rmsnorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, float eps,
                                   const Tensor& out, const Tensor& rstd, const char* what) {
  expect_on(ctx, x, "rmsnorm input");
  expect_f32(ctx, weight, "rmsnorm weight");
  expect_f32(ctx, rstd, "rmsnorm rstd");
  expect_on(ctx, out, "rmsnorm output");
  const std::int64_t C = weight.numel(), N = norm_rows(x, C, what);
  MT_CHECK(eps >= 0.0f, what, ": eps ", eps, " is negative");
  expect_numel(out, N * C, "rmsnorm output");
  expect_numel(rstd, N, "rmsnorm rstd");
  MT_CHECK(out.dtype() == x.dtype(), what, ": output ", out.describe(), " for input ", x.describe());
  return N;
}

// The residual's checks of a fused add and norm: y and sum of x's shape and dtype.
void expect_residual(DeviceContext& ctx, const Tensor& x, const Tensor& y, const Tensor& sum, const char* what) {
  expect_on(ctx, y, "residual branch");
  expect_on(ctx, sum, "residual sum");
  MT_CHECK(y.dtype() == x.dtype() && sum.dtype() == x.dtype() && y.numel() == x.numel() && sum.numel() == x.numel(),
           what, ": x ", x.describe(), ", y ", y.describe(), " and sum ", sum.describe(), " differ");
}
}  // namespace

void layernorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                       Tensor& mean, Tensor& rstd) {
  const std::int64_t N = check_layernorm_forward(ctx, x, weight, bias, out, mean, rstd, "layernorm"), C = weight.numel();
  run<nn_math::LayerNormForward>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const T_>(x), ptr<const float>(weight), ptr<const float>(bias), ptr<T_>(out), ptr<float>(mean),
          ptr<float>(rstd), N, C};
  });
}

namespace {
// The shapes every layernorm backward half checks: C from the weight (or its gradient), N rows.
struct LayerNormRows {
  std::int64_t N, C;
};
LayerNormRows check_layernorm_backward(const DeviceContext& ctx, const Tensor& dout, const Tensor& x,
                                       const Tensor& mean, const Tensor& rstd, std::int64_t C) {
  expect_on(ctx, dout, "layernorm output gradient");
  expect_on(ctx, x, "layernorm input");
  expect_f32(ctx, mean, "layernorm mean");
  expect_f32(ctx, rstd, "layernorm rstd");
  const std::int64_t N = norm_rows(x, C, "layernorm backward");
  expect_numel(dout, N * C, "layernorm output gradient");
  expect_numel(mean, N, "layernorm mean");
  expect_numel(rstd, N, "layernorm rstd");
  MT_CHECK(dout.dtype() == x.dtype(), "layernorm backward: output gradient ", dout.describe(), " for input ",
           x.describe());
  return {N, C};
}
}  // namespace

void layernorm_backward_input(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& weight,
                              const Tensor& mean, const Tensor& rstd, Tensor& dx) {
  expect_f32(ctx, weight, "layernorm weight");
  expect_on(ctx, dx, "layernorm input gradient");
  const auto shape = check_layernorm_backward(ctx, dout, x, mean, rstd, weight.numel());
  const std::int64_t N = shape.N, C = shape.C;  // not a structured binding: clang cannot capture one in OpenMP
  expect_numel(dx, N * C, "layernorm input gradient");
  MT_CHECK(dx.dtype() == x.dtype(), "layernorm backward: input gradient ", dx.describe(), " for input ",
           x.describe());
  run<nn_math::LayerNormBackwardInput>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dx)>;
    op = {ptr<const T_>(dout), ptr<const T_>(x), ptr<const float>(weight), ptr<const float>(mean),
          ptr<const float>(rstd), ptr<T_>(dx), N, C};
  });
}

void layernorm_backward_params(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, Tensor& dweight, Tensor& dbias) {
  expect_f32(ctx, dweight, "layernorm weight gradient");
  expect_f32(ctx, dbias, "layernorm bias gradient");
  const auto shape = check_layernorm_backward(ctx, dout, x, mean, rstd, dweight.numel());
  const std::int64_t N = shape.N, C = shape.C;  // not a structured binding: clang cannot capture one in OpenMP
  expect_numel(dbias, C, "layernorm bias gradient");
  auto go = [&](auto tag) {
    using T_ = decltype(tag);
    const nn_math::LayerNormBackwardParams<T_> op{ptr<const T_>(dout), ptr<const T_>(x),      ptr<const float>(mean),
                                                  ptr<const float>(rstd), ptr<float>(dweight), ptr<float>(dbias),
                                                  N,                      C,                   unit_width(ctx)};
    const OpScope scope(ctx, "LayerNormBackwardParams");
    if (ctx.device().is_cpu()) {
      backend::Cpu::run(op, ctx.cpu_threads());
    } else {
      // Per-tile partial sums, folded in a fixed order by a second kernel (no float atomics).
      Tensor partials = Tensor::empty({backend::layernorm_params_workspace(N, C)}, DType::F32, ctx);
      backend::Cuda::run(op, ptr<float>(partials), ctx.stream().handle());
    }
  };
  if (x.dtype() == DType::F32) {
    go(float{});
  } else {
    MT_CHECK(x.dtype() == DType::BF16, "activations must be fp32 or bf16, got ", dtype_name(x.dtype()));
    go(bf16{});
  }
}

void layernorm_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  // Both halves' shapes before the first one writes dx.
  MT_CHECK(dweight.numel() == weight.numel() && dbias.numel() == weight.numel(), "layernorm backward: gradients ",
           dweight.describe(), " and ", dbias.describe(), " for weight ", weight.describe());
  layernorm_backward_input(ctx, dout, x, weight, mean, rstd, dx);
  layernorm_backward_params(ctx, dout, x, mean, rstd, dweight, dbias);
}

void rmsnorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd) {
  const std::int64_t N = check_rmsnorm_forward(ctx, x, weight, eps, out, rstd, "rmsnorm"), C = weight.numel();
  run<nn_math::RmsNormForward>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const T_>(x), ptr<const float>(weight), ptr<T_>(out), ptr<float>(rstd), N, C, eps};
  });
}

void add_layernorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& y, const Tensor& weight,
                           const Tensor& bias, Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd) {
  const std::int64_t N = check_layernorm_forward(ctx, x, weight, bias, out, mean, rstd, "add_layernorm"),
                     C = weight.numel();
  expect_residual(ctx, x, y, sum, "add_layernorm");
  run<nn_math::AddLayerNormForward>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const T_>(x), ptr<const T_>(y), ptr<const float>(weight), ptr<const float>(bias), ptr<T_>(sum),
          ptr<T_>(out), ptr<float>(mean), ptr<float>(rstd), N, C};
  });
}

void add_rmsnorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                         Tensor& sum, Tensor& out, Tensor& rstd) {
  const std::int64_t N = check_rmsnorm_forward(ctx, x, weight, eps, out, rstd, "add_rmsnorm"), C = weight.numel();
  expect_residual(ctx, x, y, sum, "add_rmsnorm");
  run<nn_math::AddRmsNormForward>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const T_>(x), ptr<const T_>(y), ptr<const float>(weight), ptr<T_>(sum), ptr<T_>(out), ptr<float>(rstd),
          N, C, eps};
  });
}

void rmsnorm_backward_input(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, Tensor& dx) {
  expect_on(ctx, dout, "rmsnorm output gradient");
  expect_on(ctx, x, "rmsnorm input");
  expect_f32(ctx, weight, "rmsnorm weight");
  expect_f32(ctx, rstd, "rmsnorm rstd");
  expect_on(ctx, dx, "rmsnorm input gradient");
  const std::int64_t C = weight.numel(), N = norm_rows(x, C, "rmsnorm backward");
  expect_numel(dout, N * C, "rmsnorm output gradient");
  expect_numel(rstd, N, "rmsnorm rstd");
  expect_numel(dx, N * C, "rmsnorm input gradient");
  MT_CHECK(dout.dtype() == x.dtype() && dx.dtype() == x.dtype(), "rmsnorm backward: mixed activation dtypes");
  run<nn_math::RmsNormBackwardInput>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dx)>;
    op = {ptr<const T_>(dout), ptr<const T_>(x), ptr<const float>(weight), ptr<const float>(rstd), ptr<T_>(dx), N, C};
  });
}

void rmsnorm_backward_params(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& rstd,
                             Tensor& dweight) {
  expect_on(ctx, dout, "rmsnorm output gradient");
  expect_on(ctx, x, "rmsnorm input");
  expect_f32(ctx, rstd, "rmsnorm rstd");
  expect_f32(ctx, dweight, "rmsnorm weight gradient");
  const std::int64_t C = dweight.numel(), N = norm_rows(x, C, "rmsnorm backward");
  expect_numel(dout, N * C, "rmsnorm output gradient");
  expect_numel(rstd, N, "rmsnorm rstd");
  MT_CHECK(dout.dtype() == x.dtype(), "rmsnorm backward: output gradient ", dout.describe(), " for input ",
           x.describe());
  run<nn_math::RmsNormBackwardParams>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.x)>>;
    op = {ptr<const T_>(dout), ptr<const T_>(x), ptr<const float>(rstd), ptr<float>(dweight), N, C, unit_width(ctx)};
  });
}

void broadcast_rows(DeviceContext& ctx, const Tensor& bias, Tensor& out) {
  expect_f32(ctx, bias, "bias");
  expect_on(ctx, out, "output");
  const std::int64_t cols = bias.numel(), rows = out.numel() / std::max<std::int64_t>(cols, 1);
  MT_CHECK(cols > 0 && rows * cols == out.numel(), "broadcast: ", out.describe(), " is not rows of ", cols);
  run<nn_math::BroadcastRows>(ctx, out.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const float>(bias), ptr<T_>(out), rows, cols};
  });
}

void bias_backward(DeviceContext& ctx, const Tensor& dout, Tensor& dbias) {
  expect_on(ctx, dout, "output gradient");
  expect_f32(ctx, dbias, "bias gradient");
  const std::int64_t cols = dbias.numel(), rows = dout.numel() / std::max<std::int64_t>(cols, 1);
  MT_CHECK(cols > 0 && rows * cols == dout.numel(), "bias backward: ", dout.describe(), " is not rows of ", cols);
  run<nn_math::ColumnSum>(ctx, dout.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.x)>>;
    op = {ptr<const T_>(dout), ptr<float>(dbias), rows, cols, unit_width(ctx)};
  });
}

void gelu_forward(DeviceContext& ctx, const Tensor& x, Tensor& out) {
  expect_on(ctx, x, "gelu input");
  expect_on(ctx, out, "gelu output");
  expect_numel(out, x.numel(), "gelu output");
  MT_CHECK(out.dtype() == x.dtype(), "gelu: output ", out.describe(), " for input ", x.describe());
  run<nn_math::GeluForward>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const T_>(x), ptr<T_>(out), x.numel()};
  });
}

void gelu_backward(DeviceContext& ctx, const Tensor& x, const Tensor& dout, Tensor& dx) {
  expect_on(ctx, x, "gelu input");
  expect_on(ctx, dout, "gelu output gradient");
  expect_on(ctx, dx, "gelu input gradient");
  expect_numel(dout, x.numel(), "gelu output gradient");
  expect_numel(dx, x.numel(), "gelu input gradient");
  MT_CHECK(dout.dtype() == x.dtype() && dx.dtype() == x.dtype(), "gelu backward: mixed activation dtypes");
  run<nn_math::GeluBackward>(ctx, x.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dx)>;
    op = {ptr<const T_>(x), ptr<const T_>(dout), ptr<T_>(dx), x.numel()};
  });
}

namespace {
void rope(DeviceContext& ctx, Tensor& qkv, int q_heads, int kv_heads, float theta, const Tensor& positions,
          bool inverse, const char* what) {
  expect_on(ctx, qkv, what);
  MT_CHECK(q_heads > 0 && kv_heads > 0, what, ": ", q_heads, " q heads and ", kv_heads, " kv heads");
  MT_CHECK(theta > 0.0f, what, ": theta ", theta, " must be positive");
  const std::int64_t blocks = std::int64_t{q_heads} + 2 * std::int64_t{kv_heads};
  MT_CHECK(qkv.rank() == 3 && qkv.dim(2) % blocks == 0, what, ": qkv must be [B, T, (", q_heads, " + 2 x ", kv_heads,
           ") heads x head size], got ", qkv.describe());
  const std::int64_t hs = qkv.dim(2) / blocks;
  MT_CHECK(hs % 2 == 0, what, ": head size ", hs, " is odd (channels pair within a head)");
  const std::int32_t* pos =
      positions_ptr(ctx, positions, qkv.dim(1), std::numeric_limits<std::int32_t>::max(), false, what);
  run<nn_math::Rope>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.x)>;
    op = {ptr<T_>(qkv), qkv.dim(0) * qkv.dim(1), qkv.dim(1), qkv.dim(2), q_heads + std::int64_t{kv_heads}, hs,
          theta, inverse, pos};
  });
}

std::int64_t swiglu_hidden(const Tensor& gate_up, const char* what) {
  MT_CHECK(gate_up.rank() >= 1 && gate_up.dim(gate_up.rank() - 1) % 2 == 0, what, ": gate_up must be [N, 2F], got ",
           gate_up.describe());
  return gate_up.dim(gate_up.rank() - 1) / 2;
}
}  // namespace

void rope_forward(DeviceContext& ctx, Tensor& qkv, int q_heads, int kv_heads, float theta, const Tensor& positions) {
  rope(ctx, qkv, q_heads, kv_heads, theta, positions, false, "rope");
}

void rope_backward(DeviceContext& ctx, Tensor& dqkv, int q_heads, int kv_heads, float theta,
                   const Tensor& positions) {
  rope(ctx, dqkv, q_heads, kv_heads, theta, positions, true, "rope backward");
}

void swiglu_forward(DeviceContext& ctx, const Tensor& gate_up, Tensor& out) {
  expect_on(ctx, gate_up, "swiglu input");
  expect_on(ctx, out, "swiglu output");
  const std::int64_t F = swiglu_hidden(gate_up, "swiglu"), N = F > 0 ? gate_up.numel() / (2 * F) : 0;
  expect_numel(out, N * F, "swiglu output");
  MT_CHECK(out.dtype() == gate_up.dtype(), "swiglu: output ", out.describe(), " for input ", gate_up.describe());
  run<nn_math::SwigluForward>(ctx, gate_up.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.out)>;
    op = {ptr<const T_>(gate_up), ptr<T_>(out), N, F};
  });
}

void swiglu_backward(DeviceContext& ctx, const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up) {
  expect_on(ctx, gate_up, "swiglu input");
  expect_on(ctx, dout, "swiglu output gradient");
  expect_on(ctx, dgate_up, "swiglu input gradient");
  const std::int64_t F = swiglu_hidden(gate_up, "swiglu backward"), N = F > 0 ? gate_up.numel() / (2 * F) : 0;
  expect_numel(dout, N * F, "swiglu output gradient");
  expect_numel(dgate_up, gate_up.numel(), "swiglu input gradient");
  MT_CHECK(dout.dtype() == gate_up.dtype() && dgate_up.dtype() == gate_up.dtype(),
           "swiglu backward: mixed activation dtypes");
  run<nn_math::SwigluBackward>(ctx, gate_up.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dgate_up)>;
    op = {ptr<const T_>(gate_up), ptr<const T_>(dout), ptr<T_>(dgate_up), N, F};
  });
}

namespace {
std::int64_t check_logits(const DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab) {
  expect_on(ctx, logits, "logits");
  expect_on(ctx, targets, "targets");
  MT_CHECK(logits.rank() == 2, "cross entropy: logits must be [N, Vp], got ", logits.describe());
  const std::int64_t N = logits.dim(0);
  MT_CHECK(vocab > 0 && vocab <= logits.dim(1), "cross entropy: vocab ", vocab, " for logits ", logits.describe());
  expect_numel(targets, N, "targets");
  check_ids(targets, "targets");
  return N;
}
}  // namespace

void cross_entropy_forward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab, Tensor& losses,
                           Tensor& lse) {
  const std::int64_t N = check_logits(ctx, logits, targets, vocab);
  expect_f32(ctx, losses, "losses");
  expect_f32(ctx, lse, "log-sum-exp");
  expect_numel(losses, N, "losses");
  expect_numel(lse, N, "log-sum-exp");
  run<nn_math::CrossEntropyForward>(ctx, logits.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.logits)>>;
    op = {ptr<const T_>(logits), ptr<const std::int32_t>(targets), ptr<float>(losses), ptr<float>(lse), N, vocab,
          logits.dim(1)};
  });
}

void cross_entropy_backward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int vocab, float dloss, Tensor& dlogits) {
  const std::int64_t N = check_logits(ctx, logits, targets, vocab);
  expect_f32(ctx, lse, "log-sum-exp");
  expect_numel(lse, N, "log-sum-exp");
  expect_on(ctx, dlogits, "logits gradient");
  expect_numel(dlogits, logits.numel(), "logits gradient");
  MT_CHECK(dlogits.dtype() == logits.dtype(), "cross entropy: gradient ", dlogits.describe(), " for logits ",
           logits.describe());
  run<nn_math::CrossEntropyBackward>(ctx, logits.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dlogits)>;
    op = {ptr<const T_>(logits), ptr<const std::int32_t>(targets), ptr<const float>(lse), ptr<T_>(dlogits), N, vocab,
          logits.dim(1), dloss, 0};
  });
}

void cross_entropy_fused(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab, float dloss,
                         Tensor& losses, Tensor& lse, Tensor& dlogits) {
  const std::int64_t N = check_logits(ctx, logits, targets, vocab);
  expect_f32(ctx, losses, "losses");
  expect_f32(ctx, lse, "log-sum-exp");
  expect_numel(losses, N, "losses");
  expect_numel(lse, N, "log-sum-exp");
  expect_on(ctx, dlogits, "logits gradient");
  expect_numel(dlogits, logits.numel(), "logits gradient");
  MT_CHECK(dlogits.dtype() == logits.dtype(), "cross entropy: gradient ", dlogits.describe(), " for logits ",
           logits.describe());
  run<nn_math::CrossEntropyFused>(ctx, logits.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dlogits)>;
    op = {ptr<const T_>(logits), ptr<const std::int32_t>(targets), ptr<float>(losses), ptr<float>(lse),
          ptr<T_>(dlogits), N, vocab, logits.dim(1), dloss};
  });
}

namespace {
// A vocabulary slice of logits [N, cols] (columns [vocab_begin, vocab_begin + cols) of the full
// logits): returns its number of real columns, those below `vocab`, possibly none.
std::int64_t slice_real_columns(const DeviceContext& ctx, const Tensor& logits, std::int64_t vocab_begin, int vocab,
                                const char* what) {
  expect_on(ctx, logits, "logits");
  MT_CHECK(logits.rank() == 2, what, ": logits must be [N, columns of the slice], got ", logits.describe());
  MT_CHECK(vocab > 0, what, ": vocab ", vocab, " must be positive");
  MT_CHECK(vocab_begin >= 0, what, ": vocab_begin ", vocab_begin, " is negative");
  return std::clamp<std::int64_t>(vocab - vocab_begin, 0, logits.dim(1));
}

void expect_row_stat(const DeviceContext& ctx, const Tensor& t, std::int64_t N, const char* what) {
  expect_f32(ctx, t, what);
  expect_numel(t, N, what);
}

// Targets index the full vocabulary (checked where they entered: check_ids); a slice reads only the
// columns it holds whatever the id.
void check_targets(const DeviceContext& ctx, const Tensor& targets, std::int64_t N) {
  expect_on(ctx, targets, "targets");
  expect_numel(targets, N, "targets");
  check_ids(targets, "targets");
}
}  // namespace

void vocab_parallel_max(DeviceContext& ctx, const Tensor& logits, std::int64_t vocab_begin, int vocab,
                        Tensor& row_max) {
  const std::int64_t real = slice_real_columns(ctx, logits, vocab_begin, vocab, "vocab-parallel max");
  const std::int64_t N = logits.dim(0);
  expect_row_stat(ctx, row_max, N, "row maximum");
  run<nn_math::VocabParallelMax>(ctx, logits.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.logits)>>;
    op = {ptr<const T_>(logits), ptr<float>(row_max), N, real, logits.dim(1)};
  });
}

void vocab_parallel_sum_exp(DeviceContext& ctx, const Tensor& logits, std::int64_t vocab_begin, int vocab,
                            const Tensor& row_max, Tensor& sum_exp) {
  const std::int64_t real = slice_real_columns(ctx, logits, vocab_begin, vocab, "vocab-parallel sum of exp");
  const std::int64_t N = logits.dim(0);
  expect_row_stat(ctx, row_max, N, "row maximum");
  expect_row_stat(ctx, sum_exp, N, "sum of exp");
  run<nn_math::VocabParallelSumExp>(ctx, logits.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.logits)>>;
    op = {ptr<const T_>(logits), ptr<const float>(row_max), ptr<float>(sum_exp), N, real, logits.dim(1)};
  });
}

void vocab_parallel_target_logit(DeviceContext& ctx, const Tensor& logits, const Tensor& targets,
                                 std::int64_t vocab_begin, Tensor& target_logit) {
  expect_on(ctx, logits, "logits");
  MT_CHECK(logits.rank() == 2, "vocab-parallel target logit: logits must be [N, columns of the slice], got ",
           logits.describe());
  MT_CHECK(vocab_begin >= 0, "vocab-parallel target logit: vocab_begin ", vocab_begin, " is negative");
  const std::int64_t N = logits.dim(0);
  check_targets(ctx, targets, N);
  expect_row_stat(ctx, target_logit, N, "target logit");
  run<nn_math::VocabParallelTargetLogit>(ctx, logits.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.logits)>>;
    op = {ptr<const T_>(logits), ptr<const std::int32_t>(targets), ptr<float>(target_logit), N, logits.dim(1),
          vocab_begin};
  });
}

void vocab_parallel_loss(DeviceContext& ctx, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                         Tensor& losses, Tensor& lse) {
  expect_f32(ctx, row_max, "row maximum");
  const std::int64_t N = row_max.numel();
  expect_row_stat(ctx, sum_exp, N, "sum of exp");
  expect_row_stat(ctx, target_logit, N, "target logit");
  expect_row_stat(ctx, losses, N, "losses");
  expect_row_stat(ctx, lse, N, "log-sum-exp");
  run<nn_math::VocabParallelLoss>(ctx, DType::F32, [&](auto& op) {
    op = {ptr<const float>(row_max), ptr<const float>(sum_exp), ptr<const float>(target_logit), ptr<float>(losses),
          ptr<float>(lse), N};
  });
}

void vocab_parallel_cross_entropy_backward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets,
                                           const Tensor& lse, std::int64_t vocab_begin, int vocab, float dloss,
                                           Tensor& dlogits) {
  const std::int64_t real = slice_real_columns(ctx, logits, vocab_begin, vocab, "vocab-parallel cross entropy");
  const std::int64_t N = logits.dim(0);
  check_targets(ctx, targets, N);
  expect_row_stat(ctx, lse, N, "log-sum-exp");
  expect_on(ctx, dlogits, "logits gradient");
  expect_numel(dlogits, logits.numel(), "logits gradient");
  MT_CHECK(dlogits.dtype() == logits.dtype(), "vocab-parallel cross entropy: gradient ", dlogits.describe(),
           " for logits ", logits.describe());
  run<nn_math::CrossEntropyBackward>(ctx, logits.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dlogits)>;
    op = {ptr<const T_>(logits), ptr<const std::int32_t>(targets), ptr<const float>(lse), ptr<T_>(dlogits), N, real,
          logits.dim(1), dloss, vocab_begin};
  });
}

void cross_entropy(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab, Tensor& losses,
                   Tensor* dlogits, float dloss) {
  Tensor lse = Tensor::empty({losses.numel()}, DType::F32, ctx);
  if (dlogits != nullptr) {
    cross_entropy_fused(ctx, logits, targets, vocab, dloss, losses, lse, *dlogits);
  } else {
    cross_entropy_forward(ctx, logits, targets, vocab, losses, lse);
  }
}

void softmax_rows(DeviceContext& ctx, const Tensor& logits, int vocab, float temperature, Tensor& probs) {
  expect_on(ctx, logits, "logits");
  expect_f32(ctx, probs, "probabilities");
  MT_CHECK(logits.rank() == 2, "softmax: logits must be [N, Vp], got ", logits.describe());
  MT_CHECK(temperature > 0.0f, "softmax: temperature must be positive, got ", temperature);
  const std::int64_t N = logits.dim(0), Vp = logits.dim(1);
  MT_CHECK(vocab > 0 && vocab <= Vp, "softmax: vocab ", vocab, " for logits ", logits.describe());
  expect_numel(probs, N * vocab, "probabilities");
  run<nn_math::SoftmaxRow>(ctx, logits.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.logits)>>;
    op = {ptr<const T_>(logits), ptr<float>(probs), N, vocab, Vp, temperature};
  });
}

}  // namespace mt::nn
