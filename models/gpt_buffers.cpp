// Gpt: where activations live. A slot per (chunk, micro-batch) holds what forward keeps for
// backward, one scratch what any chunk may use while it computes, and a pool of W inputs what a
// split backward's B recomputes for its W; which layer fields each holds follows the recompute mode.
#include "models/gpt.h"

#include "models/blocks/block.h"
#include "models/gpt_state.h"
#include "runtime/kernels.h"

namespace mt {
namespace {

// Fields of a LayerActs, to say which of them a buffer set holds.
enum LayerField : unsigned {
  kLn1 = 1u << 0, kLn1Stats = 1u << 1, kQkv = 1u << 2, kAtty = 1u << 3, kAtt = 1u << 4, kRes2 = 1u << 5,
  kLn2 = 1u << 6, kLn2Stats = 1u << 7, kFch = 1u << 8, kFchGelu = 1u << 9, kAllFields = (1u << 10) - 1,
};

}  // namespace

// What each place holds per layer under each recompute mode: the slot from forward to backward; the
// scratch (one layer, shared); the W inputs (B to W). Selective recomputation drops the attention's
// saved tensor where it is the [T, T] probabilities (ring attention's log-sum-exp stays).
unsigned Gpt::slot_fields() const {
  switch (options_.recompute) {
    case Recompute::None: return kAllFields;
    case Recompute::Selective:
      return kAllFields & ~(attention_->recomputed_when_selective() ? kAtt | kFchGelu : kFchGelu);
    case Recompute::Full: return 0;
  }
  return kAllFields;
}
unsigned Gpt::scratch_fields() const { return kAllFields & ~slot_fields(); }
// W reads every field but qkv and att (B's alone): those of them the slot lacks.
unsigned Gpt::weight_input_fields() const { return scratch_fields() & ~(kQkv | kAtt); }

// One layer's activations of a B x T micro-batch, the `fields` allocated (the others undefined);
// adds their size to `bytes`.
Gpt::LayerActs Gpt::new_layer(unsigned fields, int B, int T, std::int64_t& bytes) {
  const std::int64_t N = static_cast<std::int64_t>(B) * T, C = config_.channels, tp = tp_.size();
  const std::int64_t R = local_rows(B, T);  // the residual stream's rows here: N, or N/tp in sequence parallel
  auto make = [&](unsigned field, Shape shape, DType dtype) {
    if ((fields & field) == 0) return Tensor();
    Tensor t = Tensor::empty(std::move(shape), dtype, ctx_);
    bytes += static_cast<std::int64_t>(t.nbytes());
    return t;
  };
  // Activations are of the compute dtype, statistics fp32; attention's saved state is what its
  // implementation asks for (runtime/attention.h).
  const DType act = compute_dtype(), f32 = DType::F32;
  LayerActs a;
  a.ln1 = make(kLn1, {R, C}, act);
  a.ln1_mean = make(config_.rms_norm() ? 0u : unsigned{kLn1Stats}, {R}, f32);  // RMSNorm keeps no mean
  a.ln1_rstd = make(kLn1Stats, {R}, f32);
  a.qkv = make(kQkv, {B, T, qkv_local_width()}, act);
  a.atty = make(kAtty, {N, C / tp}, act);
  a.att = make(kAtt, attention_->saved_shape(B, T), attention_->saved_dtype(act));
  a.res2 = make(kRes2, {R, C}, act);
  a.ln2 = make(kLn2, {R, C}, act);
  a.ln2_mean = make(config_.rms_norm() ? 0u : unsigned{kLn2Stats}, {R}, f32);
  a.ln2_rstd = make(kLn2Stats, {R}, f32);
  // The MLP's up projection (gpt2: 4C wide; llama: [gate | up], 2F) and its activation (4C; F).
  a.fch = make(kFch, {N, config_.mlp_up_rows() / tp}, act);
  a.fch_gelu = make(kFchGelu, {N, config_.mlp_hidden() / tp}, act);
  return a;
}

Gpt::Scratch& Gpt::scratch(int B, int T) {
  if (scratch_ && scratch_->B == B && scratch_->T == T) return *scratch_;
  scratch_.reset();
  auto w = std::make_unique<Scratch>();
  w->B = B;
  w->T = T;
  const std::int64_t N = static_cast<std::int64_t>(B) * T, C = config_.channels, tp = tp_.size();
  auto make = [&](Shape shape, DType dtype) {
    Tensor t = Tensor::empty(std::move(shape), dtype, ctx_);
    w->bytes += static_cast<std::int64_t>(t.nbytes());
    return t;
  };
  const DType act = compute_dtype();
  w->branch = make({N, C}, act);
  w->dln = make({local_rows(B, T), C}, act);
  w->datty = make({N, C / tp}, act);
  w->dqkv = make({B, T, qkv_local_width()}, act);
  w->dfch = make({N, config_.mlp_up_rows() / tp}, act);
  // The activation's output gradient: an activation as wide as the up projection (GELU) takes it
  // in place of dfch; SwiGLU's is half as wide.
  w->dact = config_.mlp_hidden() == config_.mlp_up_rows() ? w->dfch : make({N, config_.mlp_hidden() / tp}, act);
  if (const Linear* replicated = blocks_.empty() ? nullptr : blocks_[0]->qkv.replicated_part())
    w->replicated_dweight = make(replicated->weight.shape(), DType::F32);
  w->layer = new_layer(scratch_fields(), B, T, w->bytes);
  if (options_.sequence_parallel) {
    const std::int64_t rows = local_rows(B, T);
    w->full = make({N, C}, act);
    w->dfull = make({N, C}, act);
    w->branch_local = make({rows, C}, act);
    w->dln_partial = make({N, C}, act);
    w->ln_dparams = make({config_.has_biases() ? 2 * C : C}, DType::F32);
  }
  if (tp_.active()) {
    w->row_max = make({N}, DType::F32);
    w->sum_exp = make({N}, DType::F32);
    w->target_logit = make({N}, DType::F32);
  }
  if (partition_.head) {
    w->head_logits = make({head_rows_per_chunk(N), partition_.vocab_rows_local(config_)}, act);
    w->mean_sums = make({kernels::mean_workspace(N)}, DType::F32);
  }
  scratch_ = std::move(w);
  return *scratch_;
}

Gpt::Slot& Gpt::acquire(int chunk, int micro, int B, int T) {
  MT_CHECK(chunk >= 0 && chunk < num_chunks(), "chunk ", chunk, " of ", num_chunks());
  MT_CHECK(B >= 1 && T >= 1, "batch must be at least 1 x 1, got ", B, " x ", T);
  MT_CHECK(attention_->sequence_length(T) <= config_.max_seq_len, "sequence length ", attention_->sequence_length(T),
           " exceeds the model's context of ", config_.max_seq_len);
  const auto key = std::make_pair(chunk, micro);
  if (auto it = live_.find(key); it != live_.end()) {
    MT_CHECK(it->second->B == B && it->second->T == T, "micro-batch ", micro, " changed shape while in flight");
    MT_CHECK(it->second->backward != Slot::Backward::WeightsPending, "a forward of chunk ", chunk, " micro-batch ",
             micro, " between its backward_chunk_input and backward_chunk_weights");
    return *it->second;
  }
  std::unique_ptr<Slot> slot;
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if ((*it)->chunk == chunk && (*it)->B == B && (*it)->T == T) {
      slot = std::move(*it);
      pool_.erase(it);
      break;
    }
  }
  if (!slot) {
    // A new shape: what the pool holds for this chunk is of an old one; free it first.
    std::erase_if(pool_, [&](const std::unique_ptr<Slot>& s) { return s->chunk == chunk; });
    slot = std::make_unique<Slot>();
    Slot& a = *slot;
    a.chunk = chunk;
    a.B = B;
    a.T = T;
    const ChunkInfo& info = chunks_[static_cast<std::size_t>(chunk)];
    const std::int64_t N = static_cast<std::int64_t>(B) * T, C = config_.channels;
    const std::int64_t R = local_rows(B, T);  // the residual stream's rows here: N, or N/tp in sequence parallel
    auto make = [&](Shape shape, DType dtype) {
      Tensor t = Tensor::empty(std::move(shape), dtype, ctx_);
      a.bytes += static_cast<std::int64_t>(t.nbytes());
      return t;
    };
    // Activations and their gradients are of the compute dtype; statistics are fp32 whatever it is.
    auto act = [&](Shape shape) { return make(std::move(shape), compute_dtype()); };
    auto f32 = [&](Shape shape) { return make(std::move(shape), DType::F32); };
    for (int l = 0; l <= info.layers.size(); ++l) a.residual.push_back(act({R, C}));
    for (int l = 0; l < info.layers.size(); ++l)
      a.blocks.push_back(new_layer(slot_fields(), B, T, a.bytes));
    if (info.head) {
      if (!config_.rms_norm()) a.lnf_mean = f32({R});  // RMSNorm keeps no mean
      a.lnf_rstd = f32({R});
      a.losses = f32({N});
      a.lse = f32({N});
      a.dlnf = act({N, C});  // every row: this rank's part of the sum over the vocabulary slices
    }
    a.dres = act({R, C});
  }
  slot->head_gradient = false;
  slot->backward = Slot::Backward::NotRun;
  Slot& s = *slot;
  live_[key] = std::move(slot);
  return s;
}

Gpt::Slot& Gpt::live(int chunk, int micro) const {
  auto it = live_.find({chunk, micro});
  MT_CHECK(it != live_.end(), "no forward of chunk ", chunk, " micro-batch ", micro, " in flight");
  return *it->second;
}

void Gpt::release(int chunk, int micro) {
  auto it = live_.find({chunk, micro});
  if (it == live_.end()) return;
  MT_CHECK(it->second->backward != Slot::Backward::WeightsPending, "release of chunk ", chunk, " micro-batch ", micro,
           " between its backward_chunk_input and backward_chunk_weights would lose its weight gradients");
  give_back_weight_inputs(*it->second);
  pool_.push_back(std::move(it->second));
  live_.erase(it);
}

// Where layer i of slot s has its activations: the slot's, and what recompute does not keep there
// in the scratch's shared layer, or (kept) in `kept` for a split backward's W.
Gpt::LayerActs Gpt::layer_buffers(Slot& s, Scratch& w, int i, const WeightInputs* kept) const {
  const LayerActs& in_slot = s.blocks[static_cast<std::size_t>(i)];
  const LayerActs* for_w = kept ? &kept->blocks[static_cast<std::size_t>(i)] : nullptr;
  switch (options_.recompute) {
    case Recompute::None:
      return in_slot;
    case Recompute::Selective: {
      LayerActs a = in_slot;
      if (attention_->recomputed_when_selective()) a.att = w.layer.att;
      a.fch_gelu = for_w ? for_w->fch_gelu : w.layer.fch_gelu;
      return a;
    }
    case Recompute::Full: {
      LayerActs a = for_w ? *for_w : w.layer;
      a.qkv = w.layer.qkv;  // B's alone: never kept for W
      a.att = w.layer.att;
      return a;
    }
  }
  return in_slot;
}

Tensor Gpt::input_buffer(int chunk, int micro, int B, int T) {
  MT_CHECK(!chunk_has_embedding(chunk), "chunk ", chunk, " embeds its own input");
  return acquire(chunk, micro, B, T).residual[0];
}

std::vector<Gpt::LayerGrads> Gpt::new_layer_grads(int layers, int B, int T, std::int64_t& bytes) {
  const std::int64_t N = static_cast<std::int64_t>(B) * T, C = config_.channels;
  auto act = [&](Shape shape) {
    Tensor t = Tensor::empty(std::move(shape), compute_dtype(), ctx_);
    bytes += static_cast<std::int64_t>(t.nbytes());
    return t;
  };
  const std::int64_t R = local_rows(B, T);
  std::vector<LayerGrads> grads;
  for (int l = 0; l < layers; ++l) {
    grads.push_back({act({N, C}), act({N, C}), act({R, C}), act({R, C}), act({B, T, qkv_local_width()}), {}, {}});
    if (options_.sequence_parallel) {
      grads.back().ln2_full = act({N, C});
      grads.back().ln1_full = act({N, C});
    }
  }
  return grads;
}

// With recompute, B recomputes what W reads into a set it holds until W: only slots between B and
// W hold one, so a schedule holds as many as it defers W's (peak_deferred_weight), not one per slot.
void Gpt::take_weight_inputs(Slot& s) {
  if (options_.recompute == Recompute::None || s.recomputed) return;
  for (auto it = weight_input_pool_.begin(); it != weight_input_pool_.end(); ++it) {
    if ((*it)->chunk == s.chunk && (*it)->B == s.B && (*it)->T == s.T) {
      s.recomputed = std::move(*it);
      weight_input_pool_.erase(it);
      return;
    }
  }
  std::erase_if(weight_input_pool_, [&](const auto& k) { return k->chunk == s.chunk; });  // of an old shape
  auto kept = std::make_unique<WeightInputs>();
  kept->chunk = s.chunk;
  kept->B = s.B;
  kept->T = s.T;
  const int layers = chunks_[static_cast<std::size_t>(s.chunk)].layers.size();
  for (int l = 0; l < layers; ++l)
    kept->blocks.push_back(new_layer(weight_input_fields(), s.B, s.T, kept->bytes));
  kept->grads = new_layer_grads(layers, s.B, s.T, kept->bytes);
  s.recomputed = std::move(kept);
}

void Gpt::give_back_weight_inputs(Slot& s) {
  if (s.recomputed) weight_input_pool_.push_back(std::move(s.recomputed));
}

std::int64_t Gpt::activation_bytes() const {
  std::int64_t bytes = (scratch_ ? scratch_->bytes : 0) + attention_->workspace_bytes();
  for (const auto& [key, slot] : live_) bytes += slot->bytes + (slot->recomputed ? slot->recomputed->bytes : 0);
  return bytes;
}

}  // namespace mt
