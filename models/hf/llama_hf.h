// Llama in Hugging Face's conventions, as LlamaForCausalLM's save_pretrained writes it: config.json
// (model_type llama) beside safetensors weights named model.embed_tokens.weight,
// model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
// mlp.{gate,up,down}_proj}.weight, model.norm.weight and lm_head.weight (untied). Their Linear
// weights are [out, in] as ours; their k_proj and v_proj are stacked on the rows of our
// attn.kv.weight ([k ; v]) and gate_proj and up_proj on those of our mlp.fc.weight ([gate ; up]).
// Their q and k rows are in the order our RoPE expects (both rotate HF's half-split pairs), so no
// row is permuted. Their vocabulary is unpadded (V rows), ours Vp, in the embedding and the head.
// defines: llama_config_from_hf, llama_hf_config_json, llama_hf_tensors, llama_hf_family
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/hf/hf_folder.h"  // defines: HfFamily

namespace mt {

// The model shape of a config.json: hidden_size, intermediate_size, num_attention_heads,
// num_key_value_heads (absent: the heads), num_hidden_layers, vocab_size, and as LlamaConfig
// defaults them when absent rms_norm_eps (1e-6), rope_theta (10000; transformers 5 puts it in
// rope_parameters), max_position_embeddings (2048). UsageError, one line naming `where`, for one meshtrain cannot run: another model_type, a
// hidden_act other than silu, tied embeddings, attention or MLP biases, rope_scaling, a head_dim
// other than hidden_size / num_attention_heads, kv heads that do not divide the heads, ...
GptConfig llama_config_from_hf(const nlohmann::json& config, const std::string& where);
// What save_pretrained of a LlamaForCausalLM writes for `config` (less transformers_version and
// the token ids, which belong to the tokenizer), RoPE's base in the keys of transformers 4
// (rope_theta) and 5 (rope_parameters) both.
nlohmann::ordered_json llama_hf_config_json(const GptConfig& config, StDtype stored);

// One entry per gpt_parameter_specs(config) entry, in that order.
std::vector<HfTensor> llama_hf_tensors(const GptConfig& config);

// All of the above for models/hf/hf_folder.h. Older files' rotary_emb.inv_freq buffers (RoPE's
// frequencies, which config.json gives) are accepted and ignored.
const HfFamily& llama_hf_family();

}  // namespace mt
