// The measured matrix-multiply rate of a device: the ceiling model FLOPs utilization is taken
// against on the CPU (OpenBLAS sgemm at the context's thread count).
// defines: measure_gemm_flops
#pragma once

#include "runtime/context.h"

namespace mt {

// FLOP/s of fp32 square GEMMs of size n, timed for about `seconds` after one warm-up call.
double measure_gemm_flops(DeviceContext& ctx, int n = 1024, double seconds = 0.5);

}  // namespace mt
