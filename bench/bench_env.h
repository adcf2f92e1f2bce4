// What every benchmark reports about where it ran: the device kind, the number of distinct hosts,
// and the time of a region as the job sees it (the slowest rank's).
// defines: device_kind, count_hosts, slowest_rank_seconds
#pragma once

#include <mpi.h>

#include <string>

#include "comm/communicator.h"
#include "runtime/context.h"
#include "runtime/device.h"

namespace mt {

// "cpu" or "cuda", as the JSON rows name the device.
inline const char* device_kind(const Device& device) { return device.is_cuda() ? "cuda" : "cpu"; }

// Collective over `comm`: how many distinct host names its ranks report.
int count_hosts(Communicator& comm, DeviceContext& ctx, const std::string& host);
// Collective over `comm`: the largest of the ranks' `seconds`.
double slowest_rank_seconds(MPI_Comm comm, double seconds);

}  // namespace mt
