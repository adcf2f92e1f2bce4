// `meshbench coll`: see bench/main.cpp for the summary.
// defines: coll_bench
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {
int coll_bench(const std::vector<std::string>& args, const MpiRuntime& mpi);
}  // namespace mt
