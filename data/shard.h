// llm.c token shards: a 1024-byte header of 256 little-endian int32 ([0] magic 20240520,
// [1] version, [2] token count, the rest zero) followed by that many token ids:
//  - version 1 (llm.c's GPT-2 shards): uint16 ids;
//  - version 2 (meshtrain's, for vocabularies beyond 65536 such as cl100k and o200k): uint32 ids,
//    and [3] the vocabulary size of the tokenizer that wrote them (0: unknown).
// Also read: llm.c's own uint32 shards for Llama 3 (magic 20240801, version 7, uint32 ids).
// Written atomically (temporary file in the same directory, fsync, rename); read through a
// read-only memory map so a loader over many GB of shards keeps only the pages it touches.
// defines: kShardMagic, kShardVersion, kShardVersionUint32, kShardHeaderBytes, shard_version_for,
//          write_shard, ShardFile, read_shard, read_shard_ids, find_shards, shard_file_name,
//          shard_set_name, require_one_shard_set, shard_sets_in
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace mt::data {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersion = 1;         // uint16 ids
inline constexpr std::int32_t kShardVersionUint32 = 2;   // uint32 ids
inline constexpr std::int32_t kLlmcLlama3Magic = 20240801;  // llm.c's uint32 shards: version 7
inline constexpr std::int32_t kLlmcLlama3Version = 7;
inline constexpr std::size_t kShardHeaderInts = 256;
inline constexpr std::size_t kShardHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);
inline constexpr std::int64_t kMaxShardToken = 65535;  // the largest id of version 1 (uint16)

// The version that holds a vocabulary of `vocab_size` ids: 1 up to 65536 (every existing shard
// stays as llm.c writes it), else 2.
std::int32_t shard_version_for(std::int64_t vocab_size);

// Writes `tokens` as an llm.c shard at `file`, replacing it atomically: readers see the old file
// or the complete new one, never a partial write. Version 1 unless `version` says 2; vocab_size
// goes into a version-2 header. Ids outside [0, 65535] (version 1) or negative (version 2), and
// more than INT32_MAX tokens throw Error naming the file; so do I/O failures.
void write_shard(const std::filesystem::path& file, std::span<const std::uint16_t> tokens);
void write_shard(const std::filesystem::path& file, std::span<const std::int32_t> tokens,
                 std::int32_t version = kShardVersion, std::int32_t vocab_size = 0);

// One validated shard, memory-mapped read-only (RAII: unmapped on destruction; move-only).
// open() checks the file exists and is a regular file, is at least a header long, carries a known
// magic and version (above), and holds exactly the header's token count (neither truncated nor
// with trailing bytes). It does not look at the token ids: check_vocab() does, in one pass.
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
  std::int32_t version() const { return version_; }
  bool wide() const { return version_ == kShardVersionUint32; }  // uint32 ids (version 2, or llm.c's version 7)
  // The vocabulary size a version-2 header records (the tokenizer that wrote it); 0 when unknown.
  std::int32_t written_vocab() const { return written_vocab_; }
  // The ids as stored: tokens() for uint16 shards, tokens32() for wide ones (the other throws).
  std::span<const std::uint16_t> tokens() const;
  std::span<const std::uint32_t> tokens32() const;
  // Ids [offset, offset + count) into `out`, whatever their width. Bounds are the caller's to keep.
  void copy(std::int64_t offset, std::int64_t count, std::int32_t* out) const;

  // Throws Error naming the file, the position and the id of the first token >= vocab_size, and
  // the vocabulary the shard was written for where its header says.
  void check_vocab(int vocab_size) const;
  // The position of the first id >= vocab_size among [offset, offset + count), or -1; and the
  // message check_vocab gives for the one at `position`.
  std::int64_t first_outside_vocab(std::int64_t offset, std::int64_t count, int vocab_size) const;
  std::string outside_vocab_message(std::int64_t position, int vocab_size) const;

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
  std::int64_t count_ = 0;
  std::int32_t version_ = 0;
  std::int32_t written_vocab_ = 0;
};

// The whole shard copied into memory; with vocab_size > 0, ids >= vocab_size throw. read_shard
// takes uint16 shards only; read_shard_ids any.
std::vector<std::uint16_t> read_shard(const std::filesystem::path& file, int vocab_size = 0);
std::vector<std::int32_t> read_shard_ids(const std::filesystem::path& file, int vocab_size = 0);

// The shards of one split in `dir`: files named <prefix>_<split>_<digits>.bin (llm.c's
// fineweb.py writes _000000, _000001, ...) or <prefix>_<split>.bin (tinyshakespeare.py), sorted
// by prefix then shard number. Throws Error naming the directory and the pattern when there is
// none, or when `dir` is not a directory. `split` is typically "train" or "val".
std::vector<std::filesystem::path> find_shards(const std::filesystem::path& dir, const std::string& split);

// "<prefix>_<split>_<index as 6 digits>.bin", the name prepare_corpus writes.
std::string shard_file_name(const std::string& prefix, const std::string& split, int index);

// The set a shard of `split` belongs to: the prefix of its name, "fineweb" for
// fineweb_train_000001.bin (or tinyshakespeare for tinyshakespeare_val.bin); empty for a name of
// neither form. One `meshtrain prepare --name` (or one llm.c script) writes one set.
std::string shard_set_name(const std::filesystem::path& file, const std::string& split);

// Throws UsageError when `shards` (find_shards of `split`) belong to more than one set: two corpora
// prepared into one directory, whose token ids training would mix. Names the sets and the fix.
void require_one_shard_set(const std::vector<std::filesystem::path>& shards, const std::string& split);

// The sets with train or validation shards in `dir`, sorted; none when `dir` is no directory.
std::vector<std::string> shard_sets_in(const std::filesystem::path& dir);

}  // namespace mt::data
