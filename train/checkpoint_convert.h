// Checkpoints handled whole by one process, for `meshtrain convert` and `meshtrain sample`: read a
// checkpoint of any layout into full tensors, and write full tensors as the checkpoint some other
// layout would have written (each of its (tp, pp) shards in the file of the rank holding it).
// defines: FullState, read_full_state, write_checkpoint_for_layout
#pragma once

#include <filesystem>
#include <vector>

#include "checkpoint/manifest.h"
#include "models/gpt_config.h"
#include "parallel/mesh.h"
#include "train/parallel_trainer.h"

namespace mt {

// A whole model's state: each vector holds every parameter in gpt_parameter_specs order.
struct FullState {
  GptConfig config;
  std::vector<float> params;
  std::vector<float> adam_m, adam_v;  // empty: weights only
};

// Reads a complete checkpoint (step_dir as resolve_checkpoint gives it); with_optimizer also reads
// the moments when the checkpoint has them. Errors name the checkpoint.
FullState read_full_state(const std::filesystem::path& step_dir, bool with_optimizer);

// Writes `state` under `root` as step_{base.step}, cut as the ranks of `plan` hold it, and points
// `latest` at it, holding root's lock meanwhile (an Error naming the holder while a job holds it).
// `base` gives every manifest section but the layout and the tensors (from the source checkpoint,
// or made up for llm.c weights). Returns the step directory.
std::filesystem::path write_checkpoint_for_layout(const std::filesystem::path& root, const FullState& state,
                                                  const LayoutPlan& plan, ckpt::Manifest base);

}  // namespace mt
