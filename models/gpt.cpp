#include "models/gpt.h"

#include "models/init.h"
#include "runtime/gemm.h"
#include "runtime/kernels.h"
#include "runtime/nn_kernels.h"

namespace mt {

struct Gpt::Block {
  LayerNorm ln1, ln2;
  Linear qkv, attn_proj, fc, fc_proj;
};

// What forward keeps for backward, for one batch shape. residual[l] is the input of block l,
// residual[L] the input of the final layernorm.
struct Gpt::Activations {
  int B = 0, T = 0;
  Tensor tokens, targets;
  std::vector<Tensor> residual;
  struct PerBlock {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  std::vector<PerBlock> blocks;
  Tensor lnf, lnf_mean, lnf_rstd, logits, losses, lse;
  // Scratch shared by all blocks in forward (branch outputs) and backward (gradients).
  Tensor branch, dres, dln, datty, dqkv, dfch;
  std::int64_t bytes = 0;
};

Gpt::Gpt(DeviceContext& ctx, const GptConfig& config, DType compute)
    : ctx_(ctx), config_(config), store_((config.validate(), ctx), gpt_parameter_specs(config), compute) {
  for (int l = 0; l < config_.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    blocks_.push_back({LayerNorm::from_store(store_, p + "ln1"), LayerNorm::from_store(store_, p + "ln2"),
                       Linear::from_store(store_, p + "attn.qkv"), Linear::from_store(store_, p + "attn.proj"),
                       Linear::from_store(store_, p + "mlp.fc"), Linear::from_store(store_, p + "mlp.proj")});
  }
  lnf_ = LayerNorm::from_store(store_, "lnf");
}

Gpt::~Gpt() = default;

void Gpt::init(std::uint64_t seed) { init_gpt_parameters(ctx_, store_, config_, seed); }

void Gpt::ensure_activations(int B, int T) {
  MT_CHECK(B >= 1 && T >= 1, "batch must be at least 1 x 1, got ", B, " x ", T);
  MT_CHECK(T <= config_.max_seq_len, "sequence length ", T, " exceeds the model's context of ", config_.max_seq_len);
  if (acts_ && acts_->B == B && acts_->T == T) return;
  acts_.reset();  // free the old shape's buffers before allocating the new
  auto a = std::make_unique<Activations>();
  a->B = B;
  a->T = T;
  const std::int64_t N = static_cast<std::int64_t>(B) * T, C = config_.channels, H = config_.heads;
  auto make = [&](Shape shape, DType dtype) {
    Tensor t = Tensor::empty(std::move(shape), dtype, ctx_);
    a->bytes += static_cast<std::int64_t>(t.nbytes());
    return t;
  };
  // Activations and their gradients are of the compute dtype; statistics are fp32 whatever it is.
  auto act = [&](Shape shape) { return make(std::move(shape), compute_dtype()); };
  auto f32 = [&](Shape shape) { return make(std::move(shape), DType::F32); };
  for (int l = 0; l <= config_.layers; ++l) a->residual.push_back(act({N, C}));
  for (int l = 0; l < config_.layers; ++l) {
    a->blocks.push_back({act({N, C}), f32({N}), f32({N}), act({B, T, 3 * C}), act({N, C}), f32({B, H, T, T}),
                         act({N, C}), act({N, C}), f32({N}), f32({N}), act({N, 4 * C}), act({N, 4 * C})});
  }
  a->lnf = act({N, C});
  a->lnf_mean = f32({N});
  a->lnf_rstd = f32({N});
  a->logits = act({N, config_.vocab_rows()});
  a->losses = f32({N});
  a->lse = f32({N});
  a->branch = act({N, C});
  a->dres = act({N, C});
  a->dln = act({N, C});
  a->datty = act({N, C});
  a->dqkv = act({B, T, 3 * C});
  a->dfch = act({N, 4 * C});
  acts_ = std::move(a);
}

void Gpt::run_forward(std::span<const std::int32_t> inputs, int B, int T) {
  have_targets_ = false;  // whatever happens below, the last batch's targets no longer match the activations
  ensure_activations(B, T);
  Activations& a = *acts_;
  MT_CHECK(static_cast<std::int64_t>(inputs.size()) == static_cast<std::int64_t>(B) * T, "forward: ",
           inputs.size(), " input tokens for a batch of ", B, " x ", T);
  for (std::int32_t id : inputs)
    MT_CHECK(id >= 0 && id < config_.vocab_size, "input token ", id, " is outside the vocabulary [0, ",
             config_.vocab_size, ")");
  a.tokens = Tensor::from_host(inputs, {B, T}, ctx_);
  store_.refresh_compute_params(ctx_);  // the bf16 copy of the master weights (nothing to do in fp32)
  // The embedding kernel reads the fp32 tables and rounds their sum once into the activation dtype.
  nn::embedding_forward(ctx_, a.tokens, store_.param(0), store_.param(1), a.residual[0]);
  for (int l = 0; l < config_.layers; ++l) {
    Block& blk = blocks_[static_cast<std::size_t>(l)];
    auto& s = a.blocks[static_cast<std::size_t>(l)];
    const Tensor& x = a.residual[static_cast<std::size_t>(l)];
    blk.ln1.forward(ctx_, x, s.ln1, s.ln1_mean, s.ln1_rstd);
    blk.qkv.forward(ctx_, s.ln1, s.qkv);
    nn::attention_forward(ctx_, s.qkv, config_.heads, s.atty, s.att);
    blk.attn_proj.forward(ctx_, s.atty, a.branch);
    kernels::binary(ctx_, BinaryOp::Add, x, a.branch, s.res2);
    blk.ln2.forward(ctx_, s.res2, s.ln2, s.ln2_mean, s.ln2_rstd);
    blk.fc.forward(ctx_, s.ln2, s.fch);
    nn::gelu_forward(ctx_, s.fch, s.fch_gelu);
    blk.fc_proj.forward(ctx_, s.fch_gelu, a.branch);
    kernels::binary(ctx_, BinaryOp::Add, s.res2, a.branch, a.residual[static_cast<std::size_t>(l) + 1]);
  }
  lnf_.forward(ctx_, a.residual.back(), a.lnf, a.lnf_mean, a.lnf_rstd);
  // logits = lnf wte^T over all Vp rows (the padding columns are ignored by the loss).
  matmul(ctx_, a.lnf, false, store_.compute_param(0), true, a.logits);
}

float Gpt::forward(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int B, int T) {
  run_forward(inputs, B, T);
  Activations& a = *acts_;
  MT_CHECK(targets.size() == inputs.size(), "forward: ", targets.size(), " targets for ", inputs.size(), " inputs");
  // Checked here on the host: the CUDA cross-entropy kernel does not check its ids.
  for (std::int32_t id : targets)
    MT_CHECK(id >= 0 && id < config_.vocab_size, "target token ", id, " is outside the vocabulary [0, ",
             config_.vocab_size, ")");
  a.targets = Tensor::from_host(targets, {static_cast<std::int64_t>(targets.size())}, ctx_);
  nn::cross_entropy_forward(ctx_, a.logits, a.targets, config_.vocab_size, a.losses, a.lse);
  have_targets_ = true;
  return static_cast<float>(kernels::reduce(ctx_, ReduceKind::Sum, a.losses) / static_cast<double>(a.losses.numel()));
}

void Gpt::forward_logits(std::span<const std::int32_t> inputs, int B, int T) {
  run_forward(inputs, B, T);
  have_targets_ = false;
}

void Gpt::backward(float loss_weight) {
  MT_CHECK(acts_ && have_targets_, "backward() needs a forward() with targets first");
  Activations& a = *acts_;
  const std::int64_t N = a.losses.numel();
  // dlogits replaces the logits; then through the tied LM head.
  nn::cross_entropy_backward(ctx_, a.logits, a.targets, a.lse, config_.vocab_size,
                             loss_weight / static_cast<float>(N), a.logits);
  have_targets_ = false;  // the logits are gone
  Tensor& dwte = store_.grad(0);  // fp32 whatever the compute dtype
  matmul(ctx_, a.logits, true, a.lnf, false, dwte, 1.0f, 1.0f);
  matmul(ctx_, a.logits, false, store_.compute_param(0), false, a.dln);
  kernels::fill(ctx_, a.dres, 0.0);
  lnf_.backward(ctx_, a.dln, a.residual.back(), a.lnf_mean, a.lnf_rstd, a.dres);

  for (int l = config_.layers - 1; l >= 0; --l) {
    Block& blk = blocks_[static_cast<std::size_t>(l)];
    auto& s = a.blocks[static_cast<std::size_t>(l)];
    // MLP branch: out = res2 + proj(gelu(fc(ln2(res2)))). dres flows through unchanged and
    // collects the branch's contribution.
    blk.fc_proj.backward(ctx_, a.dres, s.fch_gelu, &a.dfch);
    nn::gelu_backward(ctx_, s.fch, a.dfch, a.dfch);
    blk.fc.backward(ctx_, a.dfch, s.ln2, &a.dln);
    blk.ln2.backward(ctx_, a.dln, s.res2, s.ln2_mean, s.ln2_rstd, a.dres);
    // Attention branch: res2 = x + proj(attention(qkv(ln1(x)))).
    blk.attn_proj.backward(ctx_, a.dres, s.atty, &a.datty);
    nn::attention_backward(ctx_, a.datty, s.qkv, s.att, config_.heads, a.dqkv);
    blk.qkv.backward(ctx_, a.dqkv, s.ln1, &a.dln);
    blk.ln1.backward(ctx_, a.dln, a.residual[static_cast<std::size_t>(l)], s.ln1_mean, s.ln1_rstd, a.dres);
  }
  nn::embedding_backward(ctx_, a.tokens, a.dres, dwte, store_.grad(1));
}

const Tensor& Gpt::logits() const {
  MT_CHECK(acts_ != nullptr, "no forward pass yet");
  return acts_->logits;
}

const Tensor& Gpt::losses() const {
  MT_CHECK(acts_ != nullptr, "no forward pass yet");
  return acts_->losses;
}

std::int64_t Gpt::activation_bytes() const { return acts_ ? acts_->bytes : 0; }

}  // namespace mt
