// meshtrain's entry point: the command line, under the job-wide error guard.
#include "commands/cli.h"
#include "launch/guard.h"
#include "runtime/openmp_policy.h"

int main(int argc, char** argv) {
  mt::prefer_passive_openmp(argv);
  return mt::run_guarded(argc, argv, mt::run_cli);
}
