#include "checkpoint/shard_file.h"

#include <fcntl.h>     // defines: open, O_RDONLY, O_CLOEXEC
#include <sys/mman.h>  // defines: mmap, munmap
#include <sys/stat.h>  // defines: fstat
#include <unistd.h>    // defines: fsync
#include <xxhash.h>    // defines: XXH3_createState, XXH3_64bits_reset, XXH3_64bits_update, XXH3_64bits_digest, XXH3_64bits

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "runtime/error.h"
#include "runtime/unique_fd.h"

namespace mt::ckpt {
namespace fs = std::filesystem;

// The data are fp32 little-endian on disk and written and mapped as they are in memory.
static_assert(std::endian::native == std::endian::little, "shard files are little-endian");

namespace {

// Header layout: bytes [0, 8) the magic, [8, 12) the rank (int32), [16, 24) the step (int64), the
// rest zero: fields at their natural alignment, room left for later fields.
constexpr std::array<char, 8> kMagic = {'M', 'T', 'C', 'K', 'P', 'T', '0', '1'};
constexpr std::size_t kRankAt = 8, kStepAt = 16;

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

void write_all(std::FILE* file, XXH3_state_s* hash, const void* data, std::size_t bytes, const fs::path& path) {
  if (bytes == 0) return;
  MT_REQUIRE_ENV(std::fwrite(data, 1, bytes, file) == bytes, "cannot write shard file ", path.string(), ": ",
             errno_text(errno));
  XXH3_64bits_update(hash, data, bytes);
}


void unmap(const unsigned char* data, std::int64_t bytes) {
  if (data) ::munmap(const_cast<unsigned char*>(data), static_cast<std::size_t>(bytes));
}

}  // namespace

std::string checksum_hex(std::uint64_t checksum) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i, checksum >>= 4) hex[static_cast<std::size_t>(i)] = kDigits[checksum & 0xf];
  return hex;
}

std::uint64_t parse_checksum_hex(const std::string& hex, const std::string& what) {
  MT_REQUIRE(hex.size() == 16, what, ": checksum '", hex, "' is not 16 hex digits");
  std::uint64_t value = 0;
  for (char c : hex) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    MT_REQUIRE(digit >= 0, what, ": checksum '", hex, "' is not 16 hex digits");
    value = value << 4 | static_cast<std::uint64_t>(digit);
  }
  return value;
}

ShardWriter::ShardWriter(fs::path path, int rank, std::int64_t step) : path_(std::move(path)), rank_(rank) {
  hash_ = XXH3_createState();
  MT_CHECK(hash_ != nullptr, "out of memory for a checksum state");
  XXH3_64bits_reset(hash_);
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) {
    const int err = errno;
    XXH3_freeState(hash_);
    MT_FAIL_AS(EnvironmentError, "cannot create shard file ", path_.string(), ": ", errno_text(err));
  }
  std::array<unsigned char, kShardHeaderBytes> header{};
  std::memcpy(header.data(), kMagic.data(), kMagic.size());
  const std::int32_t rank32 = rank;
  std::memcpy(header.data() + kRankAt, &rank32, sizeof(rank32));
  std::memcpy(header.data() + kStepAt, &step, sizeof(step));
  try {
    write_all(file_, hash_, header.data(), header.size(), path_);
  } catch (...) {
    std::fclose(file_);  // the destructor does not run for a constructor that throws
    XXH3_freeState(hash_);
    throw;
  }
  bytes_ = kShardHeaderBytes;
}

ShardWriter::~ShardWriter() {
  if (file_) std::fclose(file_);
  XXH3_freeState(hash_);
}

std::int64_t ShardWriter::append(std::span<const float> data) {
  MT_CHECK(file_ != nullptr, "append to finished shard file ", path_.string());
  const std::int64_t offset = bytes_;
  write_all(file_, hash_, data.data(), data.size_bytes(), path_);
  bytes_ += static_cast<std::int64_t>(data.size_bytes());
  return offset;
}

FileEntry ShardWriter::finish() {
  MT_CHECK(file_ != nullptr, "shard file ", path_.string(), " finished twice");
  std::FILE* file = std::exchange(file_, nullptr);
  const bool flushed = std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  const int err = errno;
  const bool closed = std::fclose(file) == 0;
  MT_REQUIRE_ENV(flushed && closed, "cannot write shard file ", path_.string(), ": ", errno_text(flushed ? errno : err));
  return FileEntry{path_.filename().string(), rank_, bytes_, XXH3_64bits_digest(hash_)};
}

ShardReader::ShardReader(const fs::path& dir, const FileEntry& entry) : path_(dir / entry.name) {
  const UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    MT_REQUIRE(err != ENOENT, "missing shard file ", path_.string(), " (the manifest lists it)");
    MT_FAIL("cannot open shard file ", path_.string(), ": ", errno_text(err));
  }
  struct stat info {};
  MT_REQUIRE(::fstat(fd.get(), &info) == 0, "cannot stat shard file ", path_.string(), ": ", errno_text(errno));
  const std::int64_t bytes = info.st_size;
  MT_REQUIRE(bytes == entry.bytes, "shard file ", path_.string(), " is ", bytes, " bytes, the manifest says ",
             entry.bytes, bytes < entry.bytes ? ": it was cut short" : ": it was changed after the save");
  MT_REQUIRE(bytes >= kShardHeaderBytes, "shard file ", path_.string(), " is ", bytes,
             " bytes, too short for the header of a shard file");

  void* mapped = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ, MAP_PRIVATE, fd.get(), 0);
  MT_REQUIRE(mapped != MAP_FAILED, "cannot map shard file ", path_.string(), ": ", errno_text(errno));
  auto unmap_on_error = [bytes](const unsigned char* p) { unmap(p, bytes); };
  std::unique_ptr<const unsigned char, decltype(unmap_on_error)> data(static_cast<const unsigned char*>(mapped),
                                                                      unmap_on_error);

  MT_REQUIRE(std::memcmp(data.get(), kMagic.data(), kMagic.size()) == 0, "shard file ", path_.string(),
             " does not start with the magic MTCKPT01: not a meshtrain shard file");
  const std::uint64_t checksum = XXH3_64bits(data.get(), static_cast<std::size_t>(bytes));
  MT_REQUIRE(checksum == entry.xxh3, "checksum mismatch in shard file ", path_.string(), ": it is ",
             checksum_hex(checksum), ", the manifest says ", checksum_hex(entry.xxh3), ": the file is corrupt");
  std::int32_t rank = 0;
  std::memcpy(&rank, data.get() + kRankAt, sizeof(rank));
  MT_REQUIRE(rank == entry.rank, "shard file ", path_.string(), " was written by rank ", rank,
             ", the manifest says rank ", entry.rank);
  data_ = data.release();
  bytes_ = bytes;
}

ShardReader::~ShardReader() { unmap(data_, bytes_); }

ShardReader::ShardReader(ShardReader&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

ShardReader& ShardReader::operator=(ShardReader&& other) noexcept {
  if (this != &other) {
    unmap(data_, bytes_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void ShardReader::read(std::int64_t byte_offset, std::span<float> out) const {
  const auto want = static_cast<std::int64_t>(out.size_bytes());
  MT_REQUIRE(byte_offset >= kShardHeaderBytes && byte_offset <= bytes_ && want <= bytes_ - byte_offset, "shard file ",
             path_.string(), ": bytes [", byte_offset, ", ", byte_offset + want, ") lie outside its data (bytes [",
             kShardHeaderBytes, ", ", bytes_, "))");
  if (want > 0) std::memcpy(out.data(), data_ + byte_offset, out.size_bytes());
}

}  // namespace mt::ckpt
