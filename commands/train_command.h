// `meshtrain train` (its options and their reading: commands/train_options.h).
// defines: train_command
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {
int train_command(const std::vector<std::string>& args, const MpiRuntime& mpi);
}  // namespace mt
