#include "bench/bench_session.h"

#include "bench/bench_env.h"

namespace mt {

BenchSession open_bench_session(const RuntimeOptions& options) {
  BenchSession s{open_session(options)};
  s.hosts = count_hosts(*s.session.world, *s.session.context, s.session.placement.host);
  return s;
}

}  // namespace mt
