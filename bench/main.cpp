// meshbench: measurements, not tests. Each subcommand prints a table with the command's settings.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/train_bench.h"
#include "runtime/openmp_policy.h"

int main(int argc, char** argv) {
  mt::prefer_passive_openmp(argv);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("usage: meshbench COMMAND [options]\n\ncommands:\n  train   single-rank training tokens/s and MFU "
                "next to the sgemm rate\n");
    return args.empty() ? 2 : 0;
  }
  try {
    if (args[0] == "train") return mt::train_bench({args.begin() + 1, args.end()});
    std::fprintf(stderr, "meshbench: unknown command '%s' (see: meshbench --help)\n", args[0].c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshbench: %s\n", e.what());
    return 1;
  }
}
