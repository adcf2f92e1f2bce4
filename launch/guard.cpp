#include "launch/guard.h"

#include <cstdio>
#include <exception>
#include <memory>

#include "launch/cli.h"

namespace mt {

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
    return body(argc, argv, *mpi);
  } catch (const UsageError& e) {
    if (mpi->world_rank() == 0) std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 2;
  } catch (const JobError& e) {
    if (mpi->world_rank() == 0) std::fprintf(stderr, "%s: error: %s\n", program, e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    // Alone there is nobody to take down; with peers, the job must end rather than hang them.
    if (mpi->world_size() == 1) return 1;
    abort_job(1);
  }
}

}  // namespace mt
