// A job in which one rank goes wrong while the others wait in a collective for it. Run by ctest:
// the whole job must end promptly (the test's timeout), non-zero, with the cause named.
//   fail:    the last rank throws; the others wait in a barrier it never joins.
//   timeout: the last rank never joins; the others' barrier times out after 2 s, and the error
//            unwinds past a communicator with the barrier still in flight (this must not hang).
#include <chrono>
#include <string>
#include <thread>

#include "comm/mpi_communicator.h"
#include "launch/guard.h"

int main(int argc, char** argv) {
  return mt::run_guarded(argc, argv, [](int argc_left, char** argv_left, const mt::MpiRuntime& mpi) -> int {
    const std::string mode = argc_left > 1 ? argv_left[1] : "fail";
    auto world = mt::MpiCommunicator::world(mt::CommOptions{std::chrono::seconds(2)});
    const int last = mpi.world_size() - 1;
    if (mpi.world_rank() == last) {
      if (mode == "fail") MT_FAIL("deliberate failure on the last rank");
      std::this_thread::sleep_for(std::chrono::seconds(120));  // ended by the others' abort
      return 0;
    }
    world->barrier();  // waits for a rank that will never come
    return 0;
  });
}
