// A Hugging Face model folder (config.json beside model.safetensors, or shards and
// model.safetensors.index.json), read and written for any model family given its description:
// how config.json maps to our shape, its tensor table (models/hf/hf_tensors.h), the prefix of its
// names and the tensors it may hold beside the table. The whole-folder checks live here once:
// every tensor present with the shape config.json implies, nothing unknown, the model's shape.
// defines: HfParamVisitor, HfParamSource, HfFamily, is_hf_folder, read_hf_folder, write_hf_folder,
//          check_hf_compatible
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
#include "io/safetensors_folder.h"  // defines: SafetensorsFolder
#include "models/gpt_config.h"      // defines: GptConfig
#include "models/gpt_parameters.h"  // defines: ParamSpec
#include "models/hf/hf_tensors.h"   // defines: HfTensor

namespace mt {

// One parameter in our layout, valid until the call returns.
using HfParamVisitor = std::function<void(const ParamSpec& spec, std::span<const float> values)>;
// spec.numel() floats of a parameter in our layout, valid until the next call.
using HfParamSource = std::function<std::span<const float>(const ParamSpec& spec)>;

struct HfFamily {
  const char* model;  // "GPT-2", "Llama": in messages
  // config.json to our shape; UsageError, one line naming `where`, for one meshtrain cannot run.
  GptConfig (*config_from_hf)(const nlohmann::json& config, const std::string& where);
  // What save_pretrained writes as config.json for `config`.
  nlohmann::ordered_json (*config_json)(const GptConfig& config, StDtype stored);
  // One entry per gpt_parameter_specs(config) entry, in that order; names without the prefix.
  std::vector<HfTensor> (*tensors)(const GptConfig& config);
  // The prefix before every table name in a folder being read, and the one written.
  std::string (*read_prefix)(const SafetensorsFolder& folder);
  const char* write_prefix;
  // A tensor beside the table that the family knows (GPT-2's tied lm_head, old mask or rotary
  // buffers): true when known, after checking it (UsageError, one line); false when unknown.
  bool (*known_extra)(const SafetensorsFolder& folder, const std::string& prefix, const std::string& name);
};

// A directory holding config.json and model.safetensors or model.safetensors.index.json.
bool is_hf_folder(const std::filesystem::path& dir);

// Checks the whole folder first (config.json, every tensor present with the shape it implies,
// nothing unknown, the family's extras), then visits every parameter in gpt_parameter_specs
// order: a bad folder changes nothing. With `expected`, the folder's shape must be it
// (check_hf_compatible). Returns the shape.
GptConfig read_hf_folder(const HfFamily& family, const std::filesystem::path& dir,
                         const std::optional<GptConfig>& expected, const HfParamVisitor& visit);

// Writes config.json and the weights into `dir`, sharded past `shard_bytes` (0: one file). Each
// value_of(spec) is copied into HF's layout at once, so the whole model is held once more in that
// layout until the files are written.
void write_hf_folder(const HfFamily& family, const std::filesystem::path& dir, const GptConfig& config,
                     const HfParamSource& value_of, StDtype stored, std::int64_t shard_bytes);

// Error, one line, when the folder's shape (`found`) is not the model's (`expected`): another
// family, or a field that differs (the llm.c files' message for the fields they share, then the
// llama fields, which a run sets with --kv-heads, --ffn-hidden, --rope-theta, --norm-eps).
void check_hf_compatible(const GptConfig& expected, const GptConfig& found, const std::filesystem::path& dir);

}  // namespace mt
