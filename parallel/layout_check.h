// Validation of a requested parallel layout (mesh, schedule, stage split) against the job and the
// model, before anything is built: each problem is one mt::Error naming the options, their values
// and a fix, which the CLI prints once as a usage error.
// The checks LayoutPlan runs (parallel/layout_plan.h).
// defines: LayoutLimits, check_layout, schedule_runs, micro_batches_per_step, check_pipeline_backend
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm_capabilities.h"
#include "parallel/layout_plan.h"
#include "parallel/schedule_kind.h"

namespace mt {

// What the job and the model allow.
struct LayoutLimits {
  int world_size = 1;
  int layers = 1;
  int heads = 1;
  int mlp_width = 4;   // 4 x channels
  int vocab_rows = 1;  // the padded vocabulary
  int global_batch = 1;  // sequences per optimizer step, whole job
  int micro_batch = 1;   // sequences per forward pass
};

// Throws mt::Error with one message for the first problem found; returns when the layout is valid.
void check_layout(const LayoutRequest& request, const LayoutLimits& limits);

// Whether `schedule` runs `micro_batches` per step on `pp` stages: gpipe any number, 1F1B and the
// zero-bubble schedules at least pp, interleaved a multiple of pp (check_layout refuses the rest).
bool schedule_runs(ScheduleKind schedule, int pp, std::int64_t micro_batches);

// global_batch / (dp x micro_batch): the micro-batches each pipeline runs per step.
int micro_batches_per_step(const LayoutRequest& request, const LayoutLimits& limits);

// What the communication backend allows: a pipeline (pp > 1) sends each run of messages between
// two computations as one batch (parallel/pipeline_executor.h), so every schedule needs
// CommCapabilities::grouped_point_to_point (neighbours send to each other in the same batch).
// `backend` (Communicator::backend_name()) only names the backend in the message.
void check_pipeline_backend(int pp, const CommCapabilities& caps, const std::string& backend);

}  // namespace mt
