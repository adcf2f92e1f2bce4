// `meshbench overlap --zero 3`: how much of ZeRO-3's parameter gathering the prefetch hides. A
// whole GPT on every rank, its parameters sharded over dp = world (zero/unit_shards.h); a step
// is forward and backward, each unit's parameters all-gathered before each use and its gradients
// reduce-scattered after backward. The same steps run twice: prefetch off (every gather waits at
// the unit's first use) and on (the next units' gathers run while the current one computes).
// The exposed gather wait is the host time the uses waited for gathers (UnitShardStats).
// defines: GatherRun, Zero3Overlap, measure_zero3_overlap
#pragma once

#include <cstdint>
#include <span>

#include "bench/step_timer.h"
#include "comm/communicator.h"
#include "models/gpt_config.h"
#include "runtime/context.h"

namespace mt {

// One way of running the steps: the slowest rank's step times, and per step the slowest rank's
// gather wait and this rank's gathers and prefetches.
struct GatherRun {
  StepTimes step;
  double gather_wait_s = 0;
  double gathers = 0, prefetched = 0;
};

struct Zero3Overlap {
  GatherRun off, on;  // prefetch off, on
  int units = 0;
  double param_bytes = 0;  // the full parameters one rank gathers per use of every unit (fp32)
  // The share of the gather wait that prefetching hides: 1 - wait(on) / wait(off).
  double hidden_fraction() const { return off.gather_wait_s > 0 ? 1.0 - on.gather_wait_s / off.gather_wait_s : 0.0; }
};

// Collective over `world`. inputs, targets: B x T tokens, the same on every rank (the timing does
// not depend on them). Each way gets one untimed step that learns the order of uses, `warmup`
// more untimed, then `steps` timed.
Zero3Overlap measure_zero3_overlap(DeviceContext& ctx, Communicator& world, const GptConfig& config,
                                   std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int B,
                                   int T, int warmup, int steps);

}  // namespace mt
