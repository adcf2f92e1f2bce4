// A Hugging Face model folder of any family meshtrain runs, picked by config.json's model_type
// ("gpt2", also when absent as in old GPT-2 files, or "llama"): its shape, its weights read, and
// a model written in its family's names.
// defines: hf_family, read_hf_config, read_hf_safetensors, write_hf_safetensors
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "models/hf/hf_folder.h"  // defines: HfFamily, HfParamVisitor, HfParamSource

namespace mt {

const HfFamily& hf_family(ModelFamily family);
// dir/config.json's shape; UsageError, one line, for a model_type meshtrain does not run.
GptConfig read_hf_config(const std::filesystem::path& dir);
// read_hf_folder with the family config.json names.
GptConfig read_hf_safetensors(const std::filesystem::path& dir, const std::optional<GptConfig>& expected,
                              const HfParamVisitor& visit);
// write_hf_folder with the family of `config`.
void write_hf_safetensors(const std::filesystem::path& dir, const GptConfig& config, const HfParamSource& value_of,
                          StDtype stored, std::int64_t shard_bytes);

}  // namespace mt
