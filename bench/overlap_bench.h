// `meshbench overlap`: see bench/main.cpp for the summary.
// defines: overlap_bench
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {
int overlap_bench(const std::vector<std::string>& args, const MpiRuntime& mpi);
}  // namespace mt
