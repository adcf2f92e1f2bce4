// A job in which one rank fails while the others wait in a collective for it. Run by ctest: the
// whole job must end promptly (the test's timeout), non-zero, with the failing rank named.
#include <cstdlib>
#include <string>

#include "comm/mpi_communicator.h"
#include "launch/guard.h"

int main(int argc, char** argv) {
  return mt::run_guarded(argc, argv, [](int, char**, const mt::MpiRuntime& mpi) -> int {
    auto world = mt::MpiCommunicator::world();
    const int failing = mpi.world_size() - 1;
    if (mpi.world_rank() == failing) MT_FAIL("deliberate failure on the last rank");
    world->barrier();  // the others wait here for a rank that will never come
    return 0;
  });
}
