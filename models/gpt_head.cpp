// Gpt: the LM head. Its logits, in chunks of rows, the vocab-parallel loss and the gradient at lnf's
// output, made in the training forward (the logits are never kept); its backward, fused or split.
#include "models/gpt.h"

#include "models/gpt_state.h"
#include "models/head_chunks.h"
#include "runtime/kernels.h"
#include "runtime/nn_kernels.h"

namespace mt {

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

}  // namespace mt
