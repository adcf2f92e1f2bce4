// llm.c token shards: a 1024-byte header of 256 little-endian int32 ([0] magic 20240520,
// [1] version 1, [2] token count, the rest zero) followed by that many uint16 token ids.
// Written atomically (temporary file in the same directory, fsync, rename); read through a
// read-only memory map so a loader over many GB of shards keeps only the pages it touches.
// defines: kShardMagic, kShardVersion, kShardHeaderBytes, write_shard, ShardFile, read_shard,
//          find_shards
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace mt::data {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderInts = 256;
inline constexpr std::size_t kShardHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);
inline constexpr std::int64_t kMaxShardToken = 65535;  // ids are stored as uint16

// Writes `tokens` as an llm.c shard at `file`, replacing it atomically: readers see the old file
// or the complete new one, never a partial write. Ids outside [0, 65535] (int32 overload) and more
// than INT32_MAX tokens throw Error naming the file; so do I/O failures.
void write_shard(const std::filesystem::path& file, std::span<const std::uint16_t> tokens);
void write_shard(const std::filesystem::path& file, std::span<const std::int32_t> tokens);

// One validated shard, memory-mapped read-only (RAII: unmapped on destruction; move-only).
// open() checks the file exists and is a regular file, is at least a header long, carries the
// magic and version 1, and holds exactly the header's token count (neither truncated nor with
// trailing bytes). It does not look at the token ids: check_vocab() does, in one pass.
class ShardFile {
 public:
  static ShardFile open(const std::filesystem::path& file);

  ShardFile() = default;
  ShardFile(ShardFile&& other) noexcept;
  ShardFile& operator=(ShardFile&& other) noexcept;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  ~ShardFile();

  const std::filesystem::path& path() const { return path_; }
  std::int64_t size() const { return count_; }  // tokens
  std::span<const std::uint16_t> tokens() const { return {tokens_, static_cast<std::size_t>(count_)}; }

  // Throws Error naming the file, the position and the id of the first token >= vocab_size.
  void check_vocab(int vocab_size) const;

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const std::uint16_t* tokens_ = nullptr;
  std::int64_t count_ = 0;
};

// The whole shard copied into memory; with vocab_size > 0, ids >= vocab_size throw.
std::vector<std::uint16_t> read_shard(const std::filesystem::path& file, int vocab_size = 0);

// The shards of one split in `dir`: files named <prefix>_<split>_<digits>.bin (llm.c's
// fineweb.py writes _000000, _000001, ...) or <prefix>_<split>.bin (tinyshakespeare.py), sorted
// by prefix then shard number. Throws Error naming the directory and the pattern when there is
// none, or when `dir` is not a directory. `split` is typically "train" or "val".
std::vector<std::filesystem::path> find_shards(const std::filesystem::path& dir, const std::string& split);

// "<prefix>_<split>_<index as 6 digits>.bin", the name prepare_corpus writes.
std::string shard_file_name(const std::string& prefix, const std::string& split, int index);

}  // namespace mt::data
