// A whole save by five simulated ranks in one process (rows split two ways, ZeRO ranges over two
// data-parallel replicas, qkv boxes, a replicated tensor written once, a rank with nothing), read
// back exactly under other slicings; pruning, partial saves, and what a reader says when a shard
// file is corrupt or missing, a piece is missing or the manifest is newer; the save fault points.
#include "checkpoint/tensor_io.h"  // defines: RankWriter, CheckpointReader

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"  // defines: prepare_partial, assemble_manifest, commit_checkpoint
#include "runtime/error.h"
#include "tests/scratch_dir.h"          // defines: ScratchDir
#include "tests/test_helpers.h"         // defines: error_of, contains, read_text

namespace mt::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;
using testing::read_text;
using testing::ScratchDir;

constexpr int kWorld = 5;  // ranks 0-3: tp 2 x dp 2 (tp = rank % 2, dp = rank / 2); rank 4 holds nothing

const Shape kW{6, 8}, kQkv{12, 4}, kB{8};

// The value saved at global flat index g of a tensor: distinct per tensor, exact in fp32.
float value_of(const std::string& tensor, std::int64_t g) {
  const float base = tensor == "param/w"     ? 0.0f
                     : tensor == "adam_m/w"  ? 1000.0f
                     : tensor == "param/qkv" ? 2000.0f
                                             : 3000.0f;
  return base + static_cast<float>(g);
}

std::vector<float> values(const std::string& tensor, const Shape& shape, const Slice& slice) {
  std::vector<float> out;
  for (const Run& r : slice_runs(shape, slice)) {
    for (std::int64_t i = 0; i < r.count; ++i) out.push_back(value_of(tensor, r.global + i));
  }
  return out;
}

Slice boxes(std::vector<Box> b, std::int64_t begin = 0, std::int64_t end = -1) {
  Slice s{std::move(b), begin, end};
  if (end < 0) s.end = s.boxes_numel();
  return s;
}

// qkv rows split over `tp` ranks: rank r holds its rows of q, k and v (4 rows each).
Slice qkv_rows(int r, int tp) {
  const std::int64_t rows = 4 / tp;
  return boxes({Box{{rows * r, 0}, {rows, 4}}, Box{{4 + rows * r, 0}, {rows, 4}}, Box{{8 + rows * r, 0}, {rows, 4}}});
}

Manifest base(std::int64_t step) {
  Manifest m;
  m.step = step;
  m.model = {{"name", "tiny"}};
  m.layout = {{"tp", 2}, {"dp", 2}};
  m.data = {{"position", step * 64}};
  return m;
}

void add_pieces(RankWriter& writer, int rank) {
  if (rank >= 4) return;
  const int tp = rank % 2, dp = rank / 2;
  // w: rows [3 tp, 3 tp + 3), its 24 elements split between the two ZeRO owners.
  const Slice w = boxes({Box{{3 * tp, 0}, {3, 8}}}, 12 * dp, 12 * dp + 12);
  writer.add("param/w", kW, w, values("param/w", kW, w));
  writer.add("adam_m/w", kW, w, values("adam_m/w", kW, w));
  if (dp == 0) writer.add("param/qkv", kQkv, qkv_rows(tp, 2), values("param/qkv", kQkv, qkv_rows(tp, 2)));
  if (rank == 0) writer.add("param/b", kB, Slice::whole(kB), values("param/b", kB, Slice::whole(kB)));
}

// Every rank's half of the save of `step`, then rank 0's commit and `latest`.
fs::path save(const fs::path& root, std::int64_t step) {
  prepare_partial(root, step);
  for (int rank = 0; rank < kWorld; ++rank) {
    RankWriter writer(partial_dir(root, step), rank, step);
    add_pieces(writer, rank);
    writer.finish();
  }
  const fs::path dir = commit_checkpoint(root, assemble_manifest(partial_dir(root, step), kWorld, base(step)));
  set_latest(root, step);
  return dir;
}

void expect_reads(CheckpointReader& reader, const std::string& tensor, const Slice& slice) {
  const Shape shape = reader.shape(tensor);
  std::vector<float> out(static_cast<std::size_t>(slice.numel()), -1.0f);
  reader.read(tensor, slice, out);
  EXPECT_EQ(out, values(tensor, shape, slice)) << tensor;
}

TEST(TensorIo, SaveThenReadUnderOtherSlicings) {
  ScratchDir dir("tensor_io");
  const fs::path step_dir = save(dir / "ckpt", 4);
  CheckpointReader reader(resolve_checkpoint("latest", dir / "ckpt"));
  EXPECT_EQ(reader.dir(), step_dir);
  EXPECT_EQ(reader.manifest().step, 4);
  EXPECT_EQ(reader.manifest().data["position"], 256);
  EXPECT_EQ(reader.manifest().files.size(), 4u);  // rank 4 wrote no file
  EXPECT_TRUE(reader.has_tensor("param/qkv"));
  EXPECT_FALSE(reader.has_tensor("param/nope"));
  EXPECT_EQ(reader.shape("param/w"), kW);

  for (const char* tensor : {"param/w", "adam_m/w", "param/qkv", "param/b"}) {
    EXPECT_EQ(reader.read_whole(tensor), values(tensor, reader.shape(tensor), Slice::whole(reader.shape(tensor))));
  }
  // w split 3 ways by columns, then each column shard split over 2 ZeRO owners.
  for (std::int64_t c0 : {0, 3, 6}) {
    const std::int64_t width = std::min<std::int64_t>(3, 8 - c0);
    const Slice column = boxes({Box{{0, c0}, {6, width}}});
    expect_reads(reader, "param/w", column);
    expect_reads(reader, "adam_m/w", boxes(column.boxes, 0, 3 * width));
    expect_reads(reader, "adam_m/w", boxes(column.boxes, 3 * width, 6 * width));
  }
  // qkv under tp 4 with ZeRO ranges, and under tp 1.
  for (int r = 0; r < 4; ++r) {
    expect_reads(reader, "param/qkv", qkv_rows(r, 4));
    expect_reads(reader, "param/qkv", boxes(qkv_rows(r, 4).boxes, 2, 9));
  }
  expect_reads(reader, "param/qkv", qkv_rows(0, 1));
  expect_reads(reader, "param/b", boxes({Box{{5}, {3}}}));
}

TEST(TensorIo, RankWithNothingWritesOnlyItsSidecar) {
  ScratchDir dir("tensor_io");
  prepare_partial(dir.path(), 2);
  RankWriter writer(partial_dir(dir.path(), 2), 4, 2);
  const RankContribution c = writer.finish();
  EXPECT_EQ(c.rank, 4);
  EXPECT_FALSE(c.file.has_value());
  EXPECT_TRUE(c.pieces.empty());
  EXPECT_FALSE(fs::exists(partial_dir(dir.path(), 2) / "rank_00004.bin"));
  EXPECT_TRUE(fs::exists(partial_dir(dir.path(), 2) / "rank_00004.json"));
}

TEST(TensorIo, WriterContributionMatchesTheFile) {
  ScratchDir dir("tensor_io");
  prepare_partial(dir.path(), 2);
  RankWriter writer(partial_dir(dir.path(), 2), 0, 2);
  add_pieces(writer, 0);
  const RankContribution c = writer.finish();
  ASSERT_TRUE(c.file.has_value());
  EXPECT_EQ(c.file->name, "rank_00000.bin");
  EXPECT_EQ(c.file->bytes, 64 + 4 * (12 + 12 + 24 + 8));
  EXPECT_EQ(static_cast<std::int64_t>(fs::file_size(partial_dir(dir.path(), 2) / "rank_00000.bin")), c.file->bytes);
  EXPECT_EQ(c.tensors,
            (std::vector<TensorEntry>{{"param/w", kW}, {"adam_m/w", kW}, {"param/qkv", kQkv}, {"param/b", kB}}));
  ASSERT_EQ(c.pieces.size(), 4u);
  EXPECT_EQ(c.pieces[1].byte_offset, 64 + 4 * 12);
  EXPECT_EQ(c.pieces[3].byte_offset, 64 + 4 * 48);
}

TEST(TensorIo, AddChecksItsArguments) {
  ScratchDir dir("tensor_io");
  prepare_partial(dir.path(), 2);
  RankWriter writer(partial_dir(dir.path(), 2), 1, 2);
  const std::vector<float> three(3, 1.0f);
  EXPECT_EQ(error_of([&] { writer.add("param/b", kB, Slice::whole(kB), three); }),
            "rank 1: saving tensor param/b: 3 values given for a slice of 8");
  EXPECT_TRUE(contains(error_of([&] {
                         writer.add("param/b", kB, boxes({Box{{6}, {3}}}), three);
                       }),
                       "rank 1: saving tensor param/b: box 0"));
  writer.add("param/b", kB, boxes({Box{{0}, {3}}}), three);
  EXPECT_EQ(error_of([&] { writer.add("param/b", {3}, Slice::whole({3}), three); }),
            "rank 1: tensor param/b saved with two different shapes");
}

TEST(TensorIo, PruneKeepsTwoOfFourSaves) {
  ScratchDir dir("tensor_io");
  const fs::path root = dir / "ckpt";
  for (std::int64_t step : {2, 4, 6, 8}) {
    save(root, step);
    prune_checkpoints(root, 2);
  }
  EXPECT_EQ(list_checkpoints(root), (std::vector<std::int64_t>{6, 8}));
  CheckpointReader reader(resolve_checkpoint("latest", root));
  EXPECT_EQ(reader.manifest().step, 8);
  EXPECT_EQ(reader.read_whole("param/w"), values("param/w", kW, Slice::whole(kW)));
}

TEST(TensorIo, UnfinishedSaveIsNeverTaken) {
  ScratchDir dir("tensor_io");
  const fs::path root = dir / "ckpt";
  save(root, 8);
  prepare_partial(root, 10);
  for (int rank = 0; rank < 3; ++rank) {  // ranks 3 and 4 never got there
    RankWriter writer(partial_dir(root, 10), rank, 10);
    add_pieces(writer, rank);
    writer.finish();
  }
  EXPECT_EQ(list_checkpoints(root), (std::vector<std::int64_t>{8}));
  EXPECT_EQ(resolve_checkpoint("latest", root), root / "step_00000008");
  EXPECT_TRUE(contains(error_of([&] { assemble_manifest(partial_dir(root, 10), kWorld, base(10)); }),
                       "rank 3 wrote no rank_00003.json"));
}

TEST(TensorIo, CorruptShardIsNamedWhenNeeded) {
  ScratchDir dir("tensor_io");
  const fs::path step_dir = save(dir / "ckpt", 4);
  const fs::path shard = step_dir / "rank_00001.bin";
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x7f');
  }
  CheckpointReader reader(step_dir);
  EXPECT_EQ(reader.read_whole("param/b"), values("param/b", kB, Slice::whole(kB)));  // only in rank 0's file
  const std::string message = error_of([&] { reader.read_whole("param/w"); });
  EXPECT_TRUE(contains(message, "checksum mismatch in shard file " + shard.string())) << message;
  EXPECT_TRUE(contains(message, "the file is corrupt")) << message;
}

TEST(TensorIo, MissingShardIsNamed) {
  ScratchDir dir("tensor_io");
  const fs::path step_dir = save(dir / "ckpt", 4);
  fs::remove(step_dir / "rank_00002.bin");
  CheckpointReader reader(step_dir);
  EXPECT_TRUE(contains(error_of([&] { reader.read_whole("adam_m/w"); }),
                       "missing shard file " + (step_dir / "rank_00002.bin").string()));
}

TEST(TensorIo, ElementsNoPieceHoldsAreNamed) {
  ScratchDir dir("tensor_io");
  const fs::path step_dir = save(dir / "ckpt", 4);
  Manifest manifest = read_manifest(step_dir);
  std::erase_if(manifest.pieces,
                [](const PieceEntry& p) { return p.tensor == "param/w" && p.file == "rank_00003.bin"; });
  CheckpointReader reader(step_dir, manifest);
  // Rank 3 (tp 1, dp 1) held the second half of rows 3-5: from element [4, 4] on.
  EXPECT_EQ(error_of([&] { reader.read_whole("param/w"); }),
            "checkpoint " + step_dir.string() + ": tensor param/w [6, 8]: no source holds element [4, 4]");
  expect_reads(reader, "param/w", boxes({Box{{0, 0}, {5, 8}}}, 0, 36));  // up to [4, 3]
}

// Found with fuzz_manifest.cpp: read_whole allocated whatever size the manifest claimed (a tensor of
// 10^12 elements: 4 TB) before finding that no piece holds it or that its file is too short.
TEST(TensorIo, ClaimedSizeIsNotAllocatedBeforeItIsVerified) {
  ScratchDir dir("tensor_io");
  const fs::path step_dir = save(dir / "ckpt", 4);
  const std::int64_t huge = 1'000'000'000'000;
  Manifest manifest = read_manifest(step_dir);
  for (TensorEntry& t : manifest.tensors) {
    if (t.name == "param/b") t.shape = {huge};
  }
  {
    CheckpointReader reader(step_dir, manifest);
    EXPECT_EQ(error_of([&] { reader.read_whole("param/b"); }),
              "checkpoint " + step_dir.string() + ": tensor param/b [1000000000000]: no source holds element [8]");
  }
  // A piece that claims all of it, in a file that claims to be big enough: the file's real size says no.
  for (PieceEntry& p : manifest.pieces) {
    if (p.tensor == "param/b") p.slice = Slice::whole({huge});
  }
  for (FileEntry& f : manifest.files) {
    if (f.name == "rank_00000.bin") f.bytes = 64 + 4 * huge;
  }
  CheckpointReader reader(step_dir, manifest);
  EXPECT_TRUE(contains(error_of([&] { reader.read_whole("param/b"); }),
                       "shard file " + (step_dir / "rank_00000.bin").string() + " is "));
}

TEST(TensorIo, ReadChecksItsArguments) {
  ScratchDir dir("tensor_io");
  const fs::path step_dir = save(dir / "ckpt", 4);
  CheckpointReader reader(step_dir);
  std::vector<float> out(3);
  EXPECT_EQ(error_of([&] { reader.read("param/x", Slice::whole({3}), out); }),
            "checkpoint " + step_dir.string() + " has no tensor param/x");
  EXPECT_TRUE(contains(error_of([&] {
                         reader.read("param/b", boxes({Box{{6}, {3}}}), out);
                       }),
                       "checkpoint " + step_dir.string() + ": tensor param/b: the slice to read: box 0"));
  EXPECT_EQ(error_of([&] {
              reader.read("param/b", boxes({Box{{0}, {4}}}), out);
            }),
            "checkpoint " + step_dir.string() + ": reading param/b into room for 3 values, the slice has 4");
}

TEST(TensorIo, NewerManifestIsRefused) {
  ScratchDir dir("tensor_io");
  const fs::path step_dir = save(dir / "ckpt", 4);
  nlohmann::json doc = nlohmann::json::parse(read_text(step_dir / "manifest.json"));
  doc["format_version"] = 2;
  std::ofstream(step_dir / "manifest.json") << doc.dump();
  EXPECT_EQ(
      error_of([&] { CheckpointReader reader(step_dir); }),
      (step_dir / "manifest.json").string() + ": written by a newer meshtrain: format 2, this build reads format 1");
}

TEST(TensorIo, ShardFaultLeavesHalfAFileAndNoSidecar) {
  ScratchDir dir("tensor_io");
  prepare_partial(dir.path(), 4);
  const fs::path partial = partial_dir(dir.path(), 4);
  EXPECT_EXIT(
      {
        RankWriter writer(partial, 1, 4, SaveFault{"shard", std::nullopt, 1});
        add_pieces(writer, 1);
        writer.finish();
      },
      ::testing::ExitedWithCode(75), "rank 1 crashes at 'shard' of the save of step 4");
  EXPECT_EQ(fs::file_size(partial / "rank_00001.bin"), (64u + 4 * 48) / 2);
  EXPECT_FALSE(fs::exists(partial / "rank_00001.json"));
}

TEST(TensorIo, SidecarFaultLeavesTheFileWithoutSidecar) {
  ScratchDir dir("tensor_io");
  prepare_partial(dir.path(), 4);
  const fs::path partial = partial_dir(dir.path(), 4);
  EXPECT_EXIT(
      {
        RankWriter writer(partial, 0, 4, SaveFault{"sidecar", 4, 0});
        add_pieces(writer, 0);
        writer.finish();
      },
      ::testing::ExitedWithCode(75), "rank 0 crashes at 'sidecar' of the save of step 4");
  EXPECT_EQ(fs::file_size(partial / "rank_00000.bin"), 64u + 4 * 56);
  EXPECT_FALSE(fs::exists(partial / "rank_00000.json"));
  // Another step or rank: no fault.
  RankWriter other(partial, 0, 6, SaveFault{"sidecar", 4, 0});
  add_pieces(other, 0);
  other.finish();
  EXPECT_TRUE(fs::exists(partial / "rank_00000.json"));
}

}  // namespace
}  // namespace mt::ckpt
