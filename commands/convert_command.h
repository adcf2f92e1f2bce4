// `meshtrain convert`: a checkpoint to llm.c weights and back, or to another layout, offline.
// defines: convert_command
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {

int convert_command(const std::vector<std::string>& args, const MpiRuntime& mpi);

}  // namespace mt
