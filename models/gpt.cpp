#include "models/gpt.h"

#include <string_view>

#include "models/blocks/block.h"
#include "models/gpt_state.h"
#include "models/init.h"
#include "runtime/attention.h"
#include "runtime/kernels.h"
#include "runtime/nn_kernels.h"

namespace mt {

Gpt::Gpt(DeviceContext& ctx, const GptConfig& config, DType compute, GptPartition partition, TensorParallel tp,
         std::int64_t pad_multiple, GptOptions options)
    : ctx_(ctx),
      config_((config.validate(), config)),
      partition_([&] {
        if (partition.chunks.empty()) partition.chunks = GptPartition::whole(config).chunks;  // every layer
        return std::move(partition);
      }()),
      tp_(tp),
      options_(options),
      region_(tp_, options_.sequence_parallel),
      shards_(gpt_param_shards(config_, partition_, options.vocab_pieces)),
      store_(ctx, [&] {
        std::vector<ParamSpec> local;
        for (const ParamShard& s : shards_) local.push_back(s.local);
        return local;
      }(), compute, pad_multiple, options_.store_blocks, options_.flat_regions),
      units_(options_.param_units.empty() ? gpt_param_units(store_.specs()) : options_.param_units) {
  MT_CHECK(tp_.size() == partition_.tp_size && tp_.rank() == partition_.tp_rank, "the tensor-parallel group (rank ",
           tp_.rank(), " of ", tp_.size(), ") does not match the partition (", partition_.tp_rank, " of ",
           partition_.tp_size, ")");
  for (std::size_t i = 0; i < store_.size(); ++i) {
    const ParamKind kind = store_.spec(i).kind;
    if (kind == ParamKind::TokenEmbedding && wte_ < 0) wte_ = static_cast<std::int64_t>(i);
    if (kind == ParamKind::PositionEmbedding) wpe_ = static_cast<std::int64_t>(i);
    if (kind == ParamKind::LnfWeight) lnf_first_ = static_cast<std::int64_t>(i);
    if (kind == ParamKind::LmHead && lm_head_ < 0) lm_head_ = static_cast<std::int64_t>(i);
  }
  MT_CHECK(!options_.sequence_parallel || tp_.size() > 1, "sequence parallelism needs a tensor-parallel group of 2 "
           "or more ranks, got ", tp_.size());
  const auto unit_named = [&](const std::string& name) {
    for (std::size_t u = 0; u < units_.size(); ++u)
      if (units_[u].name == name) return static_cast<int>(u);
    MT_FAIL("no parameter unit named '", name, "'");
  };
  // The embeddings come first in the store (wte's pieces, then wpe where held).
  const auto piece_units = [&](const std::string& name) {
    std::vector<int> units;
    if (options_.vocab_pieces == 1) return std::vector<int>{unit_named(name)};
    for (int k = 0; k < options_.vocab_pieces; ++k) units.push_back(unit_named(name + "." + std::to_string(k)));
    return units;
  };
  if (wte_ >= 0) {
    wte_units_ = piece_units("embedding");
    embedding_unit_ = wte_units_.back();
    MT_CHECK(wte_ == 0 && (wpe_ < 0 || wpe_ == options_.vocab_pieces), "the embeddings are not first in the store");
  }
  const int tp_size = tp_.size(), kv_heads = config_.kv_head_count();
  const bool split_kv = partition_.splits_kv_heads(config_);
  attention_heads_ = {.q_heads = config_.heads / tp_size,
                      .kv_heads = split_kv ? kv_heads / tp_size : kv_heads,
                      .q_begin = config_.heads / tp_size * tp_.rank(),
                      .group = config_.heads / kv_heads,
                      .kv_begin = split_kv ? kv_heads / tp_size * tp_.rank() : 0};
  attention_ = std::make_unique<LayerAttention>(ctx, attention_heads_, config_.head_size(), options_.context_parallel);
  for (std::size_t c = 0; c < partition_.chunks.size(); ++c) {
    const LayerRange r = partition_.chunks[c];
    chunks_.push_back({r, static_cast<int>(blocks_.size()), partition_.embedding && c == 0,
                       partition_.head && c + 1 == partition_.chunks.size()});
    for (int l = r.begin; l < r.end; ++l) {
      std::unique_ptr<Block> blk = make_block(config_, store_, l, region_, attention_heads_, !split_kv);
      blk->attn_unit = unit_named("h." + std::to_string(l) + ".attn");
      blk->mlp_unit = unit_named("h." + std::to_string(l) + ".mlp");
      const ParamUnit& attn = units_[static_cast<std::size_t>(blk->attn_unit)];
      const ParamUnit& mlp = units_[static_cast<std::size_t>(blk->mlp_unit)];
      MT_CHECK(attn.first == blk->first_param && mlp.first == store_.index_of("h." + std::to_string(l) + ".ln2.weight") &&
                   attn.count + mlp.count == blk->params && attn.first + attn.count == mlp.first,
               "layer ", l, "'s parameters are not two runs, from its ln1.weight and from its ln2.weight");
      blocks_.push_back(std::move(blk));
    }
  }
  if (lnf_first_ >= 0) {
    lnf_ = Norm::from_store(store_, "lnf", config_.rms_norm(), config_.norm_eps);
    lnf_unit_ = unit_named("lnf");
  }
  // The LM head's weight: the tied embedding (gpt2), or lm_head (llama), its own unit.
  head_weight_ = config_.tied_head() ? wte_ : lm_head_;
  if (head_weight_ >= 0 && partition_.head) {
    head_units_ = config_.tied_head() ? wte_units_ : piece_units("head");
    for (int k = 0; k < options_.vocab_pieces; ++k) {
      const auto i = static_cast<std::size_t>(head_weight_ + k);
      Linear piece;
      piece.weight = store_.param(i), piece.dweight = store_.grad(i), piece.compute_weight = store_.compute_param(i);
      head_pieces_.push_back(std::move(piece));
    }
  }
}

std::int64_t Gpt::qkv_local_width() const {
  return static_cast<std::int64_t>(attention_heads_.q_heads + 2 * attention_heads_.kv_heads) * config_.head_size();
}

Gpt::~Gpt() = default;

void Gpt::init(std::uint64_t seed) { init_gpt_parameters(ctx_, store_, shards_, config_, seed); }

void Gpt::init_unit(std::uint64_t seed, int unit) {
  const ParamUnit& u = units_.at(static_cast<std::size_t>(unit));
  init_gpt_parameters(ctx_, store_, shards_, config_, seed, u.first, u.count);
}

bool Gpt::chunk_has_embedding(int chunk) const { return chunks_.at(static_cast<std::size_t>(chunk)).embedding; }
bool Gpt::chunk_has_head(int chunk) const { return chunks_.at(static_cast<std::size_t>(chunk)).head; }

void Gpt::check_tokens(std::span<const std::int32_t> ids, const char* what) const {
  // Checked here on the host: the CUDA kernels do not check their ids.
  for (std::int32_t id : ids)
    MT_CHECK(id >= 0 && id < config_.vocab_size, what, " token ", id, " is outside the vocabulary [0, ",
             config_.vocab_size, ")");
}

std::int64_t Gpt::local_rows(int B, int T) const {
  const std::int64_t N = static_cast<std::int64_t>(B) * T;
  if (!options_.sequence_parallel) return N;
  MT_CHECK(N % tp_.size() == 0, "sequence parallelism splits the ", B, " x ", T, " = ", N,
           " positions of a micro-batch over ", tp_.size(), " tensor-parallel ranks: they must divide evenly");
  return N / tp_.size();
}

void Gpt::layernorm_backward(Norm& ln, const Tensor& dout, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, Tensor& dx, Scratch& w) {
  if (!options_.sequence_parallel) {
    ln.backward(ctx_, dout, x, mean, rstd, dx);
    return;
  }
  ln.backward_input(ctx_, dout, x, mean, rstd, dx);
  layernorm_backward_params(ln, dout, x, mean, rstd, w);
}

void Gpt::layernorm_backward_params(Norm& ln, const Tensor& dout, const Tensor& x, const Tensor& mean,
                                    const Tensor& rstd, Scratch& w) {
  if (!options_.sequence_parallel) {
    ln.backward_params(ctx_, dout, x, mean, rstd);
    return;
  }
  const std::int64_t C = config_.channels;
  Norm partial = ln;  // the same parameters, its gradients into the scratch
  partial.dweight = w.ln_dparams.flat_slice(0, C);
  if (ln.dbias.defined()) partial.dbias = w.ln_dparams.flat_slice(C, C);
  kernels::fill(ctx_, w.ln_dparams, 0.0);
  partial.backward_params(ctx_, dout, x, mean, rstd);
  tp_.allreduce(w.ln_dparams, ReduceOp::Sum);
  kernels::binary(ctx_, BinaryOp::Add, ln.dweight, partial.dweight, ln.dweight);
  if (ln.dbias.defined()) kernels::binary(ctx_, BinaryOp::Add, ln.dbias, partial.dbias, ln.dbias);
}

void Gpt::ready(std::size_t first, std::size_t count) {
  if (grad_ready_ == nullptr || !*grad_ready_) return;
  for (std::size_t i = first; i < first + count; ++i) (*grad_ready_)(i);
}

Tensor Gpt::upload_tokens(std::span<const std::int32_t> ids, int B, int T, const char* what) {
  MT_CHECK(static_cast<std::int64_t>(ids.size()) == static_cast<std::int64_t>(B) * T, "forward: ", ids.size(), " ",
           std::string_view(what) == "input" ? "input tokens" : "targets", " for a batch of ", B, " x ", T);
  check_tokens(ids, what);
  return Tensor::from_host(ids, {static_cast<std::int64_t>(ids.size())}, ctx_);
}

void Gpt::expect_tokens(const Tensor& ids, const Slot& s, const char* what) const {
  MT_CHECK(ids.defined() && ids.dtype() == DType::I32 && ids.numel() == static_cast<std::int64_t>(s.B) * s.T &&
               ids.device() == ctx_.device(),
           "forward: ", what, " tokens ", ids.defined() ? ids.describe() : std::string("missing"), " for a batch of ",
           s.B, " x ", s.T, " (int32 on ", ctx_.device().str(), ")");
}

void Gpt::embed(Slot& s, const Tensor& tokens) {
  expect_tokens(tokens, s, "input");
  s.tokens = tokens.reshape({s.B, s.T});
  // llama has no position embedding (RoPE rotates q and k instead): the lookup alone.
  const Tensor* wpe = wpe_ >= 0 ? &store_.param(static_cast<std::size_t>(wpe_)) : nullptr;
  const Tensor& positions = attention_->positions(s.T);
  if (!tp_.active()) {
    lookup(s.tokens, wpe, s.residual[0], positions);
    return;
  }
  // Each rank looks up the tokens of its vocabulary slice (zero elsewhere), rank 0 adds the
  // positions; the sum over the group has exactly one non-zero token row per position.
  // Like a row-parallel layer's output, the sum leaves the region (with sequence parallelism every
  // position's partial sum, then this rank's rows of the sum).
  const Tensor* wpe_here = tp_.rank() == 0 ? wpe : nullptr;
  Tensor& partial = region_.partials(s.residual[0], scratch(s.B, s.T).full);
  lookup(s.tokens, wpe_here, partial, positions);
  region_.leave(ctx_, partial, s.residual[0]);
}

// First row of vocabulary piece k of this rank's slice, in the whole vocabulary.
std::int64_t Gpt::vocab_piece_begin(int k) const {
  return partition_.vocab_begin(config_) + k * store_.param(static_cast<std::size_t>(wte_)).dim(0);
}

// This rank's lookup of its vocabulary slice (wpe added where given). The embedding kernel reads
// the fp32 tables and rounds their sum once into the activation dtype. In vocabulary pieces, one
// piece (a unit) at a time, the last (with wpe) first: each piece adds its tokens' rows in fp32,
// and the sum is rounded once into out's dtype. Every element is e + p plus exact zeros, so it has
// the bits of the single lookup (see embedding_forward_slice).
void Gpt::lookup(const Tensor& tokens, const Tensor* wpe, Tensor& out, const Tensor& positions) {
  const int pieces = options_.vocab_pieces;
  if (pieces == 1) {
    const UnitUse use(hooks_, embedding_unit_, ParamUse::Forward);
    const Tensor& wte = store_.param(static_cast<std::size_t>(wte_));
    if (!tp_.active() && wpe) {
      nn::embedding_forward(ctx_, tokens, wte, *wpe, out, positions);
    } else {
      nn::embedding_forward_slice(ctx_, tokens, wte, vocab_piece_begin(0), wpe, out, positions);
    }
    return;
  }
  Tensor sum = out.dtype() == DType::F32 ? out : Tensor::empty(out.shape(), DType::F32, ctx_);
  Tensor part = Tensor::empty(out.shape(), DType::F32, ctx_);
  for (int k = pieces - 1; k >= 0; --k) {
    const UnitUse use(hooks_, wte_units_[static_cast<std::size_t>(k)], ParamUse::Forward);
    const Tensor& piece = store_.param(static_cast<std::size_t>(wte_ + k));
    const bool last = k == pieces - 1;
    nn::embedding_forward_slice(ctx_, tokens, piece, vocab_piece_begin(k), last ? wpe : nullptr, last ? sum : part,
                                positions);
    if (!last) kernels::binary(ctx_, BinaryOp::Add, sum, part, sum);
  }
  if (out.dtype() != DType::F32) kernels::cast(ctx_, sum, out);
}

// The chunk's layers, each layer's output add left to the next layer's ln1: the chunk's output
// comes back pending, for lnf (the head chunk) or settle() (a stage's output, sent whole).
Gpt::Residual Gpt::run_blocks_forward(const ChunkInfo& c, Slot& s, Scratch& w) {
  Residual r{s.residual[0], {}, {}};
  for (int i = 0; i < c.layers.size(); ++i) {
    Block& blk = *blocks_[static_cast<std::size_t>(c.first_block + i)];
    LayerActs a = layer_buffers(s, w, i, nullptr);
    r = layer_forward(blk, r, a, w, &s.residual[static_cast<std::size_t>(i) + 1]);
  }
  return r;
}

// norm(r) into out; a pending add is made in the norm's pass (the bits of the add, then the norm).
void Gpt::norm_forward(const Norm& norm, const Residual& r, Tensor& out, Tensor& mean, Tensor& rstd) {
  if (!r.pending()) {
    norm.forward(ctx_, r.stream, out, mean, rstd);
    return;
  }
  Tensor stream = r.stream;
  norm.add_forward(ctx_, r.res, r.branch, stream, out, mean, rstd);
}

// A pending add on its own, where no norm follows on this chunk.
void Gpt::settle(const Residual& r) {
  if (!r.pending()) return;
  Tensor stream = r.stream;
  kernels::binary(ctx_, BinaryOp::Add, r.res, r.branch, stream);
}

// One layer's forward from its input `in` into a, each half within a forward use of its unit;
// returns its output, *out = res2 + the MLP's output, pending (the MLP's output stays in the
// scratch's branch until the next norm adds it). `out` null stops it where backward no longer
// reads anything (after GELU): the recomputation, which runs these very kernels on the very same
// inputs (its input whole: the stored sum has the bits the fused add normalized), with the same
// tensor-parallel collectives up to there on every rank of the group, within the backward's uses of
// both units (no uses of its own).
Gpt::Residual Gpt::layer_forward(Block& blk, const Residual& in, LayerActs& a, Scratch& w, Tensor* out) {
  ParamUseHooks* hooks = out ? hooks_ : nullptr;
  const Tensor& x = in.stream;  // written by ln1 if the previous layer's add is pending
  const Tensor* attn_out = nullptr;
  {
    const UnitUse use(hooks, blk.attn_unit, ParamUse::Forward);
    norm_forward(blk.ln1, in, a.ln1, a.ln1_mean, a.ln1_rstd);
    blk.qkv_forward(ctx_, a.ln1, w.full, a.qkv, attention_->positions(a.qkv.dim(1)));  // column-parallel: this rank's heads
    attention_->forward(a.qkv, a.atty, a.att);
    // Row-parallel: the sum of the ranks' partial outputs (this rank's rows with sequence parallelism).
    attn_out = &blk.attn_proj.forward(ctx_, a.atty, w.branch, w.branch_local);
  }
  const UnitUse use(hooks, blk.mlp_unit, ParamUse::Forward);
  // res2 = x + attention output and ln2(res2) in one pass, in the MLP's use: the add reads no parameter.
  blk.ln2.add_forward(ctx_, x, *attn_out, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd);
  blk.mlp_up_forward(ctx_, a.ln2, w.full, a.fch, a.fch_gelu);
  if (out == nullptr) return {};
  return {*out, a.res2, blk.fc_proj.forward(ctx_, a.fch_gelu, w.branch, w.branch_local)};
}

// Before layer i's backward: what forward did not keep, computed again into a (layer_buffers').
// Runs inside the layer's backward use of its parameters.
void Gpt::recompute_layer(Block& blk, Slot& s, Scratch& w, int i, LayerActs& a) {
  switch (options_.recompute) {
    case Recompute::None:
      return;
    case Recompute::Selective:
      // The probabilities from the kept qkv; the attention output they give again goes to datty,
      // which the attention's backward overwrites before it reads it.
      if (attention_->recomputed_when_selective()) attention_->forward(a.qkv, w.datty, a.att);
      blk.mlp_activation(ctx_, a.fch, a.fch_gelu);
      return;
    case Recompute::Full:
      layer_forward(blk, {s.residual[static_cast<std::size_t>(i)], {}, {}}, a, w, nullptr);
      return;
  }
}

void Gpt::attention_backward(const Block& blk, const Tensor& datty, const LayerActs& a, Tensor& dqkv) {
  attention_->backward(datty, a.qkv, a.atty, a.att, dqkv);
  blk.qkv_output_backward(ctx_, dqkv, attention_->positions(a.qkv.dim(1)));
}

float Gpt::forward_chunk(int chunk, int micro, int B, int T, std::span<const std::int32_t> inputs,
                         std::span<const std::int32_t> targets, std::optional<float> loss_weight) {
  const bool head = chunk_has_head(chunk);
  DeviceTokens tokens;
  if (chunk_has_embedding(chunk)) tokens.inputs = upload_tokens(inputs, B, T, "input");
  if (head) tokens.targets = upload_tokens(targets, B, T, "target");
  if (!host_loss_.defined()) host_loss_ = Tensor::empty({1}, DType::F32, ctx_);
  kernels::fill(ctx_, host_loss_, 0.0);
  forward_chunk(chunk, micro, B, T, tokens, loss_weight, host_loss_);
  return head ? host_loss_.to_host<float>()[0] : 0.0f;
}

void Gpt::forward_chunk(int chunk, int micro, int B, int T, const DeviceTokens& tokens,
                        std::optional<float> loss_weight, Tensor& loss_sum) {
  Slot& s = acquire(chunk, micro, B, T);
  // Its head gradient is in the parameters' already: a second one would add it twice.
  MT_CHECK(!s.head_gradient, "a second forward of chunk ", chunk, " micro-batch ", micro, " before its backward");
  s.backward = Slot::Backward::NotRun;
  const ChunkInfo& c = chunks_[static_cast<std::size_t>(chunk)];
  Scratch& w = scratch(B, T);
  // The bf16 copy of the master weights (nothing to do in fp32), once per chunk and step: the master
  // changes only between steps, and a chunk's micro-batches run in order, 0 first.
  if (micro == 0 && !compute_copy_kept_) store_.refresh_compute_params(ctx_);
  if (c.embedding) embed(s, tokens.inputs);
  const Residual out = run_blocks_forward(c, s, w);
  if (c.head) {
    head_loss(s, out, tokens.targets, loss_weight, loss_sum);
  } else {
    settle(out);  // output() goes to the next stage whole
  }
}

Tensor Gpt::output(int chunk, int micro) const {
  MT_CHECK(!chunk_has_head(chunk), "chunk ", chunk, " ends in the loss");
  return live(chunk, micro).residual.back();
}

Tensor Gpt::output_grad_buffer(int chunk, int micro) const {
  MT_CHECK(!chunk_has_head(chunk), "chunk ", chunk, " starts its backward from the loss");
  return live(chunk, micro).dres;
}

Tensor Gpt::input_grad(int chunk, int micro) const {
  MT_CHECK(!chunk_has_embedding(chunk), "chunk ", chunk, " has no input gradient to send");
  return live(chunk, micro).dres;
}

void Gpt::run_blocks_backward(const ChunkInfo& c, Slot& s, Scratch& w) {
  for (int i = c.layers.size() - 1; i >= 0; --i) {
    Block& blk = *blocks_[static_cast<std::size_t>(c.first_block + i)];
    LayerActs a = layer_buffers(s, w, i, nullptr);
    // The MLP's unit, then the attention's; a full recomputation runs the attention again first.
    std::optional<UnitUse> attn_use;
    if (options_.recompute == Recompute::Full) attn_use.emplace(hooks_, blk.attn_unit, ParamUse::Backward);
    {
      const UnitUse mlp_use(hooks_, blk.mlp_unit, ParamUse::Backward);
      recompute_layer(blk, s, w, i, a);
      // MLP branch: out = res2 + proj(act(fc(ln2(res2)))). dres flows through unchanged and
      // collects the branch's contribution.
      // With sequence parallelism the GEMMs' inputs are gathered again (forward kept this rank's rows).
      const Tensor& dmlp_out = blk.fc_proj.output_grad(ctx_, s.dres, w.dfull);
      blk.fc_proj.backward_weights(ctx_, dmlp_out, a.fch_gelu);  // then the input: Linear::backward's order
      blk.mlp_down_backward_input(ctx_, dmlp_out, a.fch, w.dact, w.dfch);
      blk.fc.backward(ctx_, w.dfch, a.ln2, w.full, w.dln, w.dln_partial);
      layernorm_backward(blk.ln2, w.dln, a.res2, a.ln2_mean, a.ln2_rstd, s.dres, w);
    }
    // Attention branch: res2 = x + proj(attention(qkv(ln1(x)))).
    if (!attn_use) attn_use.emplace(hooks_, blk.attn_unit, ParamUse::Backward);
    blk.attn_proj.backward(ctx_, blk.attn_proj.output_grad(ctx_, s.dres, w.dfull), a.atty, w.datty);
    attention_backward(blk, w.datty, a, w.dqkv);
    blk.qkv.backward(ctx_, w.dqkv, a.ln1, w.full, w.dln, w.dln_partial, &w.replicated_dweight);
    layernorm_backward(blk.ln1, w.dln, s.residual[static_cast<std::size_t>(i)], a.ln1_mean, a.ln1_rstd, s.dres, w);
    ready(blk.first_param, blk.params);
  }
}

void Gpt::backward_chunk(int chunk, int micro, const GradReady& on_ready) {
  const ReadyScope scope(grad_ready_, on_ready);
  Slot& s = live(chunk, micro);
  MT_CHECK(s.backward != Slot::Backward::WeightsPending, "backward_chunk of chunk ", chunk, " micro-batch ", micro,
           " after its backward_chunk_input: its backward_chunk_weights is pending");
  const ChunkInfo& c = chunks_[static_cast<std::size_t>(chunk)];
  Scratch& w = scratch(s.B, s.T);
  if (c.head) head_backward(s, w);  // otherwise dres holds what the next stage sent
  run_blocks_backward(c, s, w);
  s.backward = Slot::Backward::Done;
  if (c.embedding) embedding_backward(s);
}

// The embedding's gradients from the chunk's input gradient, and the grad-ready calls that end a
// backward (fused or W).
void Gpt::embedding_backward(Slot& s, bool gathered_by_b) {
  Tensor* dwpe = wpe_ >= 0 ? &store_.grad(static_cast<std::size_t>(wpe_)) : nullptr;
  // With sequence parallelism each rank holds its rows of the gradient: gather every position's
  // (the adjoint of the forward's reduce-scatter), so wpe's gradient stays the same on every rank.
  // (A split backward's B gathered it already.)
  const Tensor& dout = !tp_.active() ? s.dres
                       : options_.sequence_parallel && gathered_by_b ? s.demb
                                                                     : region_.leave_backward(ctx_, s.dres, scratch(s.B, s.T).dfull);
  const Tensor& positions = attention_->positions(s.T);
  if (options_.vocab_pieces > 1) {
    // Piece by piece in the forward's order, dwpe with the last: each row of a piece has the bits of
    // the whole table's (embedding_backward_slice).
    for (int k = options_.vocab_pieces - 1; k >= 0; --k) {
      const UnitUse use(hooks_, wte_units_[static_cast<std::size_t>(k)], ParamUse::BackwardWeights);
      nn::embedding_backward_slice(ctx_, s.tokens, dout, vocab_piece_begin(k), store_.grad(static_cast<std::size_t>(wte_ + k)),
                                   k == options_.vocab_pieces - 1 ? dwpe : nullptr, positions);
    }
  } else {
    const UnitUse use(hooks_, embedding_unit_, ParamUse::BackwardWeights);
    Tensor& dwte = store_.grad(static_cast<std::size_t>(wte_));
    if (!tp_.active() && dwpe) {
      nn::embedding_backward(ctx_, s.tokens, dout, dwte, *dwpe, positions);
    } else {
      nn::embedding_backward_slice(ctx_, s.tokens, dout, vocab_piece_begin(0), dwte, dwpe, positions);
    }
  }
  if (wpe_ >= 0) ready(static_cast<std::size_t>(wpe_), 1);
  // The tied embedding is complete here only if the head's contribution came from this rank too.
  if (!config_.tied_head() || partition_.head) ready(static_cast<std::size_t>(wte_), static_cast<std::size_t>(options_.vocab_pieces));
}

namespace {
// A whole-model forward (`what`: the call) into the one slot (0, 0), afresh: a failed one leaves
// nothing for backward.
template <class Run>
auto whole_model_forward(Gpt& model, const char* what, Run&& run) -> decltype(run()) {
  MT_CHECK(model.num_chunks() == 1 && model.chunk_has_embedding(0) && model.chunk_has_head(0), what,
           " runs a whole model; a pipeline stage runs forward_chunk()");
  model.release(0, 0);
  try {
    return run();
  } catch (...) {
    model.release(0, 0);
    throw;
  }
}
}  // namespace

float Gpt::forward(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int B, int T,
                   std::optional<float> loss_weight) {
  return whole_model_forward(*this, "forward()", [&] { return forward_chunk(0, 0, B, T, inputs, targets, loss_weight); });
}

void Gpt::forward(const DeviceTokens& tokens, int B, int T, std::optional<float> loss_weight, Tensor& loss_sum) {
  whole_model_forward(*this, "forward()", [&] { forward_chunk(0, 0, B, T, tokens, loss_weight, loss_sum); });
}

void Gpt::forward_logits(std::span<const std::int32_t> inputs, int B, int T) {
  whole_model_forward(*this, "forward_logits()", [&] {
    Slot& s = acquire(0, 0, B, T);
    store_.refresh_compute_params(ctx_);
    embed(s, upload_tokens(inputs, B, T, "input"));
    Scratch& w = scratch(B, T);
    const Tensor& lnf = head_input(run_blocks_forward(chunks_[0], s, w), s, w);
    if (!s.logits.defined()) {
      s.logits = Tensor::empty({static_cast<std::int64_t>(B) * T, partition_.vocab_rows_local(config_)}, compute_dtype(), ctx_);
      s.bytes += static_cast<std::int64_t>(s.logits.nbytes());
    }
    head_logits(lnf, s.logits, true);
  });
}

void Gpt::backward(const GradReady& ready) {
  MT_CHECK(live_.count({0, 0}) == 1 && live(0, 0).head_gradient,
           "backward() needs a forward() with targets and a loss weight first (a training forward)");
  backward_chunk(0, 0, ready);
}

const Tensor& Gpt::logits() const {
  MT_CHECK(live_.count({0, 0}) == 1 && live(0, 0).logits.defined(),
           "no logits: forward_logits() makes them (a forward with targets keeps none)");
  return live(0, 0).logits;
}

const Tensor& Gpt::losses() const {
  MT_CHECK(live_.count({0, 0}) == 1, "no forward pass yet");
  return live(0, 0).losses;
}

}  // namespace mt
