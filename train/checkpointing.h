// Checkpoints of a ParallelTrainer: what goes in, who writes which piece, and how any layout reads
// it back (checkpoint/ is the format and the atomic protocol; this file decides the content).
//
// Tensors, in global shapes (the whole model's, whatever the layout): "param/NAME" for every
// parameter of gpt_parameter_specs, and AdamW's moments "adam_m/NAME" and "adam_v/NAME".
// Who writes: each rank its owned pieces of each gradient bucket (ZeRO-1's ownership, used with
// zero 0 too, so the data-parallel replicas share the writing instead of all writing the same),
// of the parameters it holds the primary copy of (ParallelTrainer::is_primary_copy). Every element
// is written exactly once. A piece's slice is its tensor-parallel shard as boxes of the global
// tensor, cut to the piece's element range.
// Manifest sections: model (the GptConfig), layout, training (optimizer steps, batch, the
// learning-rate schedule with its decay horizon), data (sequences consumed, the loader's
// fingerprint), rng (the seed: training draws no random numbers after initialization, and the data
// order is a pure function of seed and position).
// defines: RunIdentity, SaveResult, ResumeReport, ResumeOptions, ClaimedDir, claim_checkpoint_dir, settle_checkpoint_dir,
//          save_checkpoint, load_checkpoint,
//          lr_schedule_json, resumed_lr_schedule, gpt_config_json, gpt_config_from_json,
//          required_json_int, layout_json, describe_saved_layout, shard_slice, param_tensor, adam_m_tensor, adam_v_tensor
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/dir_lock.h"
#include "checkpoint/slices.h"
#include "models/gpt_sharding.h"
#include "train/parallel_trainer.h"

namespace mt {

inline std::string param_tensor(const std::string& name) { return "param/" + name; }
inline std::string adam_m_tensor(const std::string& name) { return "adam_m/" + name; }
inline std::string adam_v_tensor(const std::string& name) { return "adam_v/" + name; }

nlohmann::json gpt_config_json(const GptConfig& config);
// Error (starting with `where`) for a missing or invalid field.
GptConfig gpt_config_from_json(const nlohmann::json& json, const std::string& where);
// json[key] as an int: an mt::Error naming `where` when it is missing, not an integer, or beyond int.
int required_json_int(const nlohmann::json& json, const char* key, const std::string& where);

// Elements [begin, end) of a tensor-parallel shard (in its local element order) as a slice of the
// full tensor: one box per block along the split dimension, or one box of everything.
ckpt::Slice shard_slice(const ParamShard& shard, std::int64_t begin, std::int64_t end);

// The manifest's record of a learning-rate schedule (training.lr): {"kind", "max_lr", "warmup_steps",
// "decay_steps", "min_lr_fraction"}; decay_steps is the horizon, the step the decay reaches its floor.
nlohmann::json lr_schedule_json(const LrSchedule& schedule);

// The schedule a run resumed at `step` follows, from the checkpoint's "training" section and the
// options' schedule `requested`. The decay horizon is the checkpoint's unless `horizon_given`
// (--lr-decay-steps set requested.total_steps): a --steps raised on resume then trains on at the
// schedule's floor instead of stretching the decay under the run (the learning rate would jump up).
// Checkpoints older than training.lr keep their training.total_steps, which was the horizon then.
// Appends to `notes` one line naming both horizons when they differ, one when the checkpoint records
// none (the requested horizon is used: today's behaviour), and one when kind, peak, warmup or floor
// changed. Error (starting with `where`) for a malformed record or a warmup beyond the kept horizon.
LrSchedule resumed_lr_schedule(const nlohmann::json& training, int step, const LrSchedule& requested,
                               bool horizon_given, std::vector<std::string>& notes, const std::string& where);

// The manifest's "layout" section for a layout of `config` (dp, tp, cp, pp, order, world size,
// schedule, stages, ZeRO, buckets). Only described for the user on resume: a checkpoint is full
// tensors' slices, read back on any layout.
nlohmann::json layout_json(const LayoutPlan& plan);
// "dp 2 x tp 2 x pp 2, 1f1b, zero 1 on 8 rank(s)" (" x cp 2" after tp where cp > 1) of a manifest's
// layout section; one without "cp" (written before context parallelism) had cp 1.
std::string describe_saved_layout(const nlohmann::json& layout);

// What the command line knows of a run that the trainer does not, recorded for the user.
struct RunIdentity {
  std::uint64_t seed = 0;
  std::string data_dir;
  std::string tokenizer;
};

// A run's hold on its checkpoint directory, and what it will do there (checkpoint_dir.h's RunStart).
struct ClaimedDir {
  std::unique_ptr<ckpt::CheckpointDirLock> lock;  // rank 0's, kept for the whole run; null elsewhere
  ckpt::RunStart start;                           // resume_dir on every rank; the rest on rank 0
};

// At the start of a run, before anything is written: rank 0 takes ROOT's lock for the run
// (checkpoint/dir_lock.h), removes the partial saves a failed run left (remove_partial_saves) and
// plans the run's start there (plan_run_start: refuses a second line of checkpoints). The checkpoint
// `resume` names is resolved once, by rank 0, and handed to every rank. Collective over `world`: when
// rank 0 cannot (another job holds the lock, a fresh run into a directory of checkpoints, a bad
// --resume), every rank throws the same JobError with rank 0's message. Without --checkpoint-dir
// (`root` empty) there is no lock, and every rank resolves `resume` itself.
ClaimedDir claim_checkpoint_dir(Communicator& world, DeviceContext& ctx, const std::filesystem::path& root,
                                const std::optional<std::string>& resume, bool overwrite);

// Once the run holds its weights: rank 0 carries out the claim's plan (apply_run_start: sets newer
// steps aside, or deletes overwritten ones). Collective; returns the lines to show the user (rank 0's).
std::vector<std::string> settle_checkpoint_dir(Communicator& world, DeviceContext& ctx,
                                               const std::filesystem::path& root, const ckpt::RunStart& start);

struct SaveResult {
  std::filesystem::path dir;          // ROOT/step_N
  std::int64_t bytes = 0;             // shard bytes written by all ranks
  std::vector<std::int64_t> pruned;   // steps removed by --keep
  double seconds = 0.0;
};

// Saves the trainer's state after its steps_done() steps as ROOT/step_N (checkpoint_dir.h's
// protocol), keeping the newest `keep` checkpoints (0: all). Collective over the trainer's world;
// any rank's failure is every rank's JobError, and leaves the previous checkpoint in force; rank 0
// then removes the partial directory (a save that failed for a full disk must not keep its shards).
// MESHTRAIN_FAULT_SAVE crashes or SIGKILLs a chosen rank at a chosen point (tests; checkpoint_dir.h).
SaveResult save_checkpoint(ParallelTrainer& trainer, const std::filesystem::path& root, int keep,
                           const RunIdentity& run);

struct ResumeReport {
  std::filesystem::path dir;
  int step = 0;
  std::int64_t sequences = 0;
  bool optimizer_state = true;  // false: a checkpoint of weights only (AdamW starts fresh)
  std::string saved_layout;     // describe_saved_layout: "dp 2 x tp 2 x pp 2, 1f1b, zero 1 on 8 rank(s)"
  std::vector<std::string> notes;  // differences the user should know of (data, batch, lr schedule)
};

// What the command line decided about a resume that the trainer's settings do not say.
struct ResumeOptions {
  bool lr_decay_steps_given = false;  // --lr-decay-steps: its horizon replaces the checkpoint's
};

// Loads a checkpoint written on any layout into the trainer (its own layout), by global slices:
// parameters, AdamW's moments and step count, the progress (steps, data position) and the learning
// rate's decay horizon (resumed_lr_schedule, set into the trainer). The
// model's shape must match. Collective; every error (another model shape, a missing or corrupt
// shard, a newer format) is one JobError on every rank, and nothing is written.
ResumeReport load_checkpoint(ParallelTrainer& trainer, const std::filesystem::path& step_dir,
                             const ResumeOptions& options = {});

}  // namespace mt
