// Attention of a query block against a key/value block, merged by log-sum-exp: the piece ring
// attention (context parallelism) folds over the kv blocks that pass around the ring. The math is
// runtime/ops/block_attention.h's, run unit by unit on the context's device (CPU, or CUDA one thread
// per unit); every output element is one unit's, summed in a fixed order: the same bits at any
// thread count.
//
// Tensors. The query side: the rank's own qkv [B, Tq, (q_heads + 2 x kv_heads) x hs] (fused
// [q | k | v], AttentionHeads as runtime/nn_kernels.h's attention_forward) and its output and output
// gradient [B, Tq, q_heads x hs], read at the rows of a SequenceBlock `q`. The kv side: kv [B, Tk, *],
// either a fused qkv (the rank's own blocks) or a packed [k | v] block [B, Tk, 2 x kv_heads x hs]
// (what the ring passes: grouped-query heads send only the kv heads), read at the rows of `k`. The
// results are fp32 and block-shaped: out [B, q.count, q_heads x hs], lse and delta [B, q_heads,
// q.count], dq like out, dkv [B, k.count, 2 x kv_heads x hs] laid out [dk | dv].
//
// A kv block leaves its rank packed by block_attention_pack_kv. One query block's forward over its
// visible kv blocks, in an order the caller fixes:
//   block_attention_forward(first block) into (out, lse); for every further block,
//   block_attention_forward into (block_out, block_lse), then block_attention_merge;
//   block_attention_store(out) into the layer's output rows.
// Its backward, from that output and the final lse:
//   block_attention_delta once; dq, dkv zeroed; block_attention_backward for every visible pair
//   (dq adds over the kv blocks, dkv over the query blocks, each in the order the pairs run);
//   block_attention_store of dq and dkv into the rows and columns of dqkv.
// Two implementations of the forward and backward of a pair (runtime/attention_kernel.h's, picked as
// whole-sequence attention's are by attention_kernel_for: MESHTRAIN_ATTENTION=reference|gemm):
// Reference, the unit ops, CUDA's default; BatchedGemm (runtime/block_attention_gemm.h), the CPU's.
// The other passes are unit ops either way (O(rows)).
// The mask per pair: a kv block wholly before the queries is Full, the diagonal block Causal
// (key position <= query position), one wholly after is skipped (a query that sees no key gets lse
// kNoKeysLse and weighs nothing in a merge).
// defines: BlockMask, SequenceBlock, block_attention_forward, block_attention_merge, block_attention_delta,
//          block_attention_backward, block_attention_store, block_attention_pack_kv
#pragma once

#include <cstdint>

#include "runtime/attention_kernel.h"
#include "runtime/nn_kernels.h"
#include "runtime/ops/block_attention.h"
#include "runtime/tensor.h"

namespace mt::nn {

using nn_math::BlockMask;

// Rows [begin, begin + count) of a tensor's sequence dimension (dim 1), holding the global positions
// [position, position + count): a chunk of the rank's sequence, or a whole received block.
struct SequenceBlock {
  std::int64_t begin = 0, count = 0, position = 0;
};

// (out, lse) = this pair's attention normalised within the block, and the log-sum-exp of each
// query's scaled scores over the keys it sees. out and lse are overwritten.
void block_attention_forward(DeviceContext& ctx, const Tensor& qkv, SequenceBlock q, const Tensor& kv,
                             SequenceBlock k, const AttentionHeads& heads, BlockMask mask, Tensor& out, Tensor& lse);
// The same with the implementation named (the one above asks attention_kernel_for).
void block_attention_forward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& qkv, SequenceBlock q,
                             const Tensor& kv, SequenceBlock k, const AttentionHeads& heads, BlockMask mask,
                             Tensor& out, Tensor& lse);

// (out, lse) <- their log-sum-exp merge with (block_out, block_lse), in place (shapes as the
// forward's). Not associative in floating point: the bits are those of the caller's fold order.
void block_attention_merge(DeviceContext& ctx, Tensor& out, Tensor& lse, const Tensor& block_out,
                           const Tensor& block_lse);

// delta [B, q_heads, q.count] = the dot product of dout and out per query and head, out being the
// final (merged, stored) output of the query block.
void block_attention_delta(DeviceContext& ctx, const Tensor& dout, const Tensor& out, SequenceBlock q,
                           Tensor& delta);

// This pair's gradients, added: dq += its part of the query block's, dkv += its part of the kv
// block's. lse is the query block's final one (after every merge), delta block_attention_delta's.
void block_attention_backward(DeviceContext& ctx, const Tensor& qkv, SequenceBlock q, const Tensor& kv,
                              SequenceBlock k, const AttentionHeads& heads, BlockMask mask, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, Tensor& dq, Tensor& dkv);
void block_attention_backward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& qkv, SequenceBlock q,
                              const Tensor& kv, SequenceBlock k, const AttentionHeads& heads, BlockMask mask,
                              const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor& dq, Tensor& dkv);

// dst[b, first + t, column + c] = src[b, t, c] rounded once into dst's dtype: an fp32 block result
// [B, n, cols] into rows [first, first + n) and columns [column, column + cols) of dst [B, T, ld]
// (the merged output into the layer's output; dq into dqkv's q columns, dkv into its k and v ones).
void block_attention_store(DeviceContext& ctx, const Tensor& src, Tensor& dst, std::int64_t first,
                           std::int64_t column);

// kv [B, n, 2 x kv_heads x hs] = the k and v channels of qkv's rows [first, first + n): the rank's
// own keys and values packed [k | v], the block the ring sends.
void block_attention_pack_kv(DeviceContext& ctx, const Tensor& qkv, const AttentionHeads& heads, std::int64_t first,
                             Tensor& kv);

}  // namespace mt::nn
