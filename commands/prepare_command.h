// defines: prepare_command
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {
int prepare_command(const std::vector<std::string>& args, const MpiRuntime& mpi);
}  // namespace mt
