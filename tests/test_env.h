// What multi-rank tests share: the world communicator and a CPU device context, made once per
// process by the MPI test main.
// defines: test_world, test_context, rank_value
#pragma once

#include "comm/communicator.h"
#include "runtime/context.h"

namespace mt::testing {

Communicator& test_world();
DeviceContext& test_context();

}  // namespace mt::testing
