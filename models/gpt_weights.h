// A Gpt's parameters from and to llm.c checkpoint files (models/llmc/) and from Hugging Face
// safetensors folders (models/hf/), so a run can start from or hand off to those ecosystems. Any
// partition loads: each rank copies its shard out of the full file.
// defines: load_llmc_weights, load_safetensors_weights, load_init_weights, load_full_parameters,
//          save_llmc_weights
#pragma once

#include <filesystem>
#include <span>

#include "models/gpt.h"

namespace mt {

// Copies the file's parameters (this rank's shard of each) into the model; Error when the file's
// shape differs from the model's.
void load_llmc_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& path);
// The same from a Hugging Face folder (config.json + safetensors, GPT-2 or Llama: models/hf/hf_model.h),
// tensor by tensor; the folder is checked whole before any parameter changes.
void load_safetensors_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& dir);
// --init-weights: a directory is a safetensors folder, a file llm.c weights.
void load_init_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& path);
// Copies this rank's shard of each parameter out of the full model's parameters (gpt_parameter_specs
// order, as llm.c files and gathers hold them).
void load_full_parameters(Gpt& model, DeviceContext& ctx, std::span<const float> full);
// Writes a whole model's parameters (atomically) as fp32 (version 3) or bf16 (version 5).
void save_llmc_weights(const Gpt& model, const std::filesystem::path& path, DType stored);
// The same from the full parameters in gpt_parameter_specs order (e.g. gathered from the shards).
void save_llmc_weights(const GptConfig& config, std::span<const float> full, const std::filesystem::path& path,
                       DType stored);

}  // namespace mt
