#include "models/blocks/gpt2_block.h"

#include "models/parameter_store.h"

namespace mt {

Gpt2Block::Gpt2Block(ParameterStore& store, const std::string& prefix, const GptConfig& config, const TpRegion& region)
    : Block(store, prefix, config, region) {
  qkv = ColumnParallelLinear({{Linear::from_store(store, prefix + "attn.qkv")}}, region);
  params = 12;  // weight and bias of ln1, qkv, attn.proj, ln2, fc, mlp.proj
}

void Gpt2Block::qkv_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& out, const Tensor&) const {
  qkv.forward(ctx, x, full, out);
}

void Gpt2Block::mlp_up_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& fch, Tensor& act) const {
  fc.forward_gelu(ctx, x, full, fch, act);
}

void Gpt2Block::mlp_activation(DeviceContext& ctx, const Tensor& fch, Tensor& act) const {
  nn::gelu_forward(ctx, fch, act);
}

void Gpt2Block::mlp_down_backward_input(DeviceContext& ctx, const Tensor& dy, const Tensor& fch, Tensor&,
                                        Tensor& dfch) const {
  fc_proj.backward_input_dgelu(ctx, dy, fch, dfch);
}

}  // namespace mt
