// meshbench: measurements, not tests. Each subcommand prints a table with the command's settings
// and, with --json FILE, appends one JSON line per row (what `meshtrain plan --calibrate` reads).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/coll_bench.h"
#include "bench/context_bench.h"
#include "bench/overlap_bench.h"
#include "bench/pipeline_bench.h"
#include "bench/scaling_bench.h"
#include "bench/train_bench.h"
#include "launch/guard.h"
#include "runtime/openmp_policy.h"

namespace {

struct BenchCommand {
  const char* name;
  const char* summary;
  // Under MPI (run_guarded), or a plain process: scaling launches mpirun itself.
  int (*with_mpi)(const std::vector<std::string>&, const mt::MpiRuntime&);
  int (*plain)(const std::vector<std::string>&);
};

const BenchCommand kCommands[] = {
    {"coll", "collectives over a size sweep: time, algorithm and bus bandwidth, ours next to raw MPI/NCCL",
     mt::coll_bench, nullptr},
    {"context", "context parallelism at one long sequence: tokens/s, exposed communication and peak memory per "
                "rank for each --cp",
     mt::context_bench, nullptr},
    {"overlap", "a data-parallel backward with bucketed gradient reduction: compute, communication, serial, "
                "overlapped; --zero 3: the ZeRO-3 gather wait with and without prefetch",
     mt::overlap_bench, nullptr},
    {"pipeline", "measured pipeline bubble of GPipe, 1F1B and interleaved 1F1B next to the theory",
     mt::pipeline_bench, nullptr},
    {"scaling", "strong and weak scaling of `meshtrain train` over rank counts and layouts (CSV, PNG)", nullptr,
     mt::scaling_bench},
    {"train", "single-rank training tokens/s and MFU next to the sgemm rate", nullptr, mt::train_bench},
};

void print_usage() {
  std::printf("meshbench: the measurements behind docs/PERFORMANCE.md.\n\n"
              "usage: mpirun -np N meshbench COMMAND [options]\n       meshbench COMMAND --help\n\ncommands:\n");
  for (const BenchCommand& c : kCommands) std::printf("  %-9s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  mt::prefer_passive_openmp(argv);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  for (const BenchCommand& c : kCommands) {
    if (args[0] != c.name) continue;
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (c.plain != nullptr) {
      try {
        return c.plain(rest);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "meshbench: error: %s\n", e.what());
        return 1;
      }
    }
    return mt::run_guarded(argc, argv,
                           [&](int, char**, const mt::MpiRuntime& mpi) { return c.with_mpi(rest, mpi); }, "meshbench");
  }
  std::fprintf(stderr, "meshbench: unknown command '%s' (see: meshbench --help)\n", args[0].c_str());
  return 2;
}
