#include "bench/bench_env.h"

#include <set>

#include "comm/mpi_runtime.h"

namespace mt {

int count_hosts(MPI_Comm comm, const std::string& host) {
  const std::vector<std::string> hosts = gather_strings(comm, host, 0);
  int count = static_cast<int>(std::set<std::string>(hosts.begin(), hosts.end()).size());
  MT_MPI_CHECK(MPI_Bcast(&count, 1, MPI_INT, 0, comm));
  return count;
}

double slowest_rank_seconds(MPI_Comm comm, double seconds) {
  double slowest = 0;
  MT_MPI_CHECK(MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm));
  return slowest;
}

}  // namespace mt
