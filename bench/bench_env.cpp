#include "bench/bench_env.h"

#include <set>

#include "comm/agreement.h"
#include "comm/mpi_runtime.h"

namespace mt {

int count_hosts(Communicator& comm, DeviceContext& ctx, const std::string& host) {
  const std::vector<std::string> hosts = allgather_strings(comm, ctx, host);
  return static_cast<int>(std::set<std::string>(hosts.begin(), hosts.end()).size());
}

double slowest_rank_seconds(MPI_Comm comm, double seconds) {
  double slowest = 0;
  MT_MPI_CHECK(MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm));
  return slowest;
}

}  // namespace mt
