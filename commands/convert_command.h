// `meshtrain convert`: between checkpoints (any layout), llm.c weights and Hugging Face safetensors
// folders, offline.
// defines: convert_command
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {

int convert_command(const std::vector<std::string>& args, const MpiRuntime& mpi);

}  // namespace mt
