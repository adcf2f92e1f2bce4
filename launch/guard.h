// The top level of every meshtrain executable: starts MPI, runs the body, and turns any error into
// an orderly end of the whole job. A usage error that every rank raised is printed once, by rank 0,
// and every rank exits with 2; so is a JobError (which every rank raised together, having agreed),
// exiting with 1. An EnvironmentError (a full disk) is printed by the rank that hit it as one line
// without the source location, naming the rank and host when there are several ranks. Any other
// error, a usage error that only some ranks raised included, is printed by the rank that hit it (with
// place, rank and host). With peers, both end the job with MPI_Abort, so none waits forever in a
// collective.
// defines: run_guarded
#pragma once

#include <functional>

#include "comm/mpi_runtime.h"

namespace mt {

// `program` prefixes the error lines ("meshtrain: error: ...").
int run_guarded(int argc, char** argv, const std::function<int(int, char**, const MpiRuntime&)>& body,
                const char* program = "meshtrain");

}  // namespace mt
