// What `meshbench pipeline` was asked to run: the options, read once, and the configurations they
// make (one schedule each), with the bubble formula every row is read against.
// defines: PipelineRunSettings, PipelineOptions, PipelineConfig, theory_bubble, zb_h1_theory_bubble, unit_costs
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/pipeline_stage.h"
#include "parallel/schedule.h"

namespace mt {

// What every configuration shares: the synthetic stage's cost and how many steps are timed.
struct PipelineRunSettings {
  double forward_s = 0;  // one micro-batch through the whole stage
  double weight_share = 0.5;  // W's part of the backward (2 forward_s) in the zero-bubble schedules
  std::int64_t activation_bytes = 0;
  int steps = 0, warmup = 0;
};

struct PipelineOptions {
  std::vector<int> stages, micros, virtuals;
  std::vector<std::string> kinds;  // schedule names
  PipelineRunSettings run;
  StageWork work = StageWork::Sleep;
  bool overlap = true;
  std::string json;
};

// One row of the tables: p stages running one schedule.
struct PipelineConfig {
  int stages;
  Schedule schedule;
  int v() const { return schedule.virtual_stages; }
  int m() const { return schedule.micro_batches; }
  std::string name() const { return schedule_kind_name(schedule.kind); }
};

// The bubble of p stages, m micro-batches and v chunks per stage: the idle time (p-1)(t_f+t_b)/v
// over the step m(t_f+t_b) + (p-1)(t_f+t_b)/v. v = 1 is GPipe's and 1F1B's (p-1)/(m+p-1).
inline double theory_bubble(int p, int m, int v) {
  const double idle = static_cast<double>(p - 1) / v;
  return idle / (m + idle);
}

// ZB-H1's (Qi et al.): the idle time (p-1)(F+B-W) over m(F+B+W) of work plus that, with a stage's
// costs F, B, W (the formula holds for W <= F + B; below 0 it is 0).
inline double zb_h1_theory_bubble(int p, int m, const ComputeCosts& c) {
  const double idle = (p - 1) * std::max(0.0, c.forward + c.backward_input - c.backward_weight);
  return idle / (m * (c.forward + c.backward_input + c.backward_weight) + idle);
}

// The stage's costs in units of its forward: F = 1, B + W = 2 split by the W share; per chunk 1/v of that.
inline ComputeCosts unit_costs(double weight_share, int v) {
  return {1.0 / v, 2.0 * (1 - weight_share) / v, 2.0 * weight_share / v};
}

}  // namespace mt
