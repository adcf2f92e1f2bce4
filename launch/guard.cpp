#include "launch/guard.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>

#include "runtime/error.h"  // defines: UsageError, JobError, EnvironmentError, process_label

namespace mt {
namespace {
// How long ranks with a usage error wait for each other: they read the same options and files,
// so they arrive within moments of each other, not seconds.
constexpr std::chrono::milliseconds kUsageErrorWindow{10'000};

// An error every rank raised, or raised by ranks while the others ended normally: the lowest rank
// with it says it once, as a plain line, and every rank exits with `code`. When some rank does not
// come (still waiting in a collective for this one), this rank's message names it and the job ends.
int end_agreed(const MpiRuntime& mpi, const Error& e, int code, const char* program) {
  const std::optional<int> reporter = mpi.lowest_reporting_rank(true, kUsageErrorWindow);
  if (reporter) {
    if (*reporter == mpi.world_rank()) std::fprintf(stderr, "%s: error: %s\n", program, e.message().c_str());
    return code;
  }
  std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  abort_job(code);
}
}  // namespace

int run_guarded(int argc, char** argv, const std::function<int(int, char**, const MpiRuntime&)>& body,
                const char* program) {
  std::unique_ptr<MpiRuntime> mpi;
  try {
    mpi = std::make_unique<MpiRuntime>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: cannot start MPI: %s\n", program, e.what());
    return 1;
  }
  try {
    const int code = body(argc, argv, *mpi);
    // A rank that works alone (convert, plan) may fail after the others are done: they wait here
    // for it, as MPI_Finalize would, so that its usage error is said in one line and no one aborts.
    mpi->lowest_reporting_rank(false);
    return code;
  } catch (const UsageError& e) {
    // Options are read alike everywhere, so every rank normally raises the same usage error.
    return end_agreed(*mpi, e, 2, program);
  } catch (const JobError& e) {
    return end_agreed(*mpi, e, 1, program);
  } catch (const EnvironmentError& e) {
    // The system's refusal (a full disk): no source line to show, but which machine it was on.
    if (mpi->world_size() == 1) {
      std::fprintf(stderr, "%s: error: %s\n", program, e.message().c_str());
      return 1;
    }
    std::fprintf(stderr, "%s: error: rank %d (host %s): %s\n", program, mpi->world_rank(),
                 process_label().host.c_str(), e.message().c_str());
    abort_job(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    // Alone there is nobody to take down; with peers, the job must end rather than hang them.
    if (mpi->world_size() == 1) return 1;
    abort_job(1);
  }
}

}  // namespace mt
