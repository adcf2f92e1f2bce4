// GPT-2 in Hugging Face's conventions: a folder with config.json and safetensors weights
// (model.safetensors, or shards and model.safetensors.index.json), tensors named as GPT2Model
// names them ("h.0.attn.c_attn.weight") or, as GPT2LMHeadModel's save_pretrained writes, with a
// "transformer." prefix; an optional lm_head.weight that must equal wte (tied). Their Conv1D
// weights are [in, out], ours [out, in]; their vocabulary is unpadded (V rows), ours Vp.
// defines: gpt2_config_from_hf, gpt2_hf_config_json, gpt2_hf_tensors, gpt2_hf_family,
//          read_gpt2_safetensors, write_gpt2_safetensors
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/hf/hf_folder.h"  // defines: HfFamily, HfParamVisitor, HfParamSource

namespace mt {

// The model shape of a config.json (n_embd, n_layer, n_head, vocab_size, n_positions or n_ctx),
// the vocabulary padded as meshtrain pads it. UsageError, one line naming `where`, for a config
// meshtrain cannot run: another model_type, an activation other than gelu_new (tanh GELU),
// untied embeddings, n_inner other than 4 x n_embd, another layernorm epsilon, ...
GptConfig gpt2_config_from_hf(const nlohmann::json& config, const std::string& where);
// What save_pretrained of a GPT2LMHeadModel would write for `config`.
nlohmann::ordered_json gpt2_hf_config_json(const GptConfig& config, StDtype stored);

// One entry per gpt_parameter_specs(config) entry, in that order.
std::vector<HfTensor> gpt2_hf_tensors(const GptConfig& config);

// All of the above for models/hf/hf_folder.h: names read with or without "transformer.", written
// with it and without lm_head (tied, as save_pretrained leaves it out).
const HfFamily& gpt2_hf_family();

// read_hf_folder / write_hf_folder for GPT-2 (a config.json of another model_type is refused).
GptConfig read_gpt2_safetensors(const std::filesystem::path& dir, const std::optional<GptConfig>& expected,
                                const HfParamVisitor& visit);
void write_gpt2_safetensors(const std::filesystem::path& dir, const GptConfig& config, const HfParamSource& value_of,
                            StDtype stored, std::int64_t shard_bytes);

}  // namespace mt
