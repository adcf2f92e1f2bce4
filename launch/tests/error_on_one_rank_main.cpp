// A job in which one rank goes wrong while the others wait in a collective for it. Run by ctest:
// the whole job must end promptly (the test's timeout), non-zero, with the cause named.
//   fail:    the last rank throws; the others wait in a barrier it never joins.
//   timeout: no watchdog; the last rank never joins; the others' barrier times out after 2 s, and
//            the error unwinds past a communicator with the barrier still in flight (must not hang).
//   skip:    with the watchdog (3 s): the last rank skips the second allreduce and sleeps; the
//            watchdog of a waiting rank names it, the op and the group, and ends the job.
//   desync:  with --debug-collectives: the last rank calls a barrier where the others call an
//            allreduce; one report names who called what and from where, and the job ends.
//   usage-everywhere: every rank raises the same UsageError (a bad option): one plain line from
//            rank 0, exit 2 on every rank, no abort.
//   usage-on-last: the last rank alone raises a UsageError while the others wait in a barrier: the
//            job ends (after the guard's 10 s window) with the message, its place and the rank.
//   agree-on-last: before any communicator, the last rank alone brings an error to
//            agree_before_communicators: every rank raises one JobError naming it, said once, exit 1.
//   rank0-decides: rank 0 alone finds a usage error, which outcome_of_rank0 gives every rank (the
//            others waiting 1 s for it): one plain line, exit 2 on every rank.
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "comm/mpi_communicator.h"
#include "comm/watchdog.h"
#include "launch/early_agreement.h"
#include "launch/guard.h"
#include "runtime/context.h"

int main(int argc, char** argv) {
  return mt::run_guarded(argc, argv, [](int argc_left, char** argv_left, const mt::MpiRuntime& mpi) -> int {
    const std::string mode = argc_left > 1 ? argv_left[1] : "fail";
    const int last = mpi.world_size() - 1;
    const bool me_last = mpi.world_rank() == last;
    if (mode == "usage-everywhere") MT_REQUIRE(false, "--layers must be at least 1, got 0");
    if (mode == "agree-on-last") {
      mt::agree_before_communicators(MPI_COMM_WORLD, me_last ? std::optional<std::string>("no GPU on this host")
                                                             : std::nullopt);
      return 0;
    }
    if (mode == "rank0-decides") {
      std::optional<std::string> outcome;
      if (mpi.world_rank() == 0) {
        std::this_thread::sleep_for(std::chrono::seconds(1));  // the others wait, sleeping
        outcome = "--input 'x.txt' holds a NUL byte: binary";
      }
      if (const auto agreed = mt::outcome_of_rank0(MPI_COMM_WORLD, outcome)) throw mt::UsageError(*agreed);
      return 0;
    }
    if (mode == "usage-on-last") {
      auto world = mt::MpiCommunicator::world(mt::CommOptions{.timeout = std::chrono::seconds(60)});
      MT_REQUIRE(!me_last, "cannot read file 'only-here.bin' on the last rank");
      world->barrier();  // waits for a rank that will never come
      return 0;
    }
    if (mode == "fail" || mode == "timeout") {
      auto world = mt::MpiCommunicator::world(mt::CommOptions{.timeout = std::chrono::seconds(2)});
      if (me_last) {
        if (mode == "fail") MT_FAIL("deliberate failure on the last rank");
        std::this_thread::sleep_for(std::chrono::seconds(120));  // ended by the others' abort
        return 0;
      }
      world->barrier();  // waits for a rank that will never come
      return 0;
    }
    MT_CHECK(mode == "skip" || mode == "desync", "unknown mode ", mode);
    auto watchdog = std::make_shared<mt::Watchdog>(mt::Watchdog::Options{.timeout = std::chrono::seconds(3)});
    auto world = mt::MpiCommunicator::world(mt::CommOptions{
        .timeout = std::chrono::seconds(3), .watchdog = watchdog, .debug_collectives = mode == "desync"});
    mt::DeviceContext ctx(mt::DeviceOptions{});
    mt::Tensor x = mt::Tensor::zeros({256}, mt::DType::F32, ctx);
    watchdog->mark("began step 1 of 2");
    world->allreduce(x);
    watchdog->mark("began step 2 of 2");
    if (me_last && mode == "skip") {
      std::this_thread::sleep_for(std::chrono::seconds(120));  // ended by the others' watchdog
      return 0;
    }
    if (me_last) {
      world->barrier();
    } else {
      world->allreduce(x);
    }
    return 0;
  });
}
