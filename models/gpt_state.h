// Gpt's private types (models/gpt.h declares them): what forward keeps for backward and the
// buffers around it, shared by the files that implement Gpt (gpt.cpp: construction, forward and
// the fused backward; gpt_buffers.cpp: where activations live; gpt_head.cpp: the LM head and its
// loss; gpt_split_backward.cpp: B and W apart) and by nothing else.
// defines: ReadyScope, UnitUse, LayerActs, Residual, LayerGrads, Slot, WeightInputs, Scratch
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "models/gpt.h"

namespace mt {

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

}  // namespace mt
