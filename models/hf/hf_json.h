// Reading and writing the config.json of a Hugging Face model folder: the file itself, and the
// checks of single keys that every family's reader makes (each failure one line naming the file).
// defines: read_hf_config_json, hf_required_int, hf_value_or, hf_torch_dtype, write_hf_config_json
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "io/safetensors.h"  // defines: StDtype

namespace mt {

// dir/config.json parsed: UsageError when it is missing or not JSON.
nlohmann::json read_hf_config_json(const std::filesystem::path& dir);
// A key holding an integer in [1, INT_MAX]; UsageError naming `where` when absent or not.
int hf_required_int(const nlohmann::json& config, const char* key, const std::string& where);
// A key's value, or `fallback` when it is absent or null.
nlohmann::json hf_value_or(const nlohmann::json& config, const char* key, nlohmann::json fallback);
// "float32", "bfloat16", "float16": config.json's torch_dtype for the stored precision.
const char* hf_torch_dtype(StDtype stored);
// Writes `config` as dir/config.json (atomically, two-space indented as save_pretrained does).
void write_hf_config_json(const std::filesystem::path& dir, const nlohmann::ordered_json& config);

}  // namespace mt
