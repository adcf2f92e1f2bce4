// GPT-2 in Hugging Face's conventions: a folder with config.json and safetensors weights
// (model.safetensors, or shards and model.safetensors.index.json), tensors named as GPT2Model
// names them ("h.0.attn.c_attn.weight") or, as GPT2LMHeadModel's save_pretrained writes, with a
// "transformer." prefix; an optional lm_head.weight that must equal wte (tied). Their Conv1D
// weights are [in, out], ours [out, in]; their vocabulary is unpadded (V rows), ours Vp.
// defines: gpt2_config_from_hf, read_gpt2_hf_config, gpt2_hf_config_json, gpt2_hf_tensors,
//          is_hf_folder, read_gpt2_safetensors, write_gpt2_safetensors, HfParamVisitor
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/safetensors.h"         // defines: StDtype
#include "models/gpt_config.h"      // defines: GptConfig
#include "models/gpt_parameters.h"  // defines: ParamSpec
#include "models/hf/hf_tensors.h"   // defines: HfTensor

namespace mt {

// The model shape of a config.json (n_embd, n_layer, n_head, vocab_size, n_positions or n_ctx),
// the vocabulary padded as meshtrain pads it. UsageError, one line naming `where`, for a config
// meshtrain cannot run: another model_type, an activation other than gelu_new (tanh GELU),
// untied embeddings, n_inner other than 4 x n_embd, another layernorm epsilon, ...
GptConfig gpt2_config_from_hf(const nlohmann::json& config, const std::string& where);
GptConfig read_gpt2_hf_config(const std::filesystem::path& dir);  // dir/config.json
// What save_pretrained of a GPT2LMHeadModel would write for `config`.
nlohmann::ordered_json gpt2_hf_config_json(const GptConfig& config, StDtype stored);

// One entry per gpt_parameter_specs(config) entry, in that order.
std::vector<HfTensor> gpt2_hf_tensors(const GptConfig& config);

// A directory holding config.json and model.safetensors or model.safetensors.index.json.
bool is_hf_folder(const std::filesystem::path& dir);

// One parameter in our layout, valid until the call returns.
using HfParamVisitor = std::function<void(const ParamSpec& spec, std::span<const float> values)>;

// Checks the whole folder first (config, every tensor present with HF's shape, nothing unknown, a
// tied lm_head), then visits every parameter in gpt_parameter_specs order. With `expected`, the
// folder's shape must be it (the same one-line Error as for llm.c files). Returns the shape.
GptConfig read_gpt2_safetensors(const std::filesystem::path& dir, const std::optional<GptConfig>& expected,
                                const HfParamVisitor& visit);

// Writes config.json and the weights (prefixed names, no lm_head: tied, as save_pretrained does)
// into `dir`, sharded past `shard_bytes` (0: one file). value_of(spec) gives spec.numel() floats in
// our layout, valid until the next call: each is copied into HF's layout at once, so the whole
// model is held once more in that layout until the files are written.
void write_gpt2_safetensors(const std::filesystem::path& dir, const GptConfig& config,
                            const std::function<std::span<const float>(const ParamSpec&)>& value_of, StDtype stored,
                            std::int64_t shard_bytes);

}  // namespace mt
