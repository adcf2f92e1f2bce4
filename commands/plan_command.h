// `meshtrain plan`: predicts, without running anything, the memory per device and the step time
// of every layout a model could train with on a cluster (perf/), and prints the best plans, or the
// full breakdown of one --layout.
// defines: plan_command
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {

int plan_command(const std::vector<std::string>& args, const MpiRuntime& mpi);

}  // namespace mt
