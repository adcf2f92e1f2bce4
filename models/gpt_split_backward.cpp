// Gpt: the backward split into B (activation gradients) and W (weight gradients), for the
// zero-bubble schedules.
#include "models/gpt.h"

#include "models/blocks/block.h"
#include "models/gpt_state.h"

namespace mt {

// ---- Split backward (B, then W) ---------------------------------------------------------------
// B runs the fused backward's kernels minus the parameter gradients, in the same order on the same
// inputs, so its activation gradients have the fused bits; it writes what W reads into the slot
// (the fused backward's scratch and dres move on). W then runs the parameter-gradient kernels on
// the very tensors the fused backward gave them, in its order: the same bits.

void Gpt::keep_weight_inputs(Slot& s) {
  const ChunkInfo& info = chunks_[static_cast<std::size_t>(s.chunk)];
  if (info.head && options_.sequence_parallel && !s.dlnf_local.defined()) {
    s.dlnf_local = Tensor::empty({local_rows(s.B, s.T), config_.channels}, compute_dtype(), ctx_);
    s.bytes += static_cast<std::int64_t>(s.dlnf_local.nbytes());
  }
  if (info.embedding && options_.sequence_parallel && !s.demb.defined()) {
    s.demb = Tensor::empty({static_cast<std::int64_t>(s.B) * s.T, config_.channels}, compute_dtype(), ctx_);
    s.bytes += static_cast<std::int64_t>(s.demb.nbytes());
  }
  if (options_.recompute != Recompute::None) {
    take_weight_inputs(s);  // the layers' gradients for W come with the recomputed activations
  } else if (s.grads.empty()) {
    s.grads = new_layer_grads(info.layers.size(), s.B, s.T, s.bytes);
  }
}

void Gpt::run_blocks_backward_input(const ChunkInfo& c, Slot& s, Scratch& w) {
  for (int i = c.layers.size() - 1; i >= 0; --i) {
    Block& blk = *blocks_[static_cast<std::size_t>(c.first_block + i)];
    LayerActs a = layer_buffers(s, w, i, s.recomputed.get());
    auto& g = (s.recomputed ? s.recomputed->grads : s.grads)[static_cast<std::size_t>(i)];
    // The fused backward's units, and its collectives, in its order. W reads what B keeps: the
    // row-parallel output gradients, the norms' upstream gradients, dqkv, and (sequence parallel)
    // the gathered inputs of the column-parallel weight gradients.
    std::optional<UnitUse> attn_use;
    if (options_.recompute == Recompute::Full) attn_use.emplace(hooks_, blk.attn_unit, ParamUse::BackwardInput);
    {
      const UnitUse mlp_use(hooks_, blk.mlp_unit, ParamUse::BackwardInput);
      recompute_layer(blk, s, w, i, a);
      blk.fc_proj.keep_output_grad(ctx_, s.dres, g.dmlp_out);  // dres collects the branches' gradients from here on
      blk.mlp_down_backward_input(ctx_, g.dmlp_out, a.fch, w.dact, a.fch);  // dfch into fch: W reads fch_gelu
      blk.fc.input(ctx_, a.ln2, g.ln2_full);
      blk.fc.backward_input(ctx_, a.fch, g.dln2, w.dln_partial);
      blk.ln2.backward_input(ctx_, g.dln2, a.res2, a.ln2_mean, a.ln2_rstd, s.dres);
    }
    if (!attn_use) attn_use.emplace(hooks_, blk.attn_unit, ParamUse::BackwardInput);
    blk.attn_proj.keep_output_grad(ctx_, s.dres, g.dattn_out);
    blk.attn_proj.backward_input(ctx_, g.dattn_out, w.datty);
    attention_backward(blk, w.datty, a, g.dqkv);
    blk.qkv.input(ctx_, a.ln1, g.ln1_full);
    blk.qkv.backward_input(ctx_, g.dqkv, g.dln1, w.dln_partial);
    blk.ln1.backward_input(ctx_, g.dln1, s.residual[static_cast<std::size_t>(i)], a.ln1_mean, a.ln1_rstd, s.dres);
  }
}

void Gpt::run_blocks_backward_weights(const ChunkInfo& c, Slot& s, Scratch& w) {
  for (int i = c.layers.size() - 1; i >= 0; --i) {
    Block& blk = *blocks_[static_cast<std::size_t>(c.first_block + i)];
    const LayerActs a = layer_buffers(s, w, i, s.recomputed.get());  // no qkv nor att: B's alone
    const auto& g = (s.recomputed ? s.recomputed->grads : s.grads)[static_cast<std::size_t>(i)];
    {
      const UnitUse mlp_use(hooks_, blk.mlp_unit, ParamUse::BackwardWeights);
      blk.fc_proj.backward_weights(ctx_, g.dmlp_out, a.fch_gelu);
      blk.fc.backward_weights(ctx_, a.fch, blk.fc.kept_input(a.ln2, g.ln2_full));  // fch holds dfch since B
      layernorm_backward_params(blk.ln2, g.dln2, a.res2, a.ln2_mean, a.ln2_rstd, w);
    }
    const UnitUse attn_use(hooks_, blk.attn_unit, ParamUse::BackwardWeights);
    blk.attn_proj.backward_weights(ctx_, g.dattn_out, a.atty);
    blk.qkv.backward_weights(ctx_, g.dqkv, blk.qkv.kept_input(a.ln1, g.ln1_full), &w.replicated_dweight);
    layernorm_backward_params(blk.ln1, g.dln1, s.residual[static_cast<std::size_t>(i)], a.ln1_mean, a.ln1_rstd, w);
    ready(blk.first_param, blk.params);
  }
}

void Gpt::backward_chunk_input(int chunk, int micro) {
  Slot& s = live(chunk, micro);
  MT_CHECK(s.backward == Slot::Backward::NotRun, "backward_chunk_input of chunk ", chunk, " micro-batch ", micro,
           s.backward == Slot::Backward::WeightsPending ? " twice (its backward_chunk_weights is pending)"
                                                        : " after its backward already ran");
  const ChunkInfo& c = chunks_[static_cast<std::size_t>(chunk)];
  Scratch& w = scratch(s.B, s.T);
  keep_weight_inputs(s);
  if (c.head) head_backward_input(s);  // otherwise dres holds what the next stage sent
  run_blocks_backward_input(c, s, w);
  // The fused backward's last collective: every position's input gradient, which the embedding's reads.
  if (c.embedding && options_.sequence_parallel) region_.leave_backward_into(ctx_, s.dres, s.demb);
  s.backward = Slot::Backward::WeightsPending;  // only once B got through: a failed B leaves nothing for W
}

void Gpt::backward_chunk_weights(int chunk, int micro, const GradReady& on_ready) {
  Slot& s = live(chunk, micro);
  MT_CHECK(s.backward == Slot::Backward::WeightsPending, "backward_chunk_weights of chunk ", chunk, " micro-batch ",
           micro, s.backward == Slot::Backward::Done ? " twice" : " without its backward_chunk_input");
  s.backward = Slot::Backward::Done;  // from here the slot may be released, even if W fails
  const ReadyScope scope(grad_ready_, on_ready);
  const ChunkInfo& c = chunks_[static_cast<std::size_t>(chunk)];
  if (c.head) head_backward_weights(s);
  run_blocks_backward_weights(c, s, scratch(s.B, s.T));
  if (c.embedding) embedding_backward(s, /*gathered_by_b=*/true);
  give_back_weight_inputs(s);
}

}  // namespace mt
