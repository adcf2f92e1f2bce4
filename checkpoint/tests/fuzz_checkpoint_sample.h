// A small but varied checkpoint for the checkpoint fuzzers (fuzz_manifest, fuzz_shard_file), written
// by the real save path (RankWriter, assemble_manifest, commit_checkpoint, set_latest) for two
// ranks: row-split, column-split, multi-box and ZeRO-range pieces, a replicated tensor, a scalar.
// Deterministic, so the seeds and each fuzzer's own copy have the same bytes and checksums.
// Also the start every checkpoint fuzzer shares: seeds from one copy, inputs written over another.
// defines: write_sample_checkpoint, read_bytes, start_sample_fuzzer
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"  // defines: prepare_partial, assemble_manifest, commit_checkpoint, set_latest
#include "checkpoint/tensor_io.h"       // defines: RankWriter
#include "tests/fuzz_support.h"         // defines: fuzz_dir, handle_write_seeds

namespace mt::ckpt::fuzz {

inline constexpr std::int64_t kSampleStep = 7;

// Writes the checkpoint under `root`; returns its step directory.
inline std::filesystem::path write_sample_checkpoint(const std::filesystem::path& root) {
  struct Part {
    std::string tensor;
    Shape shape;
    Slice slice;
  };
  // [rank] -> its pieces.
  const std::vector<std::vector<Part>> ranks = {
      {{"param/w", {4, 6}, {{Box{{0, 0}, {2, 6}}}, 0, 12}},
       {"param/cols", {3, 4}, {{Box{{0, 0}, {3, 2}}}, 0, 6}},
       {"param/qkv", {6, 2}, {{Box{{0, 0}, {1, 2}}, Box{{2, 0}, {1, 2}}, Box{{4, 0}, {1, 2}}}, 0, 6}},
       {"param/b", {6}, Slice::whole({6})},
       {"param/scale", {}, Slice::whole({})},
       {"adam_m/w", {4, 6}, {{Box{{0, 0}, {4, 6}}}, 0, 10}}},
      {{"param/w", {4, 6}, {{Box{{2, 0}, {2, 6}}}, 0, 12}},
       {"param/cols", {3, 4}, {{Box{{0, 2}, {3, 2}}}, 0, 6}},
       {"param/qkv", {6, 2}, {{Box{{1, 0}, {1, 2}}, Box{{3, 0}, {1, 2}}, Box{{5, 0}, {1, 2}}}, 0, 6}},
       {"param/b", {6}, Slice::whole({6})},
       {"adam_m/w", {4, 6}, {{Box{{0, 0}, {4, 6}}}, 10, 24}}},
  };
  prepare_partial(root, kSampleStep);
  const std::filesystem::path partial = partial_dir(root, kSampleStep);
  for (int rank = 0; rank < static_cast<int>(ranks.size()); ++rank) {
    RankWriter writer(partial, rank, kSampleStep);
    for (const Part& part : ranks[static_cast<std::size_t>(rank)]) {
      std::vector<float> values(static_cast<std::size_t>(part.slice.numel()));
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(rank * 100) + 0.5f * static_cast<float>(i);
      writer.add(part.tensor, part.shape, part.slice, values);
    }
    writer.finish();
  }
  Manifest base;
  base.step = kSampleStep;
  base.model = {{"layers", 1}, {"heads", 1}, {"channels", 6}, {"max_seq_len", 4}, {"vocab_size", 4}};
  base.layout = {{"dp", 1}, {"tp", 2}, {"pp", 1}};
  base.training = {{"optimizer_steps", kSampleStep}, {"global_batch", 8}};
  base.data = {{"sequences_consumed", 56}, {"fingerprint", "00000000deadbeef"}};
  base.rng = {{"state", "sample"}};
  const Manifest manifest = assemble_manifest(partial, static_cast<int>(ranks.size()), base);
  const std::filesystem::path dir = commit_checkpoint(root, manifest);
  set_latest(root, kSampleStep);
  return dir;
}

// The bytes of `file`: a file of the sample, as a seed or as the saved original to compare with.
inline std::string read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes seeds into `dir` from the step directory `sample` of a sample checkpoint of their own.
using SampleSeedWriter = std::function<void(const std::filesystem::path& dir, const std::filesystem::path& sample)>;

// The whole of a checkpoint fuzzer's LLVMFuzzerInitialize but its own state: with -write_seeds=DIR
// among the arguments, writes a sample, runs write_seeds(DIR, its step dir) and exits; otherwise
// returns the step directory of the sample that the inputs are written over (in this process's
// fuzz_dir, so parallel fuzzing jobs do not share it).
inline std::filesystem::path start_sample_fuzzer(int* argc, char*** argv, const SampleSeedWriter& write_seeds) {
  mt::fuzz::handle_write_seeds(argc, argv, [&](const std::filesystem::path& dir) {
    write_seeds(dir, write_sample_checkpoint(mt::fuzz::fuzz_dir() / "seed_checkpoint"));
  });
  return write_sample_checkpoint(mt::fuzz::fuzz_dir() / "checkpoint");
}

}  // namespace mt::ckpt::fuzz
