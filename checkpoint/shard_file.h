// One rank's shard file of a checkpoint: a 64-byte header (magic "MTCKPT01", the writing rank and
// the step, zero padding), then the fp32 data of its pieces back to back. The whole file's XXH3-64
// goes into the manifest; a reader checks size, magic and checksum before trusting any byte.
// defines: kShardHeaderBytes, ShardWriter, ShardReader, checksum_hex, parse_checksum_hex
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

#include "checkpoint/manifest.h"

struct XXH3_state_s;

namespace mt::ckpt {

inline constexpr std::int64_t kShardHeaderBytes = 64;

std::string checksum_hex(std::uint64_t checksum);  // 16 lowercase hex digits
// Error naming `what` unless `hex` is exactly 16 hex digits.
std::uint64_t parse_checksum_hex(const std::string& hex, const std::string& what);

class ShardWriter {
 public:
  // Creates (truncates) the file and writes the header. Error naming the file when it cannot.
  ShardWriter(std::filesystem::path path, int rank, std::int64_t step);
  ~ShardWriter();  // closes an unfinished file as it is (never complete: no manifest names it)
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends the data; returns its byte offset in the file. Error (naming the file and errno's
  // reason, e.g. "No space left on device") when the write fails.
  std::int64_t append(std::span<const float> data);
  std::int64_t bytes() const { return bytes_; }
  // Flushes, fsyncs and closes; the entry to put in the manifest (name = the file's name).
  FileEntry finish();

 private:
  std::filesystem::path path_;
  int rank_ = 0;
  std::FILE* file_ = nullptr;
  XXH3_state_s* hash_ = nullptr;
  std::int64_t bytes_ = 0;
};

class ShardReader {
 public:
  // Maps the file `entry` names inside `dir` and checks it: it exists ("missing shard file"),
  // has entry.bytes bytes ("is N bytes, the manifest says M": cut short), starts with the magic,
  // and its XXH3-64 equals entry.xxh3 ("checksum mismatch ...: the file is corrupt"). Every error
  // names the file's path.
  ShardReader(const std::filesystem::path& dir, const FileEntry& entry);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;
  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&& other) noexcept;

  // out.size() floats starting at byte `byte_offset`; Error when that lies beyond the file.
  void read(std::int64_t byte_offset, std::span<float> out) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const unsigned char* data_ = nullptr;
  std::int64_t bytes_ = 0;
};

}  // namespace mt::ckpt
