// `meshtrain devices`: every rank's host, ranks, device, memory and cap, threads and backend.
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {

int devices_command(const std::vector<std::string>& args, const MpiRuntime& mpi);

}  // namespace mt
