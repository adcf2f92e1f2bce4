// A checkpoint's table of contents (manifest.json, written by rank 0 once every rank's shard file
// is complete): what was trained (model, layout, training settings, data position, RNG state:
// JSON objects that train/checkpointing owns and this layer passes through), every tensor's global
// shape, every shard file with its size and checksum, and every piece: which slice of which tensor
// lies at which byte offset of which file (fp32, little-endian, slice.numel() x 4 bytes).
//
// Tensor names are "param/NAME", "adam_m/NAME" and "adam_v/NAME" (train/checkpointing.h); this
// layer does not interpret them.
// defines: kFormatName, kFormatVersion, TensorEntry, FileEntry, PieceEntry, Manifest
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/slices.h"

namespace mt::ckpt {

inline constexpr std::string_view kFormatName = "meshtrain-checkpoint";
inline constexpr int kFormatVersion = 1;  // raise when a reader of the old format would misread

struct TensorEntry {
  std::string name;
  Shape shape;
  bool operator==(const TensorEntry&) const = default;
};

struct FileEntry {
  std::string name;         // file name inside the checkpoint directory, e.g. "rank_00003.bin"
  int rank = 0;             // the world rank that wrote it
  std::int64_t bytes = 0;   // whole file, header included
  std::uint64_t xxh3 = 0;   // XXH3-64 of the whole file; JSON: 16 lowercase hex digits
  bool operator==(const FileEntry&) const = default;
};

struct PieceEntry {
  std::string tensor;
  Slice slice;
  std::string file;
  std::int64_t byte_offset = 0;  // from the start of the file
  bool operator==(const PieceEntry&) const = default;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::int64_t step = 0;  // optimizer steps done when it was written
  nlohmann::json model = nlohmann::json::object();
  nlohmann::json layout = nlohmann::json::object();
  nlohmann::json training = nlohmann::json::object();
  nlohmann::json data = nlohmann::json::object();
  nlohmann::json rng = nlohmann::json::object();
  std::vector<TensorEntry> tensors;  // sorted by name, unique
  std::vector<FileEntry> files;      // sorted by name, unique
  std::vector<PieceEntry> pieces;    // grouped by file, ascending byte offset within a file

  // Indented JSON: {"format": "meshtrain-checkpoint", "format_version": 1, "step": ..., "model":
  // ..., "layout": ..., "training": ..., "data": ..., "rng": ..., "tensors": [{"name", "shape"}],
  // "files": [{"name", "rank", "bytes", "xxh3"}], "pieces": [{"tensor", "boxes": [{"offset",
  // "shape"}], "begin", "end", "file", "byte_offset"}]}.
  std::string to_json() const;

  // Parses and checks the structure; `where` (the file's path) starts every error message.
  // Errors: not JSON; another format name; format_version newer than kFormatVersion ("written by a
  // newer meshtrain: format 2, this build reads format 1"); a missing or mistyped field; a piece
  // naming an unknown tensor or file, an invalid slice for its tensor's shape, or bytes beyond its
  // file's size; duplicate tensor or file names.
  static Manifest parse(const std::string& text, const std::string& where);

  const TensorEntry* find_tensor(std::string_view name) const;  // nullptr when absent
  const FileEntry* find_file(std::string_view name) const;
  std::vector<const PieceEntry*> pieces_of(std::string_view tensor) const;  // in manifest order
};

}  // namespace mt::ckpt
