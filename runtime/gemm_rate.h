// The measured matrix-multiply rate of a device: the ceiling model FLOPs utilization is taken
// against on the CPU (OpenBLAS sgemm at the context's thread count).
// defines: measure_gemm_flops, best_rate
#pragma once

#include <functional>

#include "runtime/context.h"

namespace mt {

// FLOP/s of fp32 square GEMMs of size n: after one warm-up call, the fastest of up to `max_trials`
// calls timed one by one, stopping once they have taken `budget_s` seconds (but after at least two).
// The fastest, not the mean: a load burst from another process slows some calls, never speeds one
// up, and one slow window once measured a fifth of the usual rate (MFU then read 334%).
// At the defaults on a CPU of about 100 GFLOP/s: about 0.2 s.
double measure_gemm_flops(DeviceContext& ctx, int n = 1024, double budget_s = 0.2, int max_trials = 8);

// The best rate of trials doing `flops` each: calls trial() (which returns the seconds it took) up
// to max_trials times, stopping once their seconds add up to budget_s and at least min_trials ran.
// Trials that report no time (below the clock's resolution) are skipped. 0 when none reported any.
double best_rate(double flops, const std::function<double()>& trial, int max_trials, double budget_s,
                 int min_trials = 2);

}  // namespace mt
