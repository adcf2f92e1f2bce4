// `meshbench context`: see bench/main.cpp for the summary.
// defines: context_bench
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {
int context_bench(const std::vector<std::string>& args, const MpiRuntime& mpi);
}  // namespace mt
