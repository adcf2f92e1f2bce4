// Llama's layer: RMSNorms, q and [k | v] projections writing their columns of one [q | k | v], RoPE
// on q and k (Hugging Face's half-split rotation, which its checkpoints expect), grouped-query
// attention, and SwiGLU over the up projection's [gate | up]; no biases. Where tp does not split the
// kv heads every rank holds them whole, and their weight gradient is summed over the group.
// defines: LlamaBlock
#pragma once

#include "models/blocks/block.h"

namespace mt {

class LlamaBlock final : public Block {
 public:
  LlamaBlock(ParameterStore& store, const std::string& prefix, const GptConfig& config, const TpRegion& region,
             const nn::AttentionHeads& heads, bool kv_replicated);

  // The projections, then RoPE on q and k in place.
  void qkv_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& qkv,
                   const Tensor& positions) const override;
  void qkv_output_backward(DeviceContext& ctx, Tensor& dqkv, const Tensor& positions) const override;  // RoPE's adjoint
  void mlp_up_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& fch, Tensor& act) const override;
  void mlp_activation(DeviceContext& ctx, const Tensor& fch, Tensor& act) const override;
  // Through dact (SwiGLU's output gradient, half fch's width).
  void mlp_down_backward_input(DeviceContext& ctx, const Tensor& dy, const Tensor& fch, Tensor& dact,
                               Tensor& dfch) const override;

 private:
  int q_heads_, kv_heads_;  // this rank's
  float rope_theta_;
};

}  // namespace mt
