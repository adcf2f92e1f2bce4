// Running `meshbench pipeline`'s configurations on the real PipelineExecutor over the synthetic
// stage (bench/pipeline_stage.h), and what each run measured, gathered from every rank.
// defines: PipelineProbes, PipelineResult, measure_probes, run_configs
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/bench_session.h"
#include "bench/pipeline_plan.h"
#include "bench/pipeline_stage.h"

namespace mt {

// What the rows are read against, measured once before the configurations.
struct PipelineProbes {
  double gemm_call_s = 0;  // one sgemm call of the gemm work, mean over ranks
  double one_way_s = 0;    // one message rank 0 -> 1
};

// One configuration's measurement, the same on every rank.
struct PipelineResult {
  double step_s = 0, step_min_s = 1e30;   // slowest rank's, mean and best over the timed steps
  double ideal_s = 0;                     // mean over ranks of their compute time
  double wait_s = 0;                      // mean over ranks of time blocked on receives
  double other_s = 0;                     // mean over ranks of their own step - compute - waits
  double forward_call_s = 0, backward_call_s = 0;  // measured, one (chunk, micro-batch), mean over ranks
  double weight_call_s = 0;  // W's part of backward_call_s: measured (zero-bubble), else the configured share
  int held_peak = 0;                      // slots the runner held at once, most over ranks
  std::vector<double> rank_step_s, rank_compute_s, rank_wait_s;  // rank_step_s: its own, not the slowest
  double bubble = 0, theory = 0, simulated = 0, model_step_s = 0;  // theory: zb-v's is its simulated
  int peak_in_flight = 0;
  double ratio() const { return theory > 0 ? bubble / theory : std::nan(""); }  // measured / theory
};

// Collective: the gemm call's time (mean over ranks) and one message of `activation_bytes` from
// world rank 0 to 1.
PipelineProbes measure_probes(BenchSession& s, const TimedWork& work, std::int64_t activation_bytes);

// Collective: every config in turn (consecutive configs with the same stage count share one
// pipeline group and executor); a result per config, in order.
std::vector<PipelineResult> run_configs(const std::vector<PipelineConfig>& configs, BenchSession& s,
                                        TimedWork& work, const PipelineOptions& o);

}  // namespace mt
