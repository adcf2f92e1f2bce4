#include "models/blocks/llama_block.h"

#include "models/parameter_store.h"

namespace mt {

LlamaBlock::LlamaBlock(ParameterStore& store, const std::string& prefix, const GptConfig& config,
                       const TpRegion& region, const nn::AttentionHeads& heads, bool kv_replicated)
    : Block(store, prefix, config, region),
      q_heads_(heads.q_heads),
      kv_heads_(heads.kv_heads),
      rope_theta_(config.rope_theta) {
  qkv = ColumnParallelLinear({{Linear::from_store(store, prefix + "attn.q", false)},
                              {Linear::from_store(store, prefix + "attn.kv", false), kv_replicated}},
                             region);
  params = 7;  // ln1, q, kv, attn.proj, ln2, fc, mlp.proj: weights alone
}

void LlamaBlock::qkv_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& out,
                             const Tensor& positions) const {
  qkv.forward(ctx, x, full, out);
  nn::rope_forward(ctx, out, q_heads_, kv_heads_, rope_theta_, positions);
}

void LlamaBlock::qkv_output_backward(DeviceContext& ctx, Tensor& dqkv, const Tensor& positions) const {
  nn::rope_backward(ctx, dqkv, q_heads_, kv_heads_, rope_theta_, positions);
}

void LlamaBlock::mlp_up_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& fch, Tensor& act) const {
  fc.forward(ctx, x, full, fch);
  mlp_activation(ctx, fch, act);
}

void LlamaBlock::mlp_activation(DeviceContext& ctx, const Tensor& fch, Tensor& act) const {
  nn::swiglu_forward(ctx, fch, act);
}

void LlamaBlock::mlp_down_backward_input(DeviceContext& ctx, const Tensor& dy, const Tensor& fch, Tensor& dact,
                                         Tensor& dfch) const {
  fc_proj.backward_input(ctx, dy, dact);
  nn::swiglu_backward(ctx, fch, dact, dfch);
}

}  // namespace mt
