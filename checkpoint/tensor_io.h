// Writing one rank's pieces and reading any slice back, whatever layout wrote the checkpoint.
// defines: RankWriter, CheckpointReader
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"

namespace mt::ckpt {

// One rank's half of a save: pieces go into PARTIAL/rank_NNNNN.bin (opened at the first piece,
// so a rank holding nothing writes no file), finish() fsyncs it and writes the sidecar.
class RankWriter {
 public:
  RankWriter(std::filesystem::path partial, int rank, std::int64_t step,
             std::optional<SaveFault> fault = std::nullopt);
  // Appends `data` as `slice` of tensor `tensor` (global shape `shape`): data.size() must equal
  // slice.numel() and the slice be valid for the shape (Error otherwise).
  void add(const std::string& tensor, const Shape& shape, const Slice& slice, std::span<const float> data);
  // Closes the shard file (fsync) and writes the sidecar. The fault points fire here: "shard" after
  // cutting the file to half its bytes (a crash mid-write), "sidecar" between file and sidecar.
  RankContribution finish();

 private:
  std::filesystem::path partial_;
  int rank_ = 0;
  std::int64_t step_ = 0;
  std::optional<SaveFault> fault_;
  std::unique_ptr<ShardWriter> writer_;
  RankContribution contribution_;
};

// Reads slices of a complete checkpoint. Shard files are opened (and verified: size, magic,
// checksum) the first time a piece in them is needed, each once.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::filesystem::path step_dir);  // read_manifest
  CheckpointReader(std::filesystem::path step_dir, Manifest manifest);
  const Manifest& manifest() const { return manifest_; }
  const std::filesystem::path& dir() const { return dir_; }
  bool has_tensor(const std::string& tensor) const { return manifest_.find_tensor(tensor) != nullptr; }
  const Shape& shape(const std::string& tensor) const;  // Error naming an unknown tensor
  // Fills `out` (target.numel() floats) with `target` of `tensor`, from whatever pieces hold it.
  // Errors: unknown tensor; a target invalid for the tensor's shape; elements no piece holds; a
  // shard file missing, cut short or corrupt.
  void read(const std::string& tensor, const Slice& target, std::span<float> out);
  std::vector<float> read_whole(const std::string& tensor);

 private:
  const ShardReader& shard(const std::string& file);
  std::filesystem::path dir_;
  Manifest manifest_;
  std::map<std::string, ShardReader> open_;
};

}  // namespace mt::ckpt
