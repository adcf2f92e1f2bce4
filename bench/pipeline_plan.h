// What `meshbench pipeline` was asked to run: the options, read once, and the configurations they
// make (one schedule each), with the bubble formula every row is read against.
// defines: PipelineRunSettings, PipelineOptions, PipelineConfig, theory_bubble
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/pipeline_stage.h"
#include "parallel/schedule.h"

namespace mt {

// What every configuration shares: the synthetic stage's cost and how many steps are timed.
struct PipelineRunSettings {
  double forward_s = 0;  // one micro-batch through the whole stage
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

}  // namespace mt
