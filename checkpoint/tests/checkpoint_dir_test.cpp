// The checkpoint directory protocol: names, sidecars assembled into a manifest, the commit and
// `latest`, listing and pruning, what --resume resolves to (and its errors), one line of checkpoints
// per directory (a fresh run refused, newer steps set aside), and fault injection.
#include "checkpoint/checkpoint_dir.h"  // defines: prepare_partial, write_sidecar, assemble_manifest

#include <gtest/gtest.h>
#include <stdlib.h>  // defines: setenv, unsetenv

#include <chrono>
#include <csignal>  // defines: SIGKILL
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/scratch_dir.h"   // defines: ScratchDir
#include "tests/test_helpers.h"  // defines: error_of, contains, read_text

namespace mt::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;
using testing::read_text;
using testing::ScratchDir;

void touch(const fs::path& path) { std::ofstream(path) << "x"; }

// Sets MESHTRAIN_FAULT_SAVE for one test.
class FaultVariable {
 public:
  explicit FaultVariable(const char* value) { ::setenv("MESHTRAIN_FAULT_SAVE", value, 1); }
  FaultVariable(const FaultVariable&) = delete;
  FaultVariable& operator=(const FaultVariable&) = delete;
  ~FaultVariable() { ::unsetenv("MESHTRAIN_FAULT_SAVE"); }
};

// Rank r of `world` holds rows [2r, 2r + 2) of "param/w" [2 * world, 3]; the last rank also
// "param/b" [3]; rank `empty` holds nothing. Sidecars only: no shard files are needed here.
RankContribution contribution(int rank, int world, int empty = -1) {
  RankContribution c;
  c.rank = rank;
  if (rank == empty) return c;
  const Shape w{2 * world, 3};
  c.file = FileEntry{shard_file_name(rank), rank, 64 + 4 * 9, 0x1000u + static_cast<unsigned>(rank)};
  c.tensors.push_back({"param/w", w});
  c.pieces.push_back({"param/w", Slice{{Box{{2 * rank, 0}, {2, 3}}}, 0, 6}, shard_file_name(rank), 64});
  if (rank == world - 1) {
    c.tensors.push_back({"param/b", {3}});
    c.pieces.push_back({"param/b", Slice::whole({3}), shard_file_name(rank), 64 + 4 * 6});
  }
  return c;
}

Manifest base(std::int64_t step) {
  Manifest m;
  m.step = step;
  m.model = {{"n_layer", 1}};
  m.layout = {{"tp", 3}};
  return m;
}

// A complete save of `step` by `world` ranks (sidecars only), committed; returns its directory.
fs::path save(const fs::path& root, std::int64_t step, int world = 2) {
  prepare_partial(root, step);
  for (int r = 0; r < world; ++r) write_sidecar(partial_dir(root, step), contribution(r, world));
  return commit_checkpoint(root, assemble_manifest(partial_dir(root, step), world, base(step)));
}

TEST(CheckpointNames, AreZeroPadded) {
  EXPECT_EQ(step_dir_name(100), "step_00000100");
  EXPECT_EQ(step_dir_name(123456789), "step_123456789");
  EXPECT_EQ(partial_dir("ckpt", 200), fs::path("ckpt/.step_00000200.partial"));
  EXPECT_EQ(shard_file_name(3), "rank_00003.bin");
  EXPECT_EQ(sidecar_name(3), "rank_00003.json");
}

TEST(CheckpointDir, PreparePartialStartsEmpty) {
  ScratchDir dir("ckpt");
  const fs::path root = dir / "runs" / "a";
  prepare_partial(root, 4);
  ASSERT_TRUE(fs::is_directory(partial_dir(root, 4)));
  touch(partial_dir(root, 4) / "rank_00000.bin");  // what a dead save left
  prepare_partial(root, 4);
  EXPECT_TRUE(fs::is_empty(partial_dir(root, 4)));
}

TEST(CheckpointDir, AssemblesTheSidecars) {
  ScratchDir dir("ckpt");
  prepare_partial(dir.path(), 6);
  const fs::path partial = partial_dir(dir.path(), 6);
  for (int r = 0; r < 3; ++r) write_sidecar(partial, contribution(r, 3, /*empty=*/1));
  EXPECT_TRUE(fs::exists(partial / "rank_00001.json"));
  EXPECT_FALSE(fs::exists(partial / "rank_00001.json.tmp"));

  const Manifest m = assemble_manifest(partial, 3, base(6));
  EXPECT_EQ(m.step, 6);
  EXPECT_EQ(m.model, base(6).model);
  EXPECT_EQ(m.layout, base(6).layout);
  EXPECT_EQ(m.tensors, (std::vector<TensorEntry>{{"param/b", {3}}, {"param/w", {6, 3}}}));
  EXPECT_EQ(m.files, (std::vector<FileEntry>{*contribution(0, 3).file, *contribution(2, 3).file}));
  ASSERT_EQ(m.pieces.size(), 3u);
  EXPECT_EQ(m.pieces[0], contribution(0, 3).pieces[0]);
  EXPECT_EQ(m.pieces[1], contribution(2, 3).pieces[0]);
  EXPECT_EQ(m.pieces[2], contribution(2, 3).pieces[1]);
}

TEST(CheckpointDir, AssembleNamesAMissingSidecar) {
  ScratchDir dir("ckpt");
  prepare_partial(dir.path(), 6);
  const fs::path partial = partial_dir(dir.path(), 6);
  write_sidecar(partial, contribution(0, 3));
  write_sidecar(partial, contribution(2, 3));
  EXPECT_EQ(
      error_of([&] { assemble_manifest(partial, 3, base(6)); }),
      "checkpoint " + partial.string() + ": rank 1 wrote no rank_00001.json (it did not finish its part of the save)");
}

TEST(CheckpointDir, AssembleNamesAShapeConflict) {
  ScratchDir dir("ckpt");
  prepare_partial(dir.path(), 6);
  const fs::path partial = partial_dir(dir.path(), 6);
  write_sidecar(partial, contribution(0, 2));
  write_sidecar(partial, contribution(1, 3));  // believes param/w is [6, 3]
  EXPECT_TRUE(contains(error_of([&] { assemble_manifest(partial, 2, base(6)); }),
                       "ranks 0 and 1 give tensor param/w different shapes"));
}

TEST(CheckpointDir, AssembleNamesAnUnreadableSidecar) {
  ScratchDir dir("ckpt");
  prepare_partial(dir.path(), 6);
  const fs::path partial = partial_dir(dir.path(), 6);
  std::ofstream(partial / "rank_00000.json") << "{\"format\": \"meshtrain-checkpoint\"";
  EXPECT_TRUE(contains(error_of([&] { assemble_manifest(partial, 1, base(6)); }),
                       (partial / "rank_00000.json").string() + ": not valid JSON"));
}

TEST(CheckpointDir, CommitRenamesThePartialDirectory) {
  ScratchDir dir("ckpt");
  const fs::path step_dir = save(dir.path(), 8);
  EXPECT_EQ(step_dir, dir / "step_00000008");
  EXPECT_FALSE(fs::exists(partial_dir(dir.path(), 8)));
  EXPECT_TRUE(fs::exists(step_dir / "manifest.json"));
  EXPECT_FALSE(fs::exists(step_dir / "manifest.json.tmp"));
  EXPECT_FALSE(fs::exists(step_dir / "rank_00000.json"));
  EXPECT_FALSE(fs::exists(step_dir / "rank_00001.json"));
  const Manifest m = read_manifest(step_dir);
  EXPECT_EQ(m.step, 8);
  EXPECT_EQ(m.pieces.size(), 3u);
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<std::int64_t>{8}));
}

TEST(CheckpointDir, CommitReplacesAnOlderRunsStep) {
  ScratchDir dir("ckpt");
  touch(save(dir.path(), 8) / "from_the_first_run");
  const fs::path step_dir = save(dir.path(), 8, 3);
  EXPECT_FALSE(fs::exists(step_dir / "from_the_first_run"));
  EXPECT_EQ(read_manifest(step_dir).files.size(), 3u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(CheckpointDir, LatestNamesTheStep) {
  ScratchDir dir("ckpt");
  set_latest(dir.path(), 8);
  EXPECT_EQ(read_text(dir / "latest"), "step_00000008\n");
  set_latest(dir.path(), 12);
  EXPECT_EQ(read_text(dir / "latest"), "step_00000012\n");
  EXPECT_FALSE(fs::exists(dir / "latest.tmp"));
}

TEST(CheckpointDir, ListsOnlyCompleteCheckpoints) {
  ScratchDir dir("ckpt");
  EXPECT_TRUE(list_checkpoints(dir / "nothing_here").empty());
  save(dir.path(), 12);
  save(dir.path(), 4);
  prepare_partial(dir.path(), 16);
  touch(partial_dir(dir.path(), 16) / "manifest.json");  // complete inside, but never renamed
  fs::create_directory(dir / "step_00000020");           // no manifest.json
  fs::create_directory(dir / "step_24");                 // not a name this layer writes
  touch(dir / "step_00000028");                          // a file
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<std::int64_t>{4, 12}));
}

TEST(CheckpointDir, PruneKeepsTheNewestAndLatest) {
  ScratchDir dir("ckpt");
  for (std::int64_t step : {2, 4, 6, 8}) save(dir.path(), step);
  set_latest(dir.path(), 8);
  prepare_partial(dir.path(), 3);   // a dead save older than the newest checkpoint
  prepare_partial(dir.path(), 10);  // a save in progress
  EXPECT_TRUE(prune_checkpoints(dir.path(), 0).empty());
  EXPECT_EQ(prune_checkpoints(dir.path(), 2), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<std::int64_t>{6, 8}));
  EXPECT_FALSE(fs::exists(dir / "step_00000002"));
  EXPECT_FALSE(fs::exists(partial_dir(dir.path(), 3)));
  EXPECT_TRUE(fs::exists(partial_dir(dir.path(), 10)));

  // Resumed from step 6 by hand and `latest` moved back: it survives however few are kept.
  set_latest(dir.path(), 6);
  EXPECT_EQ(prune_checkpoints(dir.path(), 1), (std::vector<std::int64_t>{}));
  save(dir.path(), 10);
  EXPECT_EQ(prune_checkpoints(dir.path(), 1), (std::vector<std::int64_t>{8}));
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<std::int64_t>{6, 10}));
}

TEST(CheckpointDir, PruneRemovesWhatKilledProcessesLeft) {
  ScratchDir dir("ckpt");
  for (std::int64_t step : {2, 4, 6}) save(dir.path(), step);
  set_latest(dir.path(), 6);
  // A prune killed inside remove_all: step 2 has lost its manifest and one shard.
  fs::remove(dir / "step_00000002" / "manifest.json");
  // A commit re-saving step 4, killed after renaming the new one in, before removing the old one.
  fs::create_directory(dir / ".step_00000004.old");
  touch(dir / ".step_00000004.old" / "manifest.json");
  // One re-saving step 8, killed between moving the old one aside and renaming: not `latest`'s.
  fs::create_directory(dir / ".step_00000008.old");
  touch(dir / ".step_00000008.old" / "manifest.json");
  EXPECT_TRUE(prune_checkpoints(dir.path(), 0).empty());
  EXPECT_FALSE(fs::exists(dir / "step_00000002"));
  EXPECT_FALSE(fs::exists(dir / ".step_00000004.old"));
  EXPECT_FALSE(fs::exists(dir / ".step_00000008.old"));
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<std::int64_t>{4, 6}));
}

// A save that failed (a full disk, a killed process) of a step newer than any checkpoint: prune
// keeps it (it might be a save in progress); at the start of a run holding the lock it goes.
TEST(CheckpointDir, RemovePartialSavesTakesEveryPartialDirectoryAndNothingElse) {
  ScratchDir dir("ckpt");
  save(dir.path(), 4);
  set_latest(dir.path(), 4);
  for (std::int64_t step : {2, 6, 99}) {
    prepare_partial(dir.path(), step);
    touch(partial_dir(dir.path(), step) / shard_file_name(0));
  }
  EXPECT_TRUE(prune_checkpoints(dir.path(), 0).empty());
  EXPECT_TRUE(fs::exists(partial_dir(dir.path(), 6)));  // what prune leaves
  fs::create_directory(dir / ".step_00000004.old");
  touch(dir / ".lock");
  touch(dir / "notes.partial");
  EXPECT_EQ(remove_partial_saves(dir.path()), (std::vector<std::int64_t>{6, 99}));
  EXPECT_FALSE(fs::exists(partial_dir(dir.path(), 6)));
  EXPECT_FALSE(fs::exists(partial_dir(dir.path(), 99)));
  for (const char* kept : {"step_00000004", "latest", ".step_00000004.old", ".lock", "notes.partial"})
    EXPECT_TRUE(fs::exists(dir / kept)) << kept;
  EXPECT_TRUE(remove_partial_saves(dir.path()).empty());
  EXPECT_TRUE(remove_partial_saves(dir / "missing").empty());
}

TEST(SaveFault, PruneFaultLeavesAnUnlistedDirectoryTheNextPruneRemoves) {
  ScratchDir dir("ckpt");
  for (std::int64_t step : {2, 4, 6}) save(dir.path(), step);
  set_latest(dir.path(), 6);
  const SaveFault fault{"prune", 6, 0, true};
  EXPECT_EXIT(prune_checkpoints(dir.path(), 2, fault), ::testing::KilledBySignal(SIGKILL),
              "rank 0 is killed \\(SIGKILL\\) at 'prune' of the save of step 6");
  EXPECT_TRUE(fs::is_directory(dir / "step_00000002"));
  EXPECT_FALSE(fs::exists(dir / "step_00000002" / "manifest.json"));
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<std::int64_t>{4, 6}));
  EXPECT_TRUE(prune_checkpoints(dir.path(), 2).empty());
  EXPECT_FALSE(fs::exists(dir / "step_00000002"));
}

TEST(ResolveCheckpoint, LatestWhoseReplacementWasKilledHalfWay) {
  ScratchDir dir("ckpt");
  save(dir.path(), 4);
  set_latest(dir.path(), 4);
  // Re-saving step 4: the old one moved aside, the process killed before the new one was renamed in.
  fs::rename(dir / "step_00000004", dir / ".step_00000004.old");
  prepare_partial(dir.path(), 4);
  EXPECT_EQ(resolve_checkpoint("latest", dir.path()), dir / ".step_00000004.old");
  EXPECT_TRUE(prune_checkpoints(dir.path(), 0).empty());  // `latest` still needs it
  EXPECT_TRUE(fs::exists(dir / ".step_00000004.old" / "manifest.json"));
  save(dir.path(), 4);  // the resumed run saves step 4 again, and the aside goes
  EXPECT_FALSE(fs::exists(dir / ".step_00000004.old"));
  EXPECT_EQ(resolve_checkpoint("latest", dir.path()), dir / "step_00000004");
}

TEST(ResolveCheckpoint, LatestOfTheCheckpointDir) {
  ScratchDir dir("ckpt");
  save(dir.path(), 4);
  save(dir.path(), 6);
  set_latest(dir.path(), 4);
  EXPECT_EQ(resolve_checkpoint("latest", dir.path()), dir / "step_00000004");
  EXPECT_EQ(resolve_checkpoint("", dir.path()), dir / "step_00000004");
  EXPECT_EQ(resolve_checkpoint((dir / "step_00000006").string(), ""), dir / "step_00000006");
  EXPECT_EQ(resolve_checkpoint(dir.path().string(), "elsewhere"), dir / "step_00000004");
}

TEST(ResolveCheckpoint, ErrorsSayWhatIsMissing) {
  ScratchDir dir("ckpt");
  const std::string root = dir.path().string();
  EXPECT_EQ(error_of([] { resolve_checkpoint("latest", ""); }), "--resume latest needs --checkpoint-dir");
  EXPECT_EQ(error_of([&] { resolve_checkpoint("latest", dir.path()); }),
            "--resume: " + root + " has no checkpoint yet (no " + root + "/latest)");
  EXPECT_EQ(error_of([&] { resolve_checkpoint("", dir / "never_created"); }),
            "--resume: " + root + "/never_created has no checkpoint yet (no " + root + "/never_created/latest)");
  EXPECT_EQ(error_of([&] { resolve_checkpoint(root + "/step_00000009", ""); }),
            "--resume: " + root + "/step_00000009 does not exist");

  prepare_partial(dir.path(), 6);
  const std::string partial = partial_dir(dir.path(), 6).string();
  EXPECT_EQ(error_of([&] { resolve_checkpoint(partial, ""); }),
            "--resume: " + partial + " is not a complete checkpoint (no manifest.json: a save that did not finish)");
  EXPECT_EQ(
      error_of([&] { resolve_checkpoint(root, ""); }),
      "--resume: " + root + " has no checkpoint yet (no " + root + "/latest) and is not one itself (no manifest.json)");

  set_latest(dir.path(), 6);  // names a step that was never committed
  EXPECT_EQ(error_of([&] { resolve_checkpoint("latest", dir.path()); }),
            "--resume: " + root + "/latest names " + root +
                "/step_00000006, which is not a complete checkpoint (no manifest.json)");
  std::ofstream(dir / "latest") << "garbage\n";
  EXPECT_EQ(error_of([&] { resolve_checkpoint("latest", dir.path()); }),
            "--resume: " + root + "/latest does not name a step_N directory");
  touch(dir / "a_file");
  EXPECT_TRUE(contains(error_of([&] { resolve_checkpoint(root + "/a_file", ""); }), "is not a directory"));
}

// sample --weights and convert --from take checkpoints too: their errors name their own option.
TEST(ResolveCheckpoint, ErrorsNameTheOptionThePathCameWith) {
  ScratchDir dir("ckpt");
  const std::string root = dir.path().string();
  EXPECT_EQ(error_of([&] { resolve_checkpoint(root, "", "--weights"); }),
            "--weights: " + root + " has no checkpoint yet (no " + root + "/latest) and is not one itself (no manifest.json)");
  EXPECT_EQ(error_of([&] { resolve_checkpoint(root + "/gone", "", "--from"); }), "--from: " + root + "/gone does not exist");
  try {
    resolve_checkpoint(root, "", "--from");
  } catch (const UsageError&) {  // said as the user's mistake: one line, no source place
    return;
  }
  ADD_FAILURE() << "not a UsageError";
}

// One line of checkpoints per directory (plan_run_start, apply_run_start).
TEST(RunStart, AFreshRunInAnEmptyOrMissingDirectoryGoesAhead) {
  ScratchDir dir("ckpt");
  const RunStart start = plan_run_start(dir / "new", std::nullopt, false);
  EXPECT_TRUE(start.resume_dir.empty());
  EXPECT_TRUE(start.newer_steps.empty() && start.overwritten_steps.empty());
  prepare_partial(dir.path(), 4);  // debris alone is no earlier run
  EXPECT_TRUE(plan_run_start(dir.path(), std::nullopt, false).overwritten_steps.empty());
  EXPECT_TRUE(apply_run_start(dir.path(), start, "20261127T000000Z").empty());
}

TEST(RunStart, AFreshRunIntoAnEarlierRunsCheckpointsIsRefused) {
  ScratchDir dir("ckpt");
  for (std::int64_t step : {50, 100, 110}) save(dir.path(), step);
  set_latest(dir.path(), 110);
  const std::string root = dir.path().string();
  EXPECT_EQ(error_of([&] { plan_run_start(dir.path(), std::nullopt, false); }),
            "--checkpoint-dir " + root + " already holds the checkpoints of an earlier run (step_00000050 to " +
                "step_00000110 (3 checkpoints)): continue that run with --resume, start this one in another " +
                "--checkpoint-dir, or add --overwrite-checkpoints to delete them");
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<std::int64_t>{50, 100, 110}));
}

TEST(RunStart, OverwriteDeletesTheEarlierRunOnlyWhenApplied) {
  ScratchDir dir("ckpt");
  for (std::int64_t step : {50, 100}) save(dir.path(), step);
  set_latest(dir.path(), 100);
  fs::create_directory(dir / ".step_00000100.old");
  touch(dir / ".step_00000100.old" / "manifest.json");
  const RunStart start = plan_run_start(dir.path(), std::nullopt, true);
  EXPECT_EQ(start.overwritten_steps, (std::vector<std::int64_t>{50, 100}));
  EXPECT_EQ(list_checkpoints(dir.path()).size(), 2u);  // planning touches nothing
  const std::vector<std::string> lines = apply_run_start(dir.path(), start, "20261127T000000Z");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "--overwrite-checkpoints: deleted the earlier run's checkpoints in " + dir.path().string() +
                          " (step_00000050 to step_00000100 (2 checkpoints))");
  EXPECT_TRUE(list_checkpoints(dir.path()).empty());
  EXPECT_FALSE(fs::exists(dir / "latest"));
  EXPECT_FALSE(fs::exists(dir / ".step_00000100.old"));
}

TEST(RunStart, ResumingTheNewestStepChangesNothing) {
  ScratchDir dir("ckpt");
  for (std::int64_t step : {50, 100}) save(dir.path(), step);
  set_latest(dir.path(), 100);
  const RunStart start = plan_run_start(dir.path(), "latest", false);
  EXPECT_EQ(start.resume_dir, dir / "step_00000100");
  EXPECT_EQ(start.resumed_step, 100);
  EXPECT_TRUE(start.newer_steps.empty());
  EXPECT_TRUE(apply_run_start(dir.path(), start, "20261127T000000Z").empty());
  EXPECT_EQ(read_text(dir / "latest"), "step_00000100\n");
}

TEST(RunStart, ResumingAnOlderStepSetsTheNewerOnesAside) {
  ScratchDir dir("ckpt");
  for (std::int64_t step : {30, 50, 100, 110}) save(dir.path(), step);
  set_latest(dir.path(), 110);
  // Given with a trailing slash, as a shell's completion writes it.
  const RunStart start = plan_run_start(dir.path(), (dir / "step_00000050").string() + "/", false);
  EXPECT_EQ(start.resumed_step, 50);
  EXPECT_EQ(start.newer_steps, (std::vector<std::int64_t>{100, 110}));
  EXPECT_EQ(list_checkpoints(dir.path()).size(), 4u);  // planning touches nothing

  const std::vector<std::string> lines = apply_run_start(dir.path(), start, "20261127T213000Z");
  const fs::path aside = dir / "set_aside" / "20261127T213000Z_after_step_00000050";
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "resuming step_00000050 of " + dir.path().string() + ", which held newer checkpoints of a run " +
                          "that went further (step_00000100 to step_00000110 (2 checkpoints)): moved to " +
                          aside.string() + ", a checkpoint directory of its own (--checkpoint-dir " + aside.string() +
                          " --resume continues that run); `latest` names step_00000050");
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<std::int64_t>{30, 50}));
  EXPECT_EQ(read_text(dir / "latest"), "step_00000050\n");
  EXPECT_EQ(list_checkpoints(aside), (std::vector<std::int64_t>{100, 110}));
  EXPECT_EQ(resolve_checkpoint("latest", aside), aside / "step_00000110");

  // --keep now prunes this line alone: the set-aside steps are not among its candidates.
  save(dir.path(), 60);
  set_latest(dir.path(), 60);
  EXPECT_EQ(prune_checkpoints(dir.path(), 1), (std::vector<std::int64_t>{30, 50}));
  EXPECT_EQ(list_checkpoints(aside), (std::vector<std::int64_t>{100, 110}));

  // A second set-aside in the same second gets a folder of its own.
  save(dir.path(), 70);
  const RunStart again = plan_run_start(dir.path(), (dir / "step_00000060").string(), false);
  apply_run_start(dir.path(), again, "20261127T213000Z");
  EXPECT_EQ(list_checkpoints(dir / "set_aside" / "20261127T213000Z_after_step_00000060"),
            (std::vector<std::int64_t>{70}));
}

TEST(RunStart, ResumingFromElsewhereIntoAnEarlierRunsCheckpointsIsRefused) {
  ScratchDir dir("ckpt");
  save(dir / "other", 40);
  save(dir / "mine", 80);
  set_latest(dir / "mine", 80);
  const std::string other = (dir / "other" / "step_00000040").string();
  EXPECT_EQ(error_of([&] { plan_run_start(dir / "mine", other, false); }),
            "--checkpoint-dir " + (dir / "mine").string() + " holds the checkpoints of another run (step_00000080), " +
                "and --resume takes " + other + " from outside it: continue the directory's own run with --resume " +
                "alone, save into another --checkpoint-dir, or add --overwrite-checkpoints to delete its checkpoints");
  EXPECT_EQ(plan_run_start(dir / "mine", other, true).overwritten_steps, (std::vector<std::int64_t>{80}));
  EXPECT_EQ(plan_run_start(dir / "empty", other, false).resume_dir, other);  // a new directory: a new line
}

// --resume auto, for a job script that is requeued: the latest where there is one, else a fresh start.
TEST(RunStart, AutoResumesTheLatestWhereThereIsOne) {
  ScratchDir dir("ckpt");
  EXPECT_TRUE(plan_run_start(dir.path(), "auto", false).resume_dir.empty());
  save(dir.path(), 8);
  EXPECT_TRUE(contains(error_of([&] { plan_run_start(dir.path(), "auto", false); }), "already holds the checkpoints"));
  set_latest(dir.path(), 8);
  EXPECT_EQ(plan_run_start(dir.path(), "auto", false).resume_dir, dir / "step_00000008");
}

TEST(RunStart, OverwritingTheCheckpointBeingResumedIsRefused) {
  ScratchDir dir("ckpt");
  save(dir.path(), 8);
  set_latest(dir.path(), 8);
  EXPECT_EQ(error_of([&] { plan_run_start(dir.path(), "latest", true); }),
            "--overwrite-checkpoints would delete " + (dir / "step_00000008").string() +
                ", the checkpoint --resume continues from: give one of the two");
}

TEST(ReadManifest, NamesTheFile) {
  ScratchDir dir("ckpt");
  EXPECT_EQ(error_of([&] { read_manifest(dir.path()); }),
            "checkpoint " + dir.path().string() + " has no manifest.json (not a complete checkpoint)");
  std::ofstream(dir / "manifest.json") << "[]";
  EXPECT_TRUE(contains(error_of([&] { read_manifest(dir.path()); }), (dir / "manifest.json").string() + ": "));
}

TEST(SaveFault, FiresAtItsPointStepAndRank) {
  const SaveFault any_step{"shard", std::nullopt, 1};
  EXPECT_TRUE(any_step.fires("shard", 4, 1));
  EXPECT_TRUE(any_step.fires("shard", 8, 1));
  EXPECT_FALSE(any_step.fires("shard", 4, 0));
  EXPECT_FALSE(any_step.fires("sidecar", 4, 1));
  const SaveFault at_step{"latest", 8, 0};
  EXPECT_TRUE(at_step.fires("latest", 8, 0));
  EXPECT_FALSE(at_step.fires("latest", 4, 0));
}

TEST(SaveFault, ParsesTheVariable) {
  ::unsetenv("MESHTRAIN_FAULT_SAVE");
  EXPECT_EQ(save_fault_from_env(), std::nullopt);
  auto parse = [](const char* value) {
    const FaultVariable set(value);
    const std::optional<SaveFault> fault = save_fault_from_env();
    EXPECT_TRUE(fault.has_value());
    return fault.value_or(SaveFault{});
  };
  SaveFault f = parse("shard");
  EXPECT_EQ(f.point, "shard");
  EXPECT_EQ(f.step, std::nullopt);
  EXPECT_EQ(f.rank, 0);
  f = parse("latest:8@3");
  EXPECT_EQ(f.point, "latest");
  EXPECT_EQ(f.step, 8);
  EXPECT_EQ(f.rank, 3);
  f = parse("rename@2");
  EXPECT_EQ(f.point, "rename");
  EXPECT_EQ(f.step, std::nullopt);
  EXPECT_EQ(f.rank, 2);
  f = parse("sidecar:4");
  EXPECT_EQ(f.step, 4);
  EXPECT_FALSE(f.kill);
  EXPECT_EQ(parse("manifest").point, "manifest");
}

TEST(SaveFault, ParsesTheKillMode) {
  auto parse = [](const char* value) {
    const FaultVariable set(value);
    return save_fault_from_env().value_or(SaveFault{});
  };
  SaveFault f = parse("kill-shard:4@1");
  EXPECT_EQ(f.point, "shard");
  EXPECT_EQ(f.step, 4);
  EXPECT_EQ(f.rank, 1);
  EXPECT_TRUE(f.kill);
  EXPECT_TRUE(f.fires("shard", 4, 1));  // the same point as the _Exit mode: RankWriter cuts the file first
  f = parse("kill-latest");
  EXPECT_EQ(f.point, "latest");
  EXPECT_EQ(f.step, std::nullopt);
  EXPECT_EQ(f.rank, 0);
  EXPECT_TRUE(f.kill);
  auto message = [](const char* value) {
    const FaultVariable set(value);
    return error_of([] { save_fault_from_env(); });
  };
  EXPECT_TRUE(contains(message("kill-"), "MESHTRAIN_FAULT_SAVE='kill-': unknown point ''"));
  EXPECT_TRUE(contains(message("kill-kill-shard"), "unknown point 'kill-shard'"));
  EXPECT_TRUE(contains(message("crash-shard"), "unknown point 'crash-shard' (expected [kill-|full-|pause-]POINT[:STEP][@RANK]"));
}

// pause-: a slow file system, so that a test can signal a job in the middle of a save (parsed here;
// stop_test.sh signals a job during one).
TEST(SaveFault, PauseModeSleepsAndGoesOn) {
  const FaultVariable set("pause-manifest@2");
  const SaveFault f = save_fault_from_env().value();
  EXPECT_EQ(f.point, "manifest");
  EXPECT_EQ(f.rank, 2);
  EXPECT_TRUE(f.pause && !f.kill && !f.full);
  EXPECT_TRUE(f.fires("manifest", 6, 2));
  const auto start = std::chrono::steady_clock::now();
  maybe_crash(f, "manifest", 6, 1);  // another rank: nothing (the pause itself: commands/tests/stop_test.sh)
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(SaveFault, FullModeThrowsAsAFullDiskWould) {
  const FaultVariable set("full-manifest:6");
  const std::optional<SaveFault> fault = save_fault_from_env();
  ASSERT_TRUE(fault);
  EXPECT_EQ(fault->point, "manifest");
  EXPECT_EQ(fault->step, 6);
  EXPECT_TRUE(fault->full);
  EXPECT_FALSE(fault->kill);
  maybe_crash(fault, "manifest", 4, 0);
  const std::string error = error_of([&] { maybe_crash(fault, "manifest", 6, 0); });
  EXPECT_TRUE(contains(error, "cannot write the checkpoint of step 6 at 'manifest': No space left on device "
                              "(injected fault: MESHTRAIN_FAULT_SAVE)")) << error;
  const FaultVariable both("kill-full-shard");
  EXPECT_TRUE(contains(error_of([] { save_fault_from_env(); }), "unknown point 'full-shard'"));
}

TEST(SaveFault, MalformedValuesAreNamed) {
  auto message = [](const char* value) {
    const FaultVariable set(value);
    return error_of([] { save_fault_from_env(); });
  };
  EXPECT_TRUE(
      contains(message("boom"), "MESHTRAIN_FAULT_SAVE='boom': unknown point 'boom' (expected [kill-|full-|pause-]POINT[:STEP][@RANK]"));
  EXPECT_TRUE(contains(message("shard:x"), "MESHTRAIN_FAULT_SAVE='shard:x': step 'x' is not a number"));
  EXPECT_TRUE(contains(message("shard@"), "rank '' is not a number"));
  EXPECT_TRUE(contains(message("shard:-1"), "step '-1' is not a number"));
}

TEST(SaveFault, MaybeCrashEndsTheProcessOnlyWhereItFires) {
  const std::optional<SaveFault> fault = SaveFault{"shard", 4, 1};
  maybe_crash(std::nullopt, "shard", 4, 1);
  maybe_crash(fault, "shard", 4, 0);
  maybe_crash(fault, "sidecar", 4, 1);
  EXPECT_EXIT(maybe_crash(fault, "shard", 4, 1), ::testing::ExitedWithCode(75),
              "meshtrain: injected fault: rank 1 crashes at 'shard' of the save of step 4 \\(MESHTRAIN_FAULT_SAVE\\)");
}

TEST(SaveFault, KillModeRaisesSigkill) {
  const std::optional<SaveFault> fault = SaveFault{"latest", 8, 2, true};
  maybe_crash(fault, "latest", 4, 2);
  maybe_crash(fault, "rename", 8, 2);
  EXPECT_EXIT(maybe_crash(fault, "latest", 8, 2), ::testing::KilledBySignal(SIGKILL),
              "rank 2 is killed \\(SIGKILL\\) at 'latest' of the save of step 8");
}

TEST(SaveFault, RenameFaultLeavesOnlyAPartialDirectory) {
  ScratchDir dir("ckpt");
  prepare_partial(dir.path(), 4);
  for (int r = 0; r < 2; ++r) write_sidecar(partial_dir(dir.path(), 4), contribution(r, 2));
  const Manifest m = assemble_manifest(partial_dir(dir.path(), 4), 2, base(4));
  const SaveFault fault{"rename", 4, 0};
  EXPECT_EXIT(commit_checkpoint(dir.path(), m, fault), ::testing::ExitedWithCode(75),
              "crashes at 'rename' of the save of step 4");
  EXPECT_TRUE(fs::exists(partial_dir(dir.path(), 4) / "manifest.json"));
  EXPECT_FALSE(fs::exists(dir / "step_00000004"));
  EXPECT_TRUE(list_checkpoints(dir.path()).empty());
  EXPECT_TRUE(contains(error_of([&] { resolve_checkpoint(partial_dir(dir.path(), 4).string(), ""); }),
                       "a save that did not finish"));
}

}  // namespace
}  // namespace mt::ckpt
