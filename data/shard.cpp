#include "data/shard.h"

#include <fcntl.h>     // defines: open, O_RDONLY, O_WRONLY, O_CREAT, O_TRUNC, O_DIRECTORY, O_CLOEXEC
#include <sys/mman.h>  // defines: mmap, munmap
#include <sys/stat.h>  // defines: fstat, S_ISREG
#include <unistd.h>    // defines: write, pread, fsync, close, getpid

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <tuple>
#include <utility>

#include "data/tokenizer/tokenizer.h"  // defines: tokenizer_names, known_vocab_size
#include "runtime/error.h"
#include "runtime/unique_fd.h"

namespace mt::data {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "llm.c shards are little-endian; this reader maps them as they are");

namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }


void write_all(int fd, const void* data, std::size_t bytes, const fs::path& file) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) MT_FAIL("cannot write token shard ", file, ": ", errno_text(errno));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

// Makes the rename durable: fsync of the directory that holds the new entry. Best effort (some
// file systems refuse fsync on directories); the data itself was fsynced before the rename.
void sync_directory(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// Header + `count` ids at `tokens`: uint16 for version 1, uint32 (int32 >= 0) for version 2.
void write_shard_bytes(const fs::path& file, std::int64_t count, const void* tokens, std::int32_t version,
                       std::int32_t vocab_size) {
  MT_CHECK(count <= std::numeric_limits<std::int32_t>::max(), "token shard ", file, " would hold ", count,
           " tokens; the llm.c header counts at most 2^31-1");
  const std::size_t width = version == kShardVersionUint32 ? sizeof(std::uint32_t) : sizeof(std::uint16_t);
  std::array<std::int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(count);
  if (version == kShardVersionUint32) header[3] = vocab_size;

  static std::atomic<unsigned> counter{0};
  fs::path tmp = file;
  tmp += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) MT_FAIL("cannot create token shard ", file, " (temporary ", tmp, "): ", errno_text(errno));
  try {
    write_all(fd.get(), header.data(), kShardHeaderBytes, file);
    write_all(fd.get(), tokens, static_cast<std::size_t>(count) * width, file);
    if (::fsync(fd.get()) != 0) MT_FAIL("cannot flush token shard ", file, ": ", errno_text(errno));
    if (::close(fd.release()) != 0) MT_FAIL("cannot close token shard ", file, ": ", errno_text(errno));
    if (::rename(tmp.c_str(), file.c_str()) != 0) {
      MT_FAIL("cannot rename ", tmp, " to token shard ", file, ": ", errno_text(errno));
    }
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  sync_directory(file.parent_path());
}

}  // namespace

std::int32_t shard_version_for(std::int64_t vocab_size) {
  return vocab_size <= kMaxShardToken + 1 ? kShardVersion : kShardVersionUint32;
}

void write_shard(const fs::path& file, std::span<const std::uint16_t> tokens) {
  write_shard_bytes(file, static_cast<std::int64_t>(tokens.size()), tokens.data(), kShardVersion, 0);
}

void write_shard(const fs::path& file, std::span<const std::int32_t> tokens, std::int32_t version,
                 std::int32_t vocab_size) {
  MT_CHECK(version == kShardVersion || version == kShardVersionUint32, "shard version ", version,
           " cannot be written (1: uint16 ids, 2: uint32 ids)");
  if (version == kShardVersionUint32) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0) MT_FAIL("cannot write token shard ", file, ": token ", i, " is ", tokens[i], ", a negative id");
    }
    write_shard_bytes(file, static_cast<std::int64_t>(tokens.size()), tokens.data(), version, vocab_size);
    return;
  }
  std::vector<std::uint16_t> narrow(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::int32_t t = tokens[i];
    if (t < 0 || t > kMaxShardToken) {
      MT_FAIL("cannot write token shard ", file, ": token ", i, " is ", t,
              ", outside [0, 65535] (llm.c shards of version 1 store ids as uint16; version 2 stores uint32)");
    }
    narrow[i] = static_cast<std::uint16_t>(t);
  }
  write_shard(file, std::span<const std::uint16_t>(narrow));
}

// --- ShardFile ---------------------------------------------------------------------------------

ShardFile ShardFile::open(const fs::path& file) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) MT_FAIL("cannot open token shard ", file, ": ", errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) MT_FAIL("cannot stat token shard ", file, ": ", errno_text(errno));
  if (!S_ISREG(st.st_mode)) MT_FAIL("token shard ", file, " is not a regular file");
  const auto bytes = static_cast<std::uint64_t>(st.st_size);
  if (bytes < kShardHeaderBytes) {
    std::int32_t first = kShardMagic;
    if (bytes >= sizeof(first) && ::pread(fd.get(), &first, sizeof(first), 0) == sizeof(first) &&
        first != kShardMagic) {
      MT_FAIL(file, " is not an llm.c token shard: it starts with ", first, ", not the magic number ", kShardMagic,
              " (and is only ", bytes, " bytes long)");
    }
    MT_FAIL("token shard ", file, " is truncated: it is ", bytes, " bytes, shorter than the ",
            kShardHeaderBytes, "-byte llm.c shard header");
  }

  ShardFile shard;
  shard.path_ = file;
  shard.map_bytes_ = static_cast<std::size_t>(bytes);
  void* map = ::mmap(nullptr, shard.map_bytes_, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) MT_FAIL("cannot map token shard ", file, ": ", errno_text(errno));
  shard.map_ = map;  // owned from here: unmapped by ~ShardFile if a check below throws

  std::array<std::int32_t, kShardHeaderInts> header{};
  std::memcpy(header.data(), map, kShardHeaderBytes);
  if (header[0] == kLlmcLlama3Magic && header[1] == kLlmcLlama3Version) {
    header[0] = kShardMagic;  // llm.c's uint32 layout is version 2's, without the vocabulary
    header[1] = kShardVersionUint32;
    header[3] = 0;
  }
  if (header[0] != kShardMagic) {
    MT_FAIL(file, " is not an llm.c token shard: it starts with ", header[0], ", not the magic number ", kShardMagic);
  }
  if (header[1] != kShardVersion && header[1] != kShardVersionUint32) {
    MT_FAIL("token shard ", file, " has version ", header[1], "; this reader supports llm.c shard versions ",
            kShardVersion, " (uint16 tokens) and ", kShardVersionUint32, " (uint32 tokens)");
  }
  shard.version_ = header[1];
  shard.written_vocab_ = shard.wide() ? std::max(header[3], 0) : 0;
  const std::int64_t count = header[2];
  if (count < 0) MT_FAIL("token shard ", file, " is corrupt: its header gives a negative token count ", count);
  const std::uint64_t width = shard.wide() ? sizeof(std::uint32_t) : sizeof(std::uint16_t);
  const std::uint64_t want = static_cast<std::uint64_t>(count) * width;
  const std::uint64_t have = bytes - kShardHeaderBytes;
  // Version 1's messages stay as they were; a wide shard says what its sizes count.
  const std::string kind = shard.wide() ? " (version " + std::to_string(shard.version_) + ", uint32 tokens)" : "";
  if (have < want) {
    MT_FAIL("token shard ", file, kind, " is truncated: its header says ", count, " tokens (", want,
            " bytes after the header) but the file holds ", have, " bytes after the header");
  }
  if (have > want) {
    MT_FAIL("token shard ", file, kind, " has ", have - want, " trailing bytes after the ", count,
            " tokens its header announces");
  }
  shard.count_ = count;
  shard.tokens_ = static_cast<const char*>(map) + kShardHeaderBytes;
  return shard;
}

ShardFile::ShardFile(ShardFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      count_(std::exchange(other.count_, 0)),
      version_(std::exchange(other.version_, 0)),
      written_vocab_(std::exchange(other.written_vocab_, 0)) {}

ShardFile& ShardFile::operator=(ShardFile&& other) noexcept {
  if (this != &other) {
    ShardFile dead(std::move(*this));
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
    version_ = std::exchange(other.version_, 0);
    written_vocab_ = std::exchange(other.written_vocab_, 0);
  }
  return *this;
}

ShardFile::~ShardFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

std::span<const std::uint16_t> ShardFile::tokens() const {
  MT_CHECK(!wide(), "token shard ", path_, " holds uint32 ids (version ", version_, "): read them with tokens32()");
  return {static_cast<const std::uint16_t*>(tokens_), static_cast<std::size_t>(count_)};
}

std::span<const std::uint32_t> ShardFile::tokens32() const {
  MT_CHECK(wide(), "token shard ", path_, " holds uint16 ids (version ", version_, "): read them with tokens()");
  return {static_cast<const std::uint32_t*>(tokens_), static_cast<std::size_t>(count_)};
}

void ShardFile::copy(std::int64_t offset, std::int64_t count, std::int32_t* out) const {
  if (wide()) {
    const std::uint32_t* src = static_cast<const std::uint32_t*>(tokens_) + offset;
    for (std::int64_t j = 0; j < count; ++j) out[j] = static_cast<std::int32_t>(src[j]);
  } else {
    const std::uint16_t* src = static_cast<const std::uint16_t*>(tokens_) + offset;
    for (std::int64_t j = 0; j < count; ++j) out[j] = src[j];
  }
}

namespace {

// The index of the first id >= vocab_size in `ids` (a vectorizing pass for the maximum first), or -1.
template <typename T>
std::int64_t first_outside(std::span<const T> ids, std::int64_t vocab_size) {
  T top = 0;
  for (T t : ids) top = std::max(top, t);
  if (static_cast<std::int64_t>(top) < vocab_size) return -1;
  return std::find_if(ids.begin(), ids.end(), [&](T t) { return static_cast<std::int64_t>(t) >= vocab_size; }) -
         ids.begin();
}

}  // namespace

std::int64_t ShardFile::first_outside_vocab(std::int64_t offset, std::int64_t count, int vocab_size) const {
  const auto at = static_cast<std::size_t>(offset), n = static_cast<std::size_t>(count);
  const std::int64_t bad = wide() ? first_outside(tokens32().subspan(at, n), vocab_size)
                                 : first_outside(tokens().subspan(at, n), vocab_size);
  return bad < 0 ? -1 : offset + bad;
}

std::string ShardFile::outside_vocab_message(std::int64_t position, int vocab_size) const {
  const std::int64_t id = wide() ? std::int64_t{tokens32()[static_cast<std::size_t>(position)]}
                                : std::int64_t{tokens()[static_cast<std::size_t>(position)]};
  std::ostringstream message;  // the path quoted, as every other shard error gives it
  message << "token shard " << path_ << " holds token id " << id << " at position " << position
          << ", outside the vocabulary of " << vocab_size << " tokens";
  if (written_vocab_ > 0) {
    message << " (the shard was written by a tokenizer of " << written_vocab_ << " tokens";
    for (const std::string& name : tokenizer_names()) {
      if (known_vocab_size(name) == written_vocab_) message << ": --tokenizer " << name;
    }
    message << ")";
  }
  return message.str();
}

void ShardFile::check_vocab(int vocab_size) const {
  MT_CHECK(vocab_size > 0, "vocabulary size must be positive, got ", vocab_size);
  const std::int64_t bad = first_outside_vocab(0, count_, vocab_size);
  if (bad >= 0) MT_FAIL(outside_vocab_message(bad, vocab_size));
}

std::vector<std::uint16_t> read_shard(const fs::path& file, int vocab_size) {
  ShardFile shard = ShardFile::open(file);
  if (vocab_size > 0) shard.check_vocab(vocab_size);
  auto ids = shard.tokens();
  return {ids.begin(), ids.end()};
}

std::vector<std::int32_t> read_shard_ids(const fs::path& file, int vocab_size) {
  ShardFile shard = ShardFile::open(file);
  if (vocab_size > 0) shard.check_vocab(vocab_size);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(shard.size()));
  shard.copy(0, shard.size(), ids.data());
  return ids;
}

// --- finding shards ----------------------------------------------------------------------------

std::string shard_file_name(const std::string& prefix, const std::string& split, int index) {
  MT_CHECK(index >= 0 && index <= 999999, "shard index ", index, " does not fit in 6 digits");
  std::string number = std::to_string(index);
  return prefix + "_" + split + "_" + std::string(6 - number.size(), '0') + number + ".bin";
}

namespace {

struct ShardName {
  std::string set;         // the prefix
  long long number = -1;   // -1: none (<prefix>_<split>.bin)
};

// <prefix>_<split>_<digits>.bin or <prefix>_<split>.bin; nullopt for any other name.
std::optional<ShardName> parse_shard_name(const std::string& name, const std::string& split) {
  if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".bin") != 0) return std::nullopt;
  std::string stem = name.substr(0, name.size() - 4);
  long long number = -1;
  std::size_t digits = stem.size();
  while (digits > 0 && stem[digits - 1] >= '0' && stem[digits - 1] <= '9') --digits;
  if (digits < stem.size() && digits > 0 && stem[digits - 1] == '_' && stem.size() - digits <= 18) {
    number = std::stoll(stem.substr(digits));
    stem.resize(digits - 1);
  }
  const std::string tag = "_" + split;
  if (stem.size() <= tag.size() || stem.compare(stem.size() - tag.size(), tag.size(), tag) != 0) return std::nullopt;
  return ShardName{stem.substr(0, stem.size() - tag.size()), number};
}

}  // namespace

std::vector<fs::path> find_shards(const fs::path& dir, const std::string& split) {
  MT_CHECK(!split.empty(), "split name is empty", "");
  const std::string pattern = "*_" + split + "_NNNNNN.bin or *_" + split + ".bin";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    MT_FAIL("data directory ", dir, (fs::exists(dir, ec) ? " is not a directory" : " does not exist"),
            " (looking for ", split, " shards ", pattern, ")");
  }
  // (prefix, shard number, path): numeric order even where digit counts differ.
  std::vector<std::tuple<std::string, long long, fs::path>> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    if (auto shard = parse_shard_name(entry.path().filename().string(), split))
      found.emplace_back(std::move(shard->set), shard->number, entry.path());
  }
  if (found.empty()) MT_FAIL("no ", split, " shards in ", dir, ": no file matches ", pattern);
  std::sort(found.begin(), found.end());
  std::vector<fs::path> shards;
  shards.reserve(found.size());
  for (auto& f : found) shards.push_back(std::move(std::get<2>(f)));
  return shards;
}

std::string shard_set_name(const fs::path& file, const std::string& split) {
  const auto shard = parse_shard_name(file.filename().string(), split);
  return shard ? shard->set : std::string();
}

void require_one_shard_set(const std::vector<fs::path>& shards, const std::string& split) {
  std::map<std::string, std::vector<std::string>> sets;  // set -> its file names, in order
  for (const fs::path& file : shards) sets[shard_set_name(file, split)].push_back(file.filename().string());
  if (sets.size() <= 1) return;
  std::string list;  // "a" (a_train_000000.bin), "b" (b_train_000000.bin and 2 more)
  std::size_t k = 0;
  for (const auto& [set, files] : sets) {
    if (k > 0) list += k + 1 == sets.size() ? " and " : ", ";
    ++k;
    list += '"' + set + "\" (" + files.front();
    if (files.size() > 1) list += " and " + std::to_string(files.size() - 1) + " more";
    list += ')';
  }
  const std::string dir = shards.front().parent_path().string();
  MT_FAIL_AS(UsageError, "data directory \"", dir.empty() ? "." : dir, "\" holds the ", split, " shards of ",
             sets.size(), " corpora, ", list, ", and training would mix their token ids: prepare each corpus into a "
             "directory of its own (meshtrain prepare --output) and train on one");
}

std::vector<std::string> shard_sets_in(const fs::path& dir) {
  std::set<std::string> sets;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    for (const char* split : {"train", "val"})
      if (auto shard = parse_shard_name(entry.path().filename().string(), split)) sets.insert(shard->set);
  }
  return {sets.begin(), sets.end()};
}

}  // namespace mt::data
