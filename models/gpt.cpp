#include "models/gpt.h"

#include <exception>
#include <string_view>

#include "models/blocks/block.h"
#include "models/head_chunks.h"
#include "models/init.h"
#include "runtime/attention.h"
#include "runtime/gemm.h"
#include "runtime/kernels.h"
#include "runtime/nn_kernels.h"

namespace mt {
namespace {

// Points the model's grad-ready callback at a backward call's for the call's duration.
class ReadyScope {
 public:
  ReadyScope(const Gpt::GradReady*& slot, const Gpt::GradReady& on_ready) : slot_(slot) { slot_ = &on_ready; }
  ~ReadyScope() { slot_ = nullptr; }
  ReadyScope(const ReadyScope&) = delete;
  ReadyScope& operator=(const ReadyScope&) = delete;

 private:
  const Gpt::GradReady*& slot_;
};

}  // namespace

// Tells the hooks (if any) that a unit's use begins, and on scope exit that it ended; not when
// the scope is left by an exception (the step failed; what the hooks started is abandoned).
class Gpt::UnitUse {
 public:
  UnitUse(ParamUseHooks* hooks, int unit, ParamUse use)
      : hooks_(unit >= 0 ? hooks : nullptr), unit_(unit), use_(use), exceptions_(std::uncaught_exceptions()) {
    if (hooks_) hooks_->begin(unit_, use_);
  }
  ~UnitUse() noexcept(false) {
    if (hooks_ && std::uncaught_exceptions() == exceptions_) hooks_->end(unit_, use_);
  }
  UnitUse(const UnitUse&) = delete;
  UnitUse& operator=(const UnitUse&) = delete;

 private:
  ParamUseHooks* hooks_;
  int unit_;
  ParamUse use_;
  int exceptions_;
};

// One layer's activations, as forward writes them and backward reads them.
struct Gpt::LayerActs {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
};

// The residual stream between two layers of a chunk: `stream` holds it, or (pending) is to hold
// res + branch, a layer's output add (res2 + its MLP output), which the next norm makes in its own
// pass (Norm::add_forward: one launch, one read of the rows, and the bits of the add, then the
// norm). The sum is stored all the same: the next layer's residual, and what backward and
// recomputation read.
struct Gpt::Residual {
  Tensor stream, res, branch;  // res and branch defined: pending
  bool pending() const { return branch.defined(); }
};

// What W reads of one layer, kept by B (see backward_chunk_input).
// With sequence parallelism dmlp_out and dattn_out are gathered ([N, C]), dln2 and dln1 this rank's
// rows ([N/tp, C]), and ln2_full and ln1_full the gathered layernorm outputs the column-parallel
// weight gradients read (undefined without it).
struct Gpt::LayerGrads {
  Tensor dmlp_out, dattn_out, dln2, dln1, dqkv, ln2_full, ln1_full;
};

// What forward keeps for backward, for one chunk and one micro-batch. residual[i] is the input of
// the chunk's block i (residual[0] the chunk's input), residual.back() its output.
struct Gpt::Slot {
  int chunk = -1, B = 0, T = 0;
  Tensor tokens, targets;
  std::vector<Tensor> residual;
  std::vector<LayerActs> blocks;  // what recompute drops stays undefined
  // The head chunk only: lnf's statistics, the per-row losses and log-sum-exps; dlnf, the gradient
  // at lnf's output a training forward leaves ([N, C], this rank's part: dlogits wte over its
  // vocabulary slice), summed over tp by the backward (in place; with sequence parallelism
  // reduce-scattered into the scratch, or by a split backward's B into dlnf_local for W).
  Tensor lnf_mean, lnf_rstd, losses, lse, dlnf;
  Tensor logits;  // [N, Vp/tp]: forward_logits (sampling) only, allocated by its first call
  // The gradient flowing through the chunk: received from the next stage (or started by the head),
  // and after backward the gradient of the chunk's input, to send back.
  Tensor dres;
  bool head_gradient = false;  // dlnf holds a training forward's gradient no backward has used yet
  // Where the backward stands: not run; B done and W pending (split); done (fused, or B and W).
  enum class Backward { NotRun, WeightsPending, Done };
  Backward backward = Backward::NotRun;
  // What W reads, kept by B because the scratch and dres move on (see backward_chunk_input):
  // per block the residual gradient at the MLP's and the attention's output, the layernorms'
  // upstream gradients, dqkv. Allocated at the slot's first B and kept in the pool with it.
  std::vector<LayerGrads> grads;  // empty with recompute: WeightInputs holds them
  Tensor dlnf_local;  // the head chunk with sequence parallelism only: B's dlnf, this rank's rows
  Tensor demb;  // the embedding chunk with sequence parallelism only: dres gathered ([B*T, C])
  std::int64_t bytes = 0;
  // With recompute, what a split backward's B recomputes for its W (taken at B, given back at W).
  std::unique_ptr<WeightInputs> recomputed;
};

// The activations recompute drops that W reads, per layer of a chunk: B recomputes them here and
// W reads them, so they live from B to W only (pooled by the model, not the slot).
struct Gpt::WeightInputs {
  int chunk = -1, B = 0, T = 0;
  std::vector<LayerActs> blocks;
  std::vector<LayerGrads> grads;  // as Slot::grads, which stays empty with recompute
  std::int64_t bytes = 0;
};

// Buffers any chunk and micro-batch may use while it computes (one computes at a time).
struct Gpt::Scratch {
  int B = 0, T = 0;
  // dln: a norm's output gradient, this rank's rows (with sequence parallelism [N/tp, C]).
  Tensor branch, dln, datty, dqkv, dfch, dact;
  Tensor replicated_dweight;  // a layer's partial weight gradient of qkv's part replicated over tp, if any
  Tensor row_max, sum_exp, target_logit;  // vocab-parallel loss statistics
  // The head's logits of one chunk of rows, [R, Vp/tp], then their gradient (models/head_chunks.h).
  Tensor head_logits;
  Tensor mean_sums;  // the head's: where its mean loss is summed (kernels::accumulate_mean)
  // With recompute, one layer's worth of what the slots do not keep, shared by every layer: the
  // forward writes it and moves on, backward recomputes into it.
  LayerActs layer;
  // Sequence parallelism only: the gathered [N, C] input of a column-parallel layer, the gathered
  // gradient of the residual stream, the branch's [N/tp, C] rows, a column-parallel layer's [N, C]
  // partial input gradient, a layernorm's parameter gradients from this rank's rows ([2C]: weight,
  // then bias; [C] for RMSNorm).
  Tensor full, dfull, branch_local, dln_partial, ln_dparams;
  std::int64_t bytes = 0;
};

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
      }(), compute, pad_multiple, options_.store_blocks),
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

std::int64_t Gpt::head_rows_per_chunk(std::int64_t rows) const {
  return head_chunk_rows(rows, partition_.vocab_rows_local(config_), static_cast<std::int64_t>(dtype_size(compute_dtype())),
                         ctx_.device().is_cuda(), options_.head_chunk_rows);
}

const Tensor& Gpt::head_input(const Residual& last, Slot& s, Scratch& w) {
  const UnitUse use_lnf(hooks_, lnf_unit_, ParamUse::Forward);
  // This rank's rows, over the last layer's pending MLP output (the fused add reads a row whole
  // before it writes it).
  Tensor& lnf = options_.sequence_parallel ? w.branch_local : w.branch;
  norm_forward(lnf_, last, lnf, s.lnf_mean, s.lnf_rstd);
  return region_.enter(ctx_, lnf, w.full);  // the LM head's GEMMs read every row
}

// The losses and log-sum-exps of one chunk of rows, starting at row first_row.
void Gpt::chunk_loss(Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse, Scratch& w,
                     std::int64_t first_row) {
  if (!tp_.active()) {
    nn::cross_entropy_forward(ctx_, logits, targets, config_.vocab_size, losses, lse);
    return;
  }
  // The softmax over the whole vocabulary from per-slice statistics: a max, a sum of exponentials
  // and the target's logit, each one allreduce of the chunk's floats; the logits never leave the rank.
  const std::int64_t rows = logits.shape()[0];
  Tensor row_max = w.row_max.narrow(first_row, rows), sum_exp = w.sum_exp.narrow(first_row, rows);
  Tensor target_logit = w.target_logit.narrow(first_row, rows);
  const std::int64_t begin = partition_.vocab_begin(config_);
  nn::vocab_parallel_max(ctx_, logits, begin, config_.vocab_size, row_max);
  tp_.allreduce(row_max, ReduceOp::Max);
  nn::vocab_parallel_sum_exp(ctx_, logits, begin, config_.vocab_size, row_max, sum_exp);
  tp_.allreduce(sum_exp, ReduceOp::Sum);
  nn::vocab_parallel_target_logit(ctx_, logits, targets, begin, target_logit);
  tp_.allreduce(target_logit, ReduceOp::Sum);
  nn::vocab_parallel_loss(ctx_, row_max, sum_exp, target_logit, losses, lse);
}

// logits [rows, this rank's vocabulary] = x wte^T, one vocabulary piece at a time into its columns;
// piece_uses: each piece within a use of its unit (else the caller holds the head's one unit).
void Gpt::head_logits(const Tensor& x, Tensor& logits, bool piece_uses) {
  for (std::size_t k = 0; k < head_pieces_.size(); ++k) {
    std::optional<UnitUse> use;
    if (piece_uses) use.emplace(hooks_, head_units_[k], ParamUse::Forward);
    head_pieces_[k].forward_columns(ctx_, x, logits, static_cast<std::int64_t>(k) * head_pieces_[k].out_features());
  }
}

void Gpt::head_loss(Slot& s, const Residual& last, const Tensor& targets, std::optional<float> loss_weight,
                    Tensor& loss_sum) {
  expect_tokens(targets, s, "target");
  s.targets = targets;
  Scratch& w = scratch(s.B, s.T);
  const Tensor& lnf = head_input(last, s, w);
  const bool training = loss_weight.has_value();
  // The tied embedding: read for the logits, and in training its gradient made here (ZeRO-2/3
  // reduce what this use wrote when it ends). Cut into vocabulary pieces, each piece is used twice
  // per row chunk instead: for its logits, then for its gradients.
  const bool cut = head_pieces_.size() > 1;
  std::optional<UnitUse> use_wte;
  if (!cut) use_wte.emplace(hooks_, head_units_[0], training ? ParamUse::ForwardWithGradient : ParamUse::Forward);
  const std::int64_t N = s.losses.numel(), R = w.head_logits.shape()[0];
  const float dloss = training ? *loss_weight / static_cast<float>(N) : 0.0f;
  for (std::int64_t first = 0; first < N; first += R) {
    const std::int64_t rows = std::min(R, N - first);
    Tensor logits = w.head_logits.narrow(0, rows);
    const Tensor x = lnf.narrow(first, rows), targets_c = s.targets.narrow(first, rows);
    Tensor losses = s.losses.narrow(first, rows), lse = s.lse.narrow(first, rows);
    // logits = lnf wte^T over this rank's vocabulary rows (padding columns are ignored by the loss).
    head_logits(x, logits, cut);
    // dlogits replaces the logits; then through the tied LM head: the embedding's gradient (fp32
    // whatever the compute dtype), and this rank's part of lnf's output gradient. Without tensor
    // parallelism training takes the loss and dlogits in one call (forward-then-backward's bits).
    if (training && !tp_.active()) {
      nn::cross_entropy_fused(ctx_, logits, targets_c, config_.vocab_size, dloss, losses, lse, logits);
    } else {
      chunk_loss(logits, targets_c, losses, lse, w, first);
      if (!training) continue;
      nn::vocab_parallel_cross_entropy_backward(ctx_, logits, targets_c, lse, partition_.vocab_begin(config_),
                                                config_.vocab_size, dloss, logits);
    }
    // Over pieces dlnf sums their products in fp32, rounded once into the compute dtype.
    Tensor dlnf = s.dlnf.narrow(first, rows);
    const bool widened = cut && dlnf.dtype() != DType::F32;
    Tensor sum = widened ? Tensor::empty(dlnf.shape(), DType::F32, ctx_) : dlnf;
    for (std::size_t k = 0; k < head_pieces_.size(); ++k) {
      std::optional<UnitUse> use;
      if (cut) use.emplace(hooks_, head_units_[k], ParamUse::ForwardWithGradient);
      const std::int64_t col = static_cast<std::int64_t>(k) * head_pieces_[k].out_features();
      head_pieces_[k].backward_weights_columns(ctx_, logits, col, x);
      head_pieces_[k].backward_input_columns(ctx_, logits, col, sum, k > 0);
    }
    if (widened) kernels::cast(ctx_, sum, dlnf);
  }
  s.head_gradient = training;
  kernels::accumulate_mean(ctx_, s.losses, loss_sum, w.mean_sums);
}

Tensor Gpt::input_buffer(int chunk, int micro, int B, int T) {
  MT_CHECK(!chunk_has_embedding(chunk), "chunk ", chunk, " embeds its own input");
  return acquire(chunk, micro, B, T).residual[0];
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

void Gpt::take_head_gradient(Slot& s) {
  MT_CHECK(s.head_gradient, "backward() needs a forward() with targets and a loss weight first (a training forward)");
  s.head_gradient = false;  // the backward sums dlnf over tp in place: used once
}

void Gpt::head_backward(Slot& s, Scratch& w) {
  take_head_gradient(s);
  if (lm_head_ >= 0) ready(static_cast<std::size_t>(lm_head_), static_cast<std::size_t>(options_.vocab_pieces));  // made whole by the forward
  // The forward made dwte and this rank's part of dlnf; each rank's vocabulary slice contributed
  // part of dlnf: their sum, then lnf.
  const UnitUse use_lnf(hooks_, lnf_unit_, ParamUse::Backward);
  const Tensor& dlnf = region_.enter_backward(ctx_, s.dlnf, w.dln);
  kernels::fill(ctx_, s.dres, 0.0);
  layernorm_backward(lnf_, dlnf, s.residual.back(), s.lnf_mean, s.lnf_rstd, s.dres, w);
  ready(static_cast<std::size_t>(lnf_first_), units_[static_cast<std::size_t>(lnf_unit_)].count);
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

const Tensor& Gpt::head_dlnf(Slot& s) const { return options_.sequence_parallel ? s.dlnf_local : s.dlnf; }

// The forward made dwte: B sums dlnf over tp (the fused backward's collective) and runs lnf's input
// gradient, W lnf's parameter gradients.
void Gpt::head_backward_input(Slot& s) {
  take_head_gradient(s);
  const UnitUse use_lnf(hooks_, lnf_unit_, ParamUse::BackwardInput);
  region_.enter_backward(ctx_, s.dlnf, s.dlnf_local);  // with sequence parallelism this rank's rows of the sum
  kernels::fill(ctx_, s.dres, 0.0);
  lnf_.backward_input(ctx_, head_dlnf(s), s.residual.back(), s.lnf_mean, s.lnf_rstd, s.dres);
}

void Gpt::head_backward_weights(Slot& s) {
  if (lm_head_ >= 0) ready(static_cast<std::size_t>(lm_head_), static_cast<std::size_t>(options_.vocab_pieces));  // made whole by the forward
  const UnitUse use_lnf(hooks_, lnf_unit_, ParamUse::BackwardWeights);
  layernorm_backward_params(lnf_, head_dlnf(s), s.residual.back(), s.lnf_mean, s.lnf_rstd, scratch(s.B, s.T));
  ready(static_cast<std::size_t>(lnf_first_), units_[static_cast<std::size_t>(lnf_unit_)].count);
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

std::int64_t Gpt::activation_bytes() const {
  std::int64_t bytes = (scratch_ ? scratch_->bytes : 0) + attention_->workspace_bytes();
  for (const auto& [key, slot] : live_) bytes += slot->bytes + (slot->recomputed ? slot->recomputed->bytes : 0);
  return bytes;
}

}  // namespace mt
