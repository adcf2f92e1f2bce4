// defines: sample_command
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {
int sample_command(const std::vector<std::string>& args, const MpiRuntime& mpi);
}  // namespace mt
