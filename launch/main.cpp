// meshtrain's entry point: the command line, under the job-wide error guard.
#include "launch/cli.h"
#include "launch/guard.h"

int main(int argc, char** argv) { return mt::run_guarded(argc, argv, mt::run_cli); }
