// What multi-rank tests share: the world communicator, named sub-groups and a CPU device context,
// made on first use and torn down by the MPI test main before MPI_Finalize.
// defines: test_world, test_group, test_context, shutdown_test_env
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/context.h"

namespace mt::testing {

Communicator& test_world();
// The group `name` this rank belongs to, split from the world on first use (collective: every
// rank must ask for the same names in the same order). nullptr for a rank that named no members.
Communicator* test_group(const std::string& name, const std::vector<int>& members);
DeviceContext& test_context();
void shutdown_test_env();

}  // namespace mt::testing
