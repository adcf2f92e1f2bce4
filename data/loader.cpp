#include "data/loader.h"

#include <algorithm>
#include <bit>
#include <set>
#include <sstream>
#include <utility>

#include "runtime/error.h"

namespace mt::data {
namespace fs = std::filesystem;

namespace {

// splitmix64's finalizer: a strong 64-bit mixer (Steele, Lea, Flood 2014).
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a, 64 bit: a hash that is the same on every machine and every run (std::hash is not).
class Fnv64 {
 public:
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ull;
    }
  }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void u64(std::uint64_t v) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(le, 8);
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

constexpr int kFeistelRounds = 6;

// "train shards", "validation shards", or "shards" for a loader without a split.
std::string shards_of(const std::string& split) {
  if (split.empty()) return "shards";
  return (split == "val" ? std::string("validation") : split) + " shards";
}

// Shards of one name written by tokenizers of other vocabularies (version 2 records its own) hold
// ids of different meanings: refused rather than trained together.
void require_one_vocabulary(const std::vector<ShardFile>& shards, const std::string& split) {
  const ShardFile* first = nullptr;
  for (const ShardFile& s : shards) {
    if (s.written_vocab() == 0) continue;
    if (first == nullptr) first = &s;
    MT_REQUIRE(s.written_vocab() == first->written_vocab(), "the ", shards_of(split), " ", first->path(), " and ",
               s.path(), " were written by tokenizers of ", first->written_vocab(), " and ", s.written_vocab(),
               " tokens, and training would mix their token ids: prepare each corpus into a directory of its own");
  }
}

// No shard holds a window: which split, where, its files, and what to change.
std::string too_little_data(const std::vector<ShardFile>& shards, std::int64_t T, const std::string& split) {
  std::set<std::string> dirs;
  std::int64_t longest = 0;
  for (const ShardFile& s : shards) {
    dirs.insert(s.path().parent_path().string());
    longest = std::max(longest, s.size());
  }
  std::ostringstream m;
  m << "too little data in the " << shards_of(split) << " of ";
  std::size_t k = 0;
  for (const std::string& d : dirs) m << (k++ ? ", " : "") << '"' << (d.empty() ? "." : d) << '"';
  m << " (";
  constexpr std::size_t kNamed = 3;
  for (std::size_t i = 0; i < std::min(shards.size(), kNamed); ++i)
    m << (i ? ", " : "") << shards[i].path().filename().string();
  if (shards.size() > kNamed) m << " and " << shards.size() - kNamed << " more";
  m << "): a sequence of --seq-len " << T << " needs " << T + 1 << " tokens in one shard, and the longest holds "
    << longest << ": give a shorter --seq-len";
  if (longest >= 2) m << " (at most " << longest - 1 << ")";
  m << ", or prepare more text" << (split == "val" ? " (or with a larger --val-fraction)" : "");
  return m.str();
}

}  // namespace

std::int64_t window_permutation(std::int64_t index, std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  MT_CHECK(n > 0 && index >= 0 && index < n, "permutation index ", index, " outside [0, ", n, ")");
  if (n == 1) return 0;
  // Domain 2^bits >= n with bits even, so both Feistel halves have the same width; 2^bits < 4n,
  // so cycle walking (re-applying until the value lands inside [0, n)) takes < 4 steps on average.
  int bits = std::bit_width(static_cast<std::uint64_t>(n - 1));
  bits += bits & 1;
  const int half = bits / 2;
  const std::uint64_t mask = (std::uint64_t{1} << half) - 1;
  std::uint64_t keys[kFeistelRounds];
  const std::uint64_t base = mix64(seed ^ mix64(static_cast<std::uint64_t>(epoch) ^ 0x6d65736874726169ull));
  for (int r = 0; r < kFeistelRounds; ++r) keys[r] = mix64(base + static_cast<std::uint64_t>(r) * 0x9e3779b97f4a7c15ull);

  auto x = static_cast<std::uint64_t>(index);
  do {
    std::uint64_t left = x >> half;
    std::uint64_t right = x & mask;
    for (std::uint64_t key : keys) {
      std::uint64_t next = left ^ (mix64(right ^ key) & mask);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= static_cast<std::uint64_t>(n));
  return static_cast<std::int64_t>(x);
}

DataLoader::DataLoader(std::vector<fs::path> shard_paths, const LoaderOptions& options) : options_(options) {
  MT_CHECK(!shard_paths.empty(), "the data loader was given no shard files", "");
  MT_CHECK(options.seq_len >= 1, "sequence length must be >= 1, got ", options.seq_len);
  MT_CHECK(options.vocab_size >= 0, "vocabulary size must be >= 0 (0: unchecked), got ", options.vocab_size);
  const std::int64_t T = options.seq_len;

  shards_.reserve(shard_paths.size());
  first_window_.reserve(shard_paths.size() + 1);
  Fnv64 fp;
  fp.str("meshtrain-loader-v1");
  fp.u64(static_cast<std::uint64_t>(T));
  fp.u64(options.shuffle ? 1 : 0);
  fp.u64(options.shuffle ? options.seed : 0);  // the seed does not change an unshuffled stream
  for (const fs::path& path : shard_paths) {
    ShardFile shard = ShardFile::open(path);
    first_window_.push_back(windows_);
    if (shard.size() >= T + 1) windows_ += (shard.size() - 1) / T;
    fp.str(path.filename().string());
    fp.u64(static_cast<std::uint64_t>(shard.size()));
    shards_.push_back(std::move(shard));
  }
  first_window_.push_back(windows_);
  fingerprint_ = fp.value();

  require_one_vocabulary(shards_, options.split);
  if (windows_ == 0) MT_FAIL_AS(UsageError, too_little_data(shards_, T, options.split));
}

DataLoader DataLoader::for_split(const fs::path& dir, const std::string& split, int seq_len, std::uint64_t seed,
                                 int vocab_size) {
  LoaderOptions options;
  options.seq_len = seq_len;
  options.seed = seed;
  options.shuffle = split == "train";
  options.vocab_size = vocab_size;
  options.split = split;
  std::vector<fs::path> shards = find_shards(dir, split);
  require_one_shard_set(shards, split);
  return DataLoader(std::move(shards), options);
}

std::int64_t DataLoader::window_of(std::int64_t sequence) const {
  MT_CHECK(sequence >= 0, "sequence index must be >= 0, got ", sequence);
  const std::int64_t in_epoch = sequence % windows_;
  if (!options_.shuffle) return in_epoch;
  return window_permutation(in_epoch, windows_, options_.seed, sequence / windows_);
}

DataLoader::Location DataLoader::locate(std::int64_t window) const {
  MT_CHECK(window >= 0 && window < windows_, "window ", window, " outside [0, ", windows_, ")");
  auto after = std::upper_bound(first_window_.begin(), first_window_.end(), window);
  const auto shard = static_cast<std::size_t>(after - first_window_.begin() - 1);
  return {shard, (window - first_window_[shard]) * options_.seq_len};
}

void DataLoader::read(std::int64_t first_sequence, int count, std::span<std::int32_t> inputs,
                      std::span<std::int32_t> targets) const {
  const std::int64_t T = options_.seq_len;
  MT_CHECK(first_sequence >= 0, "first sequence index must be >= 0, got ", first_sequence);
  MT_CHECK(count >= 0, "sequence count must be >= 0, got ", count);
  MT_CHECK(first_sequence <= INT64_MAX - count, "sequence index overflows: ", first_sequence, " + ", count);
  const auto want = static_cast<std::size_t>(count * T);
  MT_CHECK(inputs.size() == want && targets.size() == want, "reading ", count, " sequences of ", T,
           " tokens needs inputs and targets of ", want, " elements, got ", inputs.size(), " and ", targets.size());
  const int vocab = options_.vocab_size;
  for (int k = 0; k < count; ++k) {
    const std::int64_t sequence = first_sequence + k;
    const Location at = locate(window_of(sequence));
    const ShardFile& shard = shards_[at.shard];
    if (vocab > 0) {
      const std::int64_t bad = shard.first_outside_vocab(at.offset, T + 1, vocab);
      if (bad >= 0) MT_FAIL(shard.outside_vocab_message(bad, vocab), " (reading sequence ", sequence, ")");
    }
    // The window's T + 1 ids: inputs are its first T, targets its last T.
    std::int32_t* in = inputs.data() + k * T;
    std::int32_t* out = targets.data() + k * T;
    shard.copy(at.offset, T, in);
    shard.copy(at.offset + 1, T, out);
  }
}

void DataLoader::next(int count, std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  read(cursor_, count, inputs, targets);
  cursor_ += count;
}

void DataLoader::seek(std::int64_t sequence) {
  MT_CHECK(sequence >= 0, "cannot seek the data loader to sequence ", sequence);
  cursor_ = sequence;
}

void DataLoader::restore(const LoaderState& state) {
  if (state.fingerprint != fingerprint_) {
    MT_FAIL("cannot restore the data loader: the saved state comes from a loader over other data (fingerprint ",
            std::hex, state.fingerprint, ", this loader ", fingerprint_, std::dec,
            "): the shard files, their sizes, the sequence length, the seed or shuffling differ");
  }
  MT_CHECK(state.next_sequence >= 0, "saved data loader position is negative: ", state.next_sequence);
  cursor_ = state.next_sequence;
}

}  // namespace mt::data
