// What every multi-rank benchmark reports about where it ran: the number of distinct hosts, and
// the time of a region as the job sees it (the slowest rank's).
// defines: count_hosts, slowest_rank_seconds
#pragma once

#include <mpi.h>

#include <string>

namespace mt {

// Collective over `comm`: how many distinct host names its ranks report.
int count_hosts(MPI_Comm comm, const std::string& host);
// Collective over `comm`: the largest of the ranks' `seconds`.
double slowest_rank_seconds(MPI_Comm comm, double seconds);

}  // namespace mt
