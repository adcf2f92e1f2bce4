// OpenMP threads that sleep when idle. libgomp's default lets idle threads spin for a while; with
// several ranks (or other work) per core, the spinning threads take the cores from the ones with
// work: a tiny training step went from 60 ms to 1.8 s on a busy 2-core machine. The policy is read
// from the environment when libgomp loads, before main(), so it can only be set by re-executing.
// defines: prefer_passive_openmp
#pragma once

namespace mt {

// Unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (the user's choice wins), sets
// OMP_WAIT_POLICY=passive and re-executes this program with the same arguments. Call first thing
// in main(), before MPI or any thread starts. Returns (without re-executing) when nothing is to do
// or the re-execution fails.
void prefer_passive_openmp(char** argv);

}  // namespace mt
