// A Gpt's parameters from and to llm.c checkpoint files (models/llmc/), so a run can start from or
// hand off to that ecosystem.
// defines: load_llmc_weights, save_llmc_weights
#pragma once

#include <filesystem>

#include "models/gpt.h"

namespace mt {

// Copies the file's parameters into the model; Error when the file's shape differs from the model's.
void load_llmc_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& path);
// Writes the model's parameters (atomically) as fp32 (version 3) or bf16 (version 5).
void save_llmc_weights(const Gpt& model, const std::filesystem::path& path, DType stored);

}  // namespace mt
