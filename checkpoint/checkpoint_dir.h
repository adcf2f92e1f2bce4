// A checkpoint directory on disk and the protocol that keeps it consistent:
//
//   ROOT/step_00000100/manifest.json, rank_00000.bin, ...   complete checkpoints
//   ROOT/.step_00000200.partial/                          a save in progress (or one that died)
//   ROOT/latest                                           "step_00000100\n": the newest complete one
//   ROOT/.lock                                            held by the one job saving here (dir_lock.h)
//
// A save: rank 0 prepares the partial directory; every rank writes its shard file and a sidecar
// (rank_NNNNN.json: its file entry, tensors and pieces) into it and fsyncs both; once all have
// (the caller agrees over the job), rank 0 assembles the manifest from the sidecars, writes it
// (temporary name, fsync, rename), fsyncs the directory, renames it to step_N, fsyncs ROOT, then
// moves `latest` the same way. A crash at any point leaves either the previous `latest` in force
// or the new one complete: a directory without manifest.json is never taken for a checkpoint.
// defines: step_dir_name, partial_dir, shard_file_name, sidecar_name, prepare_partial,
//          write_sidecar, assemble_manifest, commit_checkpoint, set_latest, list_checkpoints,
//          prune_checkpoints, remove_partial_saves, resolve_checkpoint, read_manifest, RunStart,
//          plan_run_start, apply_run_start, kSetAsideDir, SaveFault, save_fault_from_env
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"

namespace mt::ckpt {

std::string step_dir_name(std::int64_t step);                                     // "step_00000100"
std::filesystem::path partial_dir(const std::filesystem::path& root, std::int64_t step);  // ROOT/.step_00000100.partial
std::string shard_file_name(int rank);                                            // "rank_00003.bin"
std::string sidecar_name(int rank);                                               // "rank_00003.json"

// Fault injection for tests: MESHTRAIN_FAULT_SAVE=[kill-|full-|pause-]POINT[:STEP][@RANK] makes that
// rank (default 0) end abruptly at POINT of the save of STEP (default: every save): std::_Exit(75)
// (no cleanup, as a crash), or with the "kill-" prefix a real SIGKILL, so the launcher sees a
// process killed by a signal (as the OOM killer or a node failure would). With the "full-" prefix
// the process lives on and the save fails there with an Error as a full disk would (ENOSPC), so
// the job's agreed error path runs. With the "pause-" prefix it sleeps kFaultPauseSeconds there, as
// a slow file system would, and goes on: time for a test to signal the job in the middle of a save.
// Points, in save order:
// "shard" (its shard file half written), "sidecar" (shard done, sidecar not written), "manifest"
// (rank 0: every rank done, manifest not written), "rename" (manifest written, directory not
// renamed), "latest" (renamed, `latest` not moved), "prune" (`latest` moved; an old checkpoint
// being removed has lost its manifest, not yet its files; fires only when --keep removes one).
inline constexpr int kFaultPauseSeconds = 5;
struct SaveFault {
  std::string point;
  std::optional<std::int64_t> step;
  int rank = 0;
  bool kill = false;   // raise(SIGKILL) instead of _Exit(75)
  bool full = false;   // throw "No space left on device" instead of ending
  bool pause = false;  // sleep kFaultPauseSeconds, then go on
  // True when this rank must die (or fail, or pause) at `here` during the save of `step`.
  bool fires(const std::string& here, std::int64_t save_step, int my_rank) const;
};
// Parses the variable; nullopt when unset. Error naming the variable for a malformed value or an
// unknown point.
std::optional<SaveFault> save_fault_from_env();
// Ends the process as a crash would when `fault` fires here (prints one line to stderr first), or
// for a "full-" fault throws the Error a full disk would; never returns then. A "pause-" fault
// prints its line, sleeps, and returns.
void maybe_crash(const std::optional<SaveFault>& fault, const std::string& here, std::int64_t save_step, int my_rank);

// Rank 0, before any rank writes: creates ROOT (and parents) and an empty partial directory for
// `step`, removing whatever a dead save left there. Error naming the directory when it cannot.
void prepare_partial(const std::filesystem::path& root, std::int64_t step);

// What one rank wrote: its file (none when it holds nothing to save) and its pieces.
struct RankContribution {
  int rank = 0;
  std::optional<FileEntry> file;
  std::vector<TensorEntry> tensors;  // the shapes of the tensors its pieces belong to
  std::vector<PieceEntry> pieces;
};
// Every rank: writes its sidecar into the partial directory (temporary name, fsync, rename).
void write_sidecar(const std::filesystem::path& partial, const RankContribution& contribution);

// Rank 0, after every rank has written its sidecar: the manifest from `base` (step, model, layout,
// training, data, rng) plus the tensors, files and pieces of the sidecars of ranks 0..world_size-1.
// Error when a sidecar is missing or unreadable, or two ranks give one tensor different shapes.
Manifest assemble_manifest(const std::filesystem::path& partial, int world_size, const Manifest& base);

// Rank 0: writes manifest.json into the partial directory, removes the sidecars, and renames the
// directory to ROOT/step_N (an existing step_N, from a run that went further before, is moved aside
// first and removed after), with the fsyncs above. Returns ROOT/step_N. `fault`: its "rename" point
// fires between the manifest and the rename.
std::filesystem::path commit_checkpoint(const std::filesystem::path& root, const Manifest& manifest,
                                        const std::optional<SaveFault>& fault = std::nullopt);

// Rank 0: points ROOT/latest at step_N (temporary file, fsync, rename, fsync ROOT).
void set_latest(const std::filesystem::path& root, std::int64_t step);

// Steps of the complete checkpoints under ROOT (a step_N directory holding manifest.json), ascending.
std::vector<std::int64_t> list_checkpoints(const std::filesystem::path& root);

// Rank 0: removes complete checkpoints beyond the newest `keep` (keep <= 0: none removed), never the
// one `latest` names, and what killed processes left: partial directories and step_N directories
// without a manifest below the newest complete step, and .step_N.old once step_N is complete or
// `latest` names another step.
// Returns the steps of the complete checkpoints removed. `fault`: its "prune" point fires (with
// the newest complete step as the save's step) in the middle of removing the first one.
std::vector<std::int64_t> prune_checkpoints(const std::filesystem::path& root, int keep,
                                            const std::optional<SaveFault>& fault = std::nullopt);

// Rank 0, at the start of a run holding the directory's lock (dir_lock.h), so that no other job can
// be writing them: removes every .step_N.partial directory under ROOT (saves that failed: a full
// disk, a killed process), whatever its step. Returns their steps, ascending.
std::vector<std::int64_t> remove_partial_saves(const std::filesystem::path& root);

// The checkpoint a --resume value names: "latest" (or "") -> the directory ROOT/latest names (ROOT
// is `root`, the --checkpoint-dir; its .step_N.old when a commit replacing step_N died half-way);
// a path to a step_N directory -> itself; a path to a checkpoint root (holding `latest`) -> its
// latest. Errors: no --checkpoint-dir for "latest"; ROOT has no
// `latest` (nothing saved yet); the path does not exist; the directory has no manifest.json (a
// save that never finished, named as such). Every error is a UsageError naming `option`, the option
// the user gave the path with (--resume, sample's --weights, convert's --from).
std::filesystem::path resolve_checkpoint(const std::string& spec, const std::filesystem::path& root,
                                         const std::string& option = "--resume");

// Reads and parses DIR/manifest.json (Manifest::parse, errors naming the file).
Manifest read_manifest(const std::filesystem::path& step_dir);

// ROOT holds one line of checkpoints: a run and its resumptions, so that `latest` is that line's
// newest and --keep prunes only its steps. A run that would start a second line there is refused or
// moves the other aside, before anything is written:
// - a fresh run (no --resume) in a ROOT holding checkpoints is refused, naming the newest and the ways
//   on (--resume, another directory, --overwrite-checkpoints, which deletes them);
// - a resume of a step of ROOT older than its newest continues from there: the newer steps (of the
//   run that went further) move to ROOT/set_aside/<UTC time>_after_step_N/, itself a checkpoint
//   directory (with its own `latest`), so `--checkpoint-dir THERE --resume` continues that run;
// - a resume of a checkpoint from elsewhere is a fresh line for ROOT: refused as above when ROOT
//   holds checkpoints.
inline constexpr const char* kSetAsideDir = "set_aside";

struct RunStart {
  std::filesystem::path resume_dir;             // the checkpoint to load (resolve_checkpoint); empty: none
  std::optional<std::int64_t> resumed_step;     // its step, when it is one of ROOT's
  std::vector<std::int64_t> newer_steps;        // ROOT's steps beyond it: to be set aside
  std::vector<std::int64_t> overwritten_steps;  // --overwrite-checkpoints: ROOT's steps, to be deleted
};

// Rank 0, holding ROOT's lock: what a run given `resume` (the --resume value, if any: "auto" is
// "latest" where ROOT has a `latest`, else a fresh start) and `overwrite` does with ROOT. Touches nothing. UsageError for a second line refused as above, for
// --overwrite-checkpoints with a resume of ROOT's own checkpoint, and resolve_checkpoint's errors.
RunStart plan_run_start(const std::filesystem::path& root, const std::optional<std::string>& resume, bool overwrite);

// Rank 0, once the run has loaded its checkpoint: sets the newer steps aside (moving `latest` back to
// the resumed step) or deletes the overwritten ones. Returns a line for the user per change (none
// when there was nothing to do). `utc_time`: the set-aside folder's time stamp, "20261127T213000Z".
std::vector<std::string> apply_run_start(const std::filesystem::path& root, const RunStart& start,
                                         const std::string& utc_time);

}  // namespace mt::ckpt
