// Block attention's entry points (runtime/block_attention.h): the checks, then the unit ops of
// runtime/ops/block_attention.h through nn::run, or for the forward and backward of a pair under
// AttentionKernel::BatchedGemm (the CPU's default) runtime/block_attention_gemm.h.
#include "runtime/block_attention.h"

#include <type_traits>

#include "runtime/attention.h"
#include "runtime/block_attention_gemm.h"
#include "runtime/nn_run.h"

namespace mt::nn {
namespace {

using nn_math::AttentionLayout;
using nn_math::BlockPair;

void check_rows(const Tensor& t, SequenceBlock block, const char* what) {
  MT_CHECK(t.rank() == 3 && block.count > 0 && block.begin >= 0 && block.begin + block.count <= t.dim(1) &&
               block.position >= 0,
           "block attention: rows [", block.begin, ", ", block.begin + block.count, ") at position ", block.position,
           " are not a block of ", what, " ", t.describe());
}

void expect_fp32_shape(const DeviceContext& ctx, const Tensor& t, const Shape& shape, const char* what) {
  expect_f32(ctx, t, what);
  MT_CHECK(t.shape() == shape, "block attention: ", what, " is ", t.describe(), ", expected ", shape_str(shape));
}

// A pair's operands, checked: qkv and kv in one activation dtype, kv fused or packed. The pointers
// are typed per activation dtype where the op is built (operands).
using Pair = BlockGemmPair;
Pair check_pair(const DeviceContext& ctx, const Tensor& qkv, SequenceBlock q, const Tensor& kv, SequenceBlock k,
                const AttentionHeads& heads, BlockMask mask) {
  expect_on(ctx, qkv, "qkv");
  expect_on(ctx, kv, "kv");
  const AttentionLayout L = attention_layout(qkv, heads);
  check_rows(qkv, q, "qkv");
  check_rows(kv, k, "kv");
  const std::int64_t packed = 2 * L.kv_heads * L.head_size;
  MT_CHECK(kv.dim(0) == qkv.dim(0) && (kv.dim(2) == L.row() || kv.dim(2) == packed) && kv.dtype() == qkv.dtype(),
           "block attention: kv ", kv.describe(), " is neither a fused qkv like ", qkv.describe(),
           " nor a packed [k | v] block of ", packed, " channels");
  const BlockPair pair{qkv.dim(0), qkv.dim(1), q.begin, q.count, q.position,
                       kv.dim(1),  k.begin,    k.count, k.position, mask};
  return {L, pair, kv.dim(2), kv.dim(2) == L.row() ? L.k_offset(0) : 0};
}

template <class T>
nn_math::BlockOperands<T> operands(const Pair& p, const Tensor& qkv, const Tensor& kv) {
  return {ptr<const T>(qkv), ptr<const T>(kv), p.kv_width, p.k_channel, p.pair, p.heads};
}

Shape rows_shape(const Tensor& qkv, SequenceBlock q, const AttentionLayout& L) {
  return {qkv.dim(0), q.count, L.out_row()};
}
Shape stats_shape(const Tensor& qkv, SequenceBlock q, const AttentionLayout& L) {
  return {qkv.dim(0), L.q_heads, q.count};
}

// dout (and out) of the query side: the layer's [B, Tq, q_heads x hs] in the activation dtype.
void check_query_rows(const DeviceContext& ctx, const Tensor& t, DType dtype, std::int64_t batch, std::int64_t seq,
                      std::int64_t width, SequenceBlock q, const char* what) {
  expect_on(ctx, t, what);
  MT_CHECK(t.dtype() == dtype && t.rank() == 3 && t.dim(0) == batch && t.dim(1) == seq && t.dim(2) == width,
           "block attention: ", what, " is ", t.describe(), ", expected [", batch, ", ", seq, ", ", width, "] ",
           dtype_name(dtype));
  check_rows(t, q, what);
}

}  // namespace

void block_attention_forward(DeviceContext& ctx, const Tensor& qkv, SequenceBlock q, const Tensor& kv,
                             SequenceBlock k, const AttentionHeads& heads, BlockMask mask, Tensor& out, Tensor& lse) {
  block_attention_forward(ctx, attention_kernel_for(ctx.device().is_cpu()), qkv, q, kv, k, heads, mask, out, lse);
}

void block_attention_forward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& qkv, SequenceBlock q,
                             const Tensor& kv, SequenceBlock k, const AttentionHeads& heads, BlockMask mask,
                             Tensor& out, Tensor& lse) {
  const Pair p = check_pair(ctx, qkv, q, kv, k, heads, mask);
  expect_fp32_shape(ctx, out, rows_shape(qkv, q, p.heads), "block output");
  expect_fp32_shape(ctx, lse, stats_shape(qkv, q, p.heads), "block lse");
  if (kernel == AttentionKernel::BatchedGemm) return block_attention_gemm_forward(ctx, p, qkv, kv, out, lse);
  run<nn_math::BlockAttentionForward>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.in.qkv)>>;
    op = {operands<T_>(p, qkv, kv), ptr<float>(out), ptr<float>(lse)};
  });
}

void block_attention_merge(DeviceContext& ctx, Tensor& out, Tensor& lse, const Tensor& block_out,
                           const Tensor& block_lse) {
  expect_f32(ctx, out, "running output");
  expect_f32(ctx, lse, "running lse");
  MT_CHECK(lse.rank() == 3 && out.rank() == 3 && out.dim(0) == lse.dim(0) && out.dim(1) == lse.dim(2) &&
               lse.dim(1) > 0 && out.dim(2) % lse.dim(1) == 0,
           "block attention merge: output ", out.describe(), " and lse ", lse.describe(),
           " are not [B, T, heads x hs] and [B, heads, T]");
  expect_fp32_shape(ctx, block_out, out.shape(), "block output");
  expect_fp32_shape(ctx, block_lse, lse.shape(), "block lse");
  const std::int64_t H = lse.dim(1);
  const AttentionLayout L{out.dim(2) / H, H, 1, 0, H, 0};  // only the q heads' channels matter here
  run<nn_math::BlockAttentionMerge>(ctx, DType::F32, [&](auto& op) {
    op = {ptr<float>(out), ptr<float>(lse), ptr<const float>(block_out), ptr<const float>(block_lse), lse.dim(0),
          lse.dim(2), L};
  });
}

void block_attention_delta(DeviceContext& ctx, const Tensor& dout, const Tensor& out, SequenceBlock q,
                           Tensor& delta) {
  expect_f32(ctx, delta, "delta");
  MT_CHECK(delta.rank() == 3 && delta.dim(2) == q.count && delta.dim(1) > 0 && dout.rank() == 3 &&
               dout.dim(2) % delta.dim(1) == 0,
           "block attention delta: ", delta.describe(), " is not [B, heads, ", q.count, "] for the output gradient ",
           dout.describe());
  const std::int64_t B = delta.dim(0), H = delta.dim(1);
  check_query_rows(ctx, dout, dout.dtype(), B, dout.dim(1), dout.dim(2), q, "output gradient");
  check_query_rows(ctx, out, dout.dtype(), B, dout.dim(1), dout.dim(2), q, "output");
  const AttentionLayout L{dout.dim(2) / H, H, 1, 0, H, 0};  // only the q heads' channels matter here
  const BlockPair pair{B, dout.dim(1), q.begin, q.count, q.position, 0, 0, 0, 0, BlockMask::Full};
  run<nn_math::BlockAttentionBackwardDelta>(ctx, dout.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.dout)>>;
    op = {ptr<const T_>(dout), ptr<const T_>(out), ptr<float>(delta), pair, L};
  });
}

void block_attention_backward(DeviceContext& ctx, const Tensor& qkv, SequenceBlock q, const Tensor& kv,
                              SequenceBlock k, const AttentionHeads& heads, BlockMask mask, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, Tensor& dq, Tensor& dkv) {
  block_attention_backward(ctx, attention_kernel_for(ctx.device().is_cpu()), qkv, q, kv, k, heads, mask, dout, lse,
                           delta, dq, dkv);
}

void block_attention_backward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& qkv, SequenceBlock q,
                              const Tensor& kv, SequenceBlock k, const AttentionHeads& heads, BlockMask mask,
                              const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor& dq, Tensor& dkv) {
  const Pair p = check_pair(ctx, qkv, q, kv, k, heads, mask);
  check_query_rows(ctx, dout, qkv.dtype(), qkv.dim(0), qkv.dim(1), p.heads.out_row(), q, "output gradient");
  expect_fp32_shape(ctx, lse, stats_shape(qkv, q, p.heads), "lse");
  expect_fp32_shape(ctx, delta, stats_shape(qkv, q, p.heads), "delta");
  expect_fp32_shape(ctx, dq, rows_shape(qkv, q, p.heads), "dq");
  expect_fp32_shape(ctx, dkv, {qkv.dim(0), k.count, 2 * p.heads.kv_heads * p.heads.head_size}, "dkv");
  if (kernel == AttentionKernel::BatchedGemm)
    return block_attention_gemm_backward(ctx, p, qkv, kv, dout, lse, delta, dq, dkv);
  run<nn_math::BlockAttentionBackwardQuery>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.in.qkv)>>;
    op = {operands<T_>(p, qkv, kv), ptr<const T_>(dout), ptr<const float>(lse), ptr<const float>(delta),
          ptr<float>(dq)};
  });
  run<nn_math::BlockAttentionBackwardKeyValue>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_cv_t<std::remove_pointer_t<decltype(op.in.qkv)>>;
    op = {operands<T_>(p, qkv, kv), ptr<const T_>(dout), ptr<const float>(lse), ptr<const float>(delta),
          ptr<float>(dkv)};
  });
}

void block_attention_store(DeviceContext& ctx, const Tensor& src, Tensor& dst, std::int64_t first,
                           std::int64_t column) {
  expect_f32(ctx, src, "block result");
  expect_on(ctx, dst, "destination");
  MT_CHECK(src.rank() == 3 && dst.rank() == 3 && src.dim(0) == dst.dim(0) && first >= 0 &&
               first + src.dim(1) <= dst.dim(1) && column >= 0 && column + src.dim(2) <= dst.dim(2),
           "block attention store: ", src.describe(), " does not fit at row ", first, ", column ", column, " of ",
           dst.describe());
  run<nn_math::BlockAttentionStore>(ctx, dst.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.dst)>;
    op = {ptr<const float>(src), ptr<T_>(dst), src.dim(0), src.dim(1), src.dim(2), dst.dim(1), first, dst.dim(2),
          column};
  });
}

void block_attention_pack_kv(DeviceContext& ctx, const Tensor& qkv, const AttentionHeads& heads, std::int64_t first,
                             Tensor& kv) {
  expect_on(ctx, qkv, "qkv");
  expect_on(ctx, kv, "packed kv");
  const AttentionLayout L = attention_layout(qkv, heads);
  MT_CHECK(kv.dtype() == qkv.dtype() && kv.rank() == 3 && kv.dim(0) == qkv.dim(0) &&
               kv.dim(2) == 2 * L.kv_heads * L.head_size,
           "block attention: packed kv ", kv.describe(), " is not [", qkv.dim(0), ", n, ", 2 * L.kv_heads * L.head_size,
           "] ", dtype_name(qkv.dtype()));
  check_rows(qkv, {first, kv.dim(1), 0}, "qkv");
  run<nn_math::BlockAttentionPackKv>(ctx, qkv.dtype(), [&](auto& op) {
    using T_ = std::remove_pointer_t<decltype(op.kv)>;
    op = {ptr<const T_>(qkv), ptr<T_>(kv), qkv.dim(0), kv.dim(1), qkv.dim(1), first, L};
  });
}

}  // namespace mt::nn
