// A GPT-2 style decoder with explicit forward and backward: token + position embedding, pre-LN
// blocks (layernorm, causal self-attention with a fused QKV projection, residual; layernorm, MLP
// with tanh GELU, residual), a final layernorm and an LM head tied to the token embedding, trained
// with softmax cross-entropy (mean over positions).
//
// Compute dtype: fp32 (the default, and what the CPU is for), or bf16 with fp32 master weights
// (meant for CUDA; on the CPU it runs, slowly, so that it can be tested). With bf16:
//   - the ParameterStore keeps the parameters and gradients in fp32; the optimizer, checkpoints and
//     gradient norms see only those;
//   - every forward starts by casting the whole master into the store's bf16 copy (one kernel; a
//     few bytes per parameter next to the forward's work, and never stale, whoever changed the
//     master: the optimizer, a checkpoint load, a test). The GEMMs, the LM head included, read it;
//   - activations and their gradients are bf16; layernorm statistics, attention probabilities,
//     losses and log-sum-exps stay fp32, as the kernels keep them;
//   - weight gradients accumulate in fp32 through bf16 x bf16 -> fp32 GEMMs; bias, layernorm and
//     embedding gradients are fp32 sums of the bf16 activation gradients (runtime/nn_kernels.h).
// The same code runs both: the dtype of the activation tensors picks the kernels.
// defines: Gpt
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/gpt_config.h"
#include "models/layers.h"
#include "models/parameter_store.h"

namespace mt {

class Gpt {
 public:
  // compute: fp32 or bf16 (see above).
  Gpt(DeviceContext& ctx, const GptConfig& config, DType compute = DType::F32);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return config_; }
  DType compute_dtype() const { return store_.compute_dtype(); }
  ParameterStore& parameters() { return store_; }
  const ParameterStore& parameters() const { return store_; }
  void init(std::uint64_t seed);  // GPT-2's initialization (models/init.h)

  // B sequences of T tokens (row-major host arrays). Returns the mean cross-entropy over B x T
  // positions; the activations are kept for backward().
  float forward(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int B, int T);
  // Forward without a loss: logits() then holds [B*T, Vp], of the compute dtype.
  void forward_logits(std::span<const std::int32_t> inputs, int B, int T);
  // Adds loss_weight x d(mean loss of the last forward)/d(parameter) to every gradient. With
  // gradient accumulation over k micro-batches, loss_weight = 1/k gives the gradient of the mean.
  void backward(float loss_weight = 1.0f);
  const Tensor& logits() const;
  // Per-position losses of the last forward with targets, [B*T] fp32 on the device.
  const Tensor& losses() const;

  std::int64_t activation_bytes() const;  // held for the current batch shape

 private:
  struct Block;
  struct Activations;
  void ensure_activations(int B, int T);
  void run_forward(std::span<const std::int32_t> inputs, int B, int T);

  DeviceContext& ctx_;
  GptConfig config_;
  ParameterStore store_;
  std::vector<Block> blocks_;
  LayerNorm lnf_;
  std::unique_ptr<Activations> acts_;
  bool have_targets_ = false;
};

}  // namespace mt
