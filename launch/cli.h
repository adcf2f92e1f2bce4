// The meshtrain command line: `meshtrain COMMAND [options]`, one Boost.Program_options description
// per command. Usage errors are the same on every rank, so rank 0 alone reports them.
// defines: UsageError, Command, run_cli
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {

// A mistake on the command line: every rank sees the same one, rank 0 says it once.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Command {
  std::string name;
  std::string summary;
  // Runs with the arguments after the command name; returns the exit code.
  std::function<int(const std::vector<std::string>& args, const MpiRuntime& mpi)> run;
};

const std::vector<Command>& commands();
int run_cli(int argc, char** argv, const MpiRuntime& mpi);

}  // namespace mt
