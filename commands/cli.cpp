#include "commands/cli.h"

#include <cstdio>
#include <iostream>

#include "commands/convert_command.h"
#include "commands/devices_command.h"
#include "commands/plan_command.h"
#include "commands/plot_command.h"
#include "commands/prepare_command.h"
#include "commands/sample_command.h"
#include "commands/train_command.h"

namespace mt {
namespace {

void print_usage() {
  std::cout << "meshtrain: 3D-parallel training on MPI ranks, on GPUs or on CPU only.\n\n"
               "usage: mpirun -np N meshtrain COMMAND [options]\n"
               "       meshtrain COMMAND --help\n\ncommands:\n";
  for (const Command& c : commands()) std::printf("  %-10s %s\n", c.name.c_str(), c.summary.c_str());
  std::cout << std::flush;
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> all = {
      {"devices", "show every rank's host, device, memory and cap, threads and communication backend",
       devices_command},
      {"prepare", "tokenize text files into llm.c train/validation token shards", prepare_command},
      {"train", "train a GPT on token shards (AdamW, accumulation, clipping, schedule)", train_command},
      {"sample", "generate text from trained weights", sample_command},
      {"convert", "turn a checkpoint into llm.c weights and back, or into another layout's shards", convert_command},
      {"plot", "draw loss and throughput curves of runs' metrics files into a PNG", plot_command},
      {"plan", "predict memory and step time of every layout of a model on a cluster; rank the best", plan_command},
  };
  return all;
}

int run_cli(int argc, char** argv, const MpiRuntime& mpi) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (mpi.world_rank() == 0) print_usage();
    return args.empty() ? 2 : 0;
  }
  for (const Command& c : commands()) {
    if (c.name == args[0]) return c.run(std::vector<std::string>(args.begin() + 1, args.end()), mpi);
  }
  throw UsageError("unknown command '" + args[0] + "' (see: meshtrain --help)");
}

}  // namespace mt
