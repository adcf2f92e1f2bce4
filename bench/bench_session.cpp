#include "bench/bench_session.h"

#include "bench/bench_env.h"

namespace mt {

BenchSession open_bench_session(const RuntimeOptions& options) {
  BenchSession s{open_session(options)};
  s.hosts = count_hosts(MPI_COMM_WORLD, s.session.placement.host);
  return s;
}

}  // namespace mt
