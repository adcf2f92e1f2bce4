// GPT-2's layer: LayerNorms, one fused QKV projection with its bias, causal attention, and an MLP
// with tanh GELU carried by the up projection's GEMM epilogue (runtime/gemm.h); every linear has a bias.
// defines: Gpt2Block
#pragma once

#include "models/blocks/block.h"

namespace mt {

class Gpt2Block final : public Block {
 public:
  Gpt2Block(ParameterStore& store, const std::string& prefix, const GptConfig& config, const TpRegion& region);

  // Positions enter through wpe: attention reads the projection as it is.
  void qkv_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& qkv, const Tensor&) const override;
  void qkv_output_backward(DeviceContext&, Tensor&, const Tensor&) const override {}
  // fch is the pre-activation, act the GELU of it as stored.
  void mlp_up_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& fch, Tensor& act) const override;
  void mlp_activation(DeviceContext& ctx, const Tensor& fch, Tensor& act) const override;
  // gelu'(fch) in the down projection's input-gradient epilogue: dact unused.
  void mlp_down_backward_input(DeviceContext& ctx, const Tensor& dy, const Tensor& fch, Tensor& dact,
                               Tensor& dfch) const override;
};

}  // namespace mt
