// meshtrain's entry point. Every error ends the whole job: a usage error (the same on every rank)
// is printed once by rank 0 and every rank exits; any other error is printed by the rank that hit
// it, with its place, rank and host, and MPI_Abort stops the others so none waits forever.
#include <cstdio>
#include <exception>
#include <memory>

#include "comm/mpi_runtime.h"
#include "launch/cli.h"

int main(int argc, char** argv) {
  std::unique_ptr<mt::MpiRuntime> mpi;
  try {
    mpi = std::make_unique<mt::MpiRuntime>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain: error: cannot start MPI: %s\n", e.what());
    return 1;
  }
  try {
    return mt::run_cli(argc, argv, *mpi);
  } catch (const mt::UsageError& e) {
    if (mpi->world_rank() == 0) std::fprintf(stderr, "meshtrain: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain: error: %s\n", e.what());
    mt::abort_job(1);
  }
}
