// A small but varied checkpoint for the checkpoint fuzzers (fuzz_manifest, fuzz_shard_file), written
// by the real save path (RankWriter, assemble_manifest, commit_checkpoint, set_latest) for two
// ranks: row-split, column-split, multi-box and ZeRO-range pieces, a replicated tensor, a scalar.
// Deterministic, so the seeds and each fuzzer's own copy have the same bytes and checksums.
// defines: write_sample_checkpoint
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"  // defines: prepare_partial, assemble_manifest, commit_checkpoint, set_latest
#include "checkpoint/tensor_io.h"       // defines: RankWriter

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

}  // namespace mt::ckpt::fuzz
