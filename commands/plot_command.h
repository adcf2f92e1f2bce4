// `meshtrain plot`: draws the loss (train and validation) and throughput curves of one or more
// runs' metrics files into one PNG, the runs overlaid.
// defines: plot_command
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {

int plot_command(const std::vector<std::string>& args, const MpiRuntime& mpi);

}  // namespace mt
