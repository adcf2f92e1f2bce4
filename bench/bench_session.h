// The session a multi-rank meshbench command measures in, with what its rows say about it.
// defines: BenchSession, open_bench_session
#pragma once

#include "bench/bench_env.h"
#include "launch/session.h"

namespace mt {

struct BenchSession {
  Session session;
  int hosts = 1;  // distinct hosts of the world
  DeviceContext& ctx() const { return *session.context; }
  Communicator& world() const { return *session.world; }
  bool root() const { return session.placement.world_rank == 0; }
};

// Collective: open_session, then count the hosts.
BenchSession open_bench_session(const RuntimeOptions& options);

}  // namespace mt
