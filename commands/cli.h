// The meshtrain command line: `meshtrain COMMAND [options]`, one Boost.Program_options description
// per command. Usage errors are the same on every rank, so rank 0 alone reports them.
// defines: Command, run_cli
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {

struct Command {
  std::string name;
  std::string summary;
  // Runs with the arguments after the command name; returns the exit code.
  std::function<int(const std::vector<std::string>& args, const MpiRuntime& mpi)> run;
};

const std::vector<Command>& commands();
int run_cli(int argc, char** argv, const MpiRuntime& mpi);

}  // namespace mt
