// The deterministic data loader: an infinite stream of training sequences over the shards of one
// split, addressable by global sequence index so data-parallel ranks can each read their slice.
//
// Windows: each shard of N tokens gives floor((N - 1) / T) windows of T + 1 tokens at stride T
// (window w covers tokens [w*T, w*T + T]); input = its first T tokens, target = its last T (the
// input shifted by one). Windows never cross shards; a shard's tail shorter than a window is unused.
// Numbering the windows of all shards in file order gives W = sequences_per_epoch() windows.
//
// Stream: sequence i belongs to epoch e = i / W and is window perm_e(i % W). Without shuffling
// perm_e is the identity (file order, every epoch alike: validation). With shuffling perm_e is a
// pseudo-random permutation of [0, W) keyed by (seed, e): a 6-round Feistel network over the
// next even power of two, with cycle walking. It costs O(1) memory and well under a microsecond
// per sequence at any W and any epoch, with nothing to precompute, cache or lock, so read() is
// const and thread-safe.
//
// defines: LoaderOptions, LoaderState, DataLoader, window_permutation
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "data/shard.h"  // defines: ShardFile, find_shards

namespace mt::data {

struct LoaderOptions {
  int seq_len = 1024;         // T
  std::uint64_t seed = 0;     // keys the per-epoch permutations (ignored without shuffle)
  bool shuffle = true;        // train: true; validation: false
  int vocab_size = 0;         // > 0: every token read is checked against it (Error naming file/position)
  std::string split;          // "train", "val" or empty: which shards the messages name
};

// Where the stream stands, to save in a checkpoint. The fingerprint covers the shard file names and
// sizes, seq_len, seed and shuffle: restoring into a loader that differs in any of them throws.
struct LoaderState {
  std::int64_t next_sequence = 0;  // global index of the next sequence next() returns
  std::uint64_t fingerprint = 0;
};

class DataLoader {
 public:
  // Opens (maps and validates) every shard. Throws Error when `shards` is empty, seq_len < 1, or any
  // shard is bad (see ShardFile); UsageError when no shard holds seq_len + 1 tokens (naming the
  // split, the directory, the files and the fix) or version-2 shards record different vocabularies.
  DataLoader(std::vector<std::filesystem::path> shards, const LoaderOptions& options);

  // The shards of `split` in `dir` (find_shards), shuffled when split == "train". UsageError when
  // they belong to more than one set (require_one_shard_set).
  static DataLoader for_split(const std::filesystem::path& dir, const std::string& split, int seq_len,
                              std::uint64_t seed, int vocab_size);

  int seq_len() const { return options_.seq_len; }
  const LoaderOptions& options() const { return options_; }
  std::int64_t sequences_per_epoch() const { return windows_; }
  std::int64_t tokens_per_epoch() const { return windows_ * options_.seq_len; }  // target tokens
  std::size_t num_shards() const { return shards_.size(); }
  const std::vector<ShardFile>& shards() const { return shards_; }
  std::uint64_t fingerprint() const { return fingerprint_; }

  // Sequences first_sequence .. first_sequence + count - 1 of the stream (any index >= 0; epochs
  // continue forever), row-major [count, T] into inputs and targets, each exactly count*T long.
  // Thread-safe; does not move the cursor.
  void read(std::int64_t first_sequence, int count, std::span<std::int32_t> inputs,
            std::span<std::int32_t> targets) const;

  // read() at the cursor, then advance it by count.
  void next(int count, std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

  std::int64_t position() const { return cursor_; }  // the cursor: next sequence next() returns
  std::int64_t epoch() const { return cursor_ / windows_; }
  void seek(std::int64_t sequence);
  void reset() { cursor_ = 0; }

  LoaderState state() const { return {cursor_, fingerprint_}; }
  void restore(const LoaderState& state);

  // Which window of the epoch sequence i reads, and where it lies.
  std::int64_t window_of(std::int64_t sequence) const;
  struct Location {
    std::size_t shard;
    std::int64_t offset;  // first token of the window in that shard
  };
  Location locate(std::int64_t window) const;

 private:
  LoaderOptions options_;
  std::vector<ShardFile> shards_;
  std::vector<std::int64_t> first_window_;  // per shard, plus W at the end
  std::int64_t windows_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::int64_t cursor_ = 0;
};

// The permutation DataLoader uses: a bijection of [0, n) keyed by (seed, epoch). Exposed for tests.
std::int64_t window_permutation(std::int64_t index, std::int64_t n, std::uint64_t seed, std::int64_t epoch);

}  // namespace mt::data
