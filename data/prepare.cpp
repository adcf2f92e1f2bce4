#include "data/prepare.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <span>
#include <sstream>
#include <system_error>
#include <tuple>
#include <utility>

#include "data/shard.h"                // defines: write_shard, shard_file_name
#include "data/tokenizer/tokenizer.h"  // defines: Tokenizer
#include "runtime/error.h"

namespace mt::data {
namespace fs = std::filesystem;

namespace {

// --- text decoding -----------------------------------------------------------------------------

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 when it is not valid (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;
    if (b0 == 0xed) hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;
    if (b0 == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return 0;
  }
  return n;
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

// Windows-1252 to UTF-8: Latin-1 everywhere except 0x80..0x9F, where Windows-1252 has printable
// characters (curly quotes, dashes, euro); its five undefined bytes become U+FFFD.
std::string windows1252_to_utf8(std::string_view bytes) {
  static constexpr std::array<char32_t, 32> k80 = {
      0x20ac, 0xfffd, 0x201a, 0x0192, 0x201e, 0x2026, 0x2020, 0x2021, 0x02c6, 0x2030, 0x0160,
      0x2039, 0x0152, 0xfffd, 0x017d, 0xfffd, 0xfffd, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022,
      0x2013, 0x2014, 0x02dc, 0x2122, 0x0161, 0x203a, 0x0153, 0xfffd, 0x017e, 0x0178};
  std::string out;
  out.reserve(bytes.size() + bytes.size() / 8);
  for (char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    append_utf8(out, b >= 0x80 && b < 0xa0 ? k80[b - 0x80] : static_cast<char32_t>(b));
  }
  return out;
}

// CR counts for text kept as bytes; cleaned text holds none.
bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

// One line (no '\n') with backspaces: what a terminal shows. A character printed over an
// underscore, or an underscore printed over a character, shows the character ("_\bX" underline);
// otherwise the later character wins ("X\bX" bold). Works on whole UTF-8 characters.
std::string resolve_overstrike(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t cursor = 0;
  for (std::size_t i = 0; i < line.size();) {
    std::size_t n = std::max<std::size_t>(1, utf8_sequence(line, i));
    std::string_view c = line.substr(i, n);
    i += n;
    if (c == "\b") {
      if (cursor > 0) --cursor;
      continue;
    }
    if (cursor < cells.size()) {
      if (c != "_") cells[cursor] = c;
    } else {
      cells.push_back(c);
    }
    ++cursor;
  }
  std::string out;
  for (std::string_view c : cells) out += c;
  return out;
}

// --- documents and the split -------------------------------------------------------------------

std::string read_file_bytes(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) MT_FAIL_AS(PrepareError, "input file ", file, " does not exist");
  if (fs::is_directory(file, ec)) MT_FAIL_AS(PrepareError, "input ", file, " is a directory; give the text files in it");
  std::ifstream in(file, std::ios::binary);
  if (!in) MT_FAIL_AS(PrepareError, "cannot open input file ", file, ": ", std::strerror(errno));
  // Sized up front: a string grown while reading takes up to twice the file, three times while it
  // reallocates.
  std::string bytes;
  if (const std::uintmax_t size = fs::file_size(file, ec); !ec) bytes.reserve(static_cast<std::size_t>(size));
  std::array<char, 1 << 16> chunk;
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) bytes.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
  if (in.bad()) MT_FAIL_AS(PrepareError, "cannot read input file ", file);
  return bytes;
}

constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1), a function of (document index, seed) only.
double split_draw(std::int64_t document, std::uint64_t seed) {
  return static_cast<double>(mix64(mix64(static_cast<std::uint64_t>(document)) ^ seed) >> 11) * kTwoToMinus53;
}

// Which documents go to validation: the hash rule, then the guarantees of at least one document
// on each side (when val_fraction > 0 and there are >= 2 documents).
class SplitRule {
 public:
  SplitRule(std::int64_t documents, double val_fraction, std::uint64_t seed)
      : fraction_(val_fraction), seed_(seed) {
    if (val_fraction <= 0 || documents < 2) return;
    std::int64_t val = 0, lowest = 0, highest = 0;
    double low = 2.0, high = -1.0;
    for (std::int64_t i = 0; i < documents; ++i) {
      const double u = split_draw(i, seed);
      val += u < val_fraction;
      if (u < low) std::tie(low, lowest) = std::pair(u, i);
      if (u > high) std::tie(high, highest) = std::pair(u, i);
    }
    if (val == 0) forced_val_ = lowest;
    if (val == documents) forced_train_ = highest;
  }
  bool is_val(std::int64_t document) const {
    if (document == forced_val_) return true;
    if (document == forced_train_) return false;
    return fraction_ > 0 && split_draw(document, seed_) < fraction_;
  }

 private:
  double fraction_;
  std::uint64_t seed_;
  std::int64_t forced_val_ = -1;
  std::int64_t forced_train_ = -1;
};

// Accumulates one split's tokens and writes a shard each time shard_tokens are buffered.
class SplitWriter {
 public:
  // Shards of the version that holds vocab_size ids (shard_version_for): 1 (uint16) up to 65536.
  // `expected_tokens`: about the most tokens the run can make (a token per byte), to size the buffer.
  SplitWriter(fs::path dir, std::string prefix, std::string split, std::int64_t shard_tokens, int vocab_size,
              std::int64_t expected_tokens, const PrepareLog& log)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), split_(std::move(split)), shard_tokens_(shard_tokens),
        vocab_size_(vocab_size), version_(shard_version_for(vocab_size)),
        reserve_(static_cast<std::size_t>(std::min(shard_tokens, expected_tokens))), log_(log) {}

  void append(std::span<const std::int32_t> tokens, std::int64_t document) {
    if (!reserved_) reserve();
    for (std::int32_t t : tokens) {
      if (t < 0 || t >= vocab_size_) {
        MT_FAIL("document ", document, " encodes to token id ", t, ", outside the tokenizer's vocabulary of ",
                vocab_size_);
      }
      // Held as the shard stores them: half the memory for uint16 shards.
      if (version_ == kShardVersionUint32) {
        wide_.push_back(t);
      } else {
        narrow_.push_back(static_cast<std::uint16_t>(t));
      }
      if (buffered() == shard_tokens_) flush();
    }
  }
  void finish() {
    if (buffered() > 0) flush();
  }
  std::vector<fs::path>& shards() { return shards_; }
  std::int64_t tokens() const { return tokens_; }

 private:
  // Sized once, when the split gets its first token: growing would copy the buffer, and hold it
  // up to three times over while it does (reserved pages take no memory until written).
  void reserve() {
    reserved_ = true;
    if (version_ == kShardVersionUint32) {
      wide_.reserve(reserve_);
    } else {
      narrow_.reserve(reserve_);
    }
  }
  std::int64_t buffered() const { return static_cast<std::int64_t>(narrow_.size() + wide_.size()); }
  void flush() {
    const fs::path file = dir_ / shard_file_name(prefix_, split_, static_cast<int>(shards_.size()));
    const std::int64_t count = buffered();
    // write_shard fails only on the file system (the count is bounded by shard_tokens): the disk's
    // or the directory's trouble, named with the file, not a bug.
    try {
      if (version_ == kShardVersionUint32) {
        write_shard(file, std::span<const std::int32_t>(wide_), version_, vocab_size_);
      } else {
        write_shard(file, std::span<const std::uint16_t>(narrow_));
      }
    } catch (const PrepareError&) {
      throw;
    } catch (const Error& e) {
      MT_FAIL_AS(PrepareError, e.message());
    }
    tokens_ += count;
    if (log_) log_("wrote " + file.string() + ": " + std::to_string(count) + " tokens");
    shards_.push_back(file);
    narrow_.clear();
    wide_.clear();
  }

  fs::path dir_;
  std::string prefix_, split_;
  std::int64_t shard_tokens_;
  int vocab_size_;
  std::int32_t version_;
  std::size_t reserve_;
  bool reserved_ = false;
  const PrepareLog& log_;
  std::vector<std::uint16_t> narrow_;  // version 1's ids
  std::vector<std::int32_t> wide_;     // version 2's
  std::vector<fs::path> shards_;
  std::int64_t tokens_ = 0;
};

std::string default_prefix(const fs::path& output_dir) {
  fs::path dir = output_dir.lexically_normal();
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();  // "out/" -> "out"
  if (name.empty() || name == "." || name == "..") {
    std::error_code ec;
    name = fs::weakly_canonical(fs::absolute(output_dir), ec).filename().string();
  }
  return name.empty() ? std::string("data") : name;
}

// Training reads every shard of a split in its directory: shards of another name there would be
// trained together with these (refused by the loader too), so prepare says so before tokenizing.
void refuse_other_shard_sets(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> others = shard_sets_in(dir);
  std::erase(others, prefix);
  if (others.empty()) return;
  std::string names;
  for (const std::string& name : others) names += (names.empty() ? "\"" : ", \"") + name + "\"";
  MT_FAIL_AS(PrepareError, "output directory ", dir, " already holds the shards of ", names, ": shards named \"",
             prefix, "\" beside them would be trained together with them; give another --output (a directory per "
             "corpus)", others.size() == 1 ? ", or --name " + others.front() + " to replace them" : std::string());
}

// Shards <prefix>_{train,val}_NNNNNN.bin in dir that this run did not write: left by an earlier run.
std::vector<fs::path> remove_stale_shards(const fs::path& dir, const std::string& prefix,
                                          const std::set<fs::path>& written) {
  std::vector<fs::path> removed;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    for (const char* split : {"_train_", "_val_"}) {
      const std::string head = prefix + split;
      if (name.size() != head.size() + 10 || name.compare(0, head.size(), head) != 0) continue;
      if (name.compare(name.size() - 4, 4, ".bin") != 0) continue;
      const std::string digits = name.substr(head.size(), 6);
      if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
      if (written.count(entry.path()) == 0) removed.push_back(entry.path());
    }
  }
  std::sort(removed.begin(), removed.end());
  for (const fs::path& file : removed) {
    std::error_code ec;
    if (!fs::remove(file, ec) && ec) MT_FAIL_AS(PrepareError, "cannot remove stale shard ", file, ": ", ec.message());
  }
  return removed;
}

}  // namespace

std::string clean_text(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  std::size_t start = 0;
  while (start <= utf8.size()) {
    std::size_t end = utf8.find_first_of("\r\n", start);
    const bool last = end == std::string_view::npos;
    std::string_view line = utf8.substr(start, last ? std::string_view::npos : end - start);
    // A copy only where overstriking changes the line: a file without line ends is one line.
    const bool overstruck = line.find('\b') != std::string_view::npos;
    const std::string resolved = overstruck ? resolve_overstrike(line) : std::string();
    for (char c : overstruck ? std::string_view(resolved) : line) {
      const auto b = static_cast<unsigned char>(c);
      if ((b < 0x20 && c != '\t') || b == 0x7f) continue;
      out += c;
    }
    if (last) break;
    out += '\n';
    // CRLF is one line end; a lone CR (old Mac text) ends a line too.
    start = end + ((utf8[end] == '\r' && end + 1 < utf8.size() && utf8[end + 1] == '\n') ? 2 : 1);
    if (start == utf8.size()) break;
  }
  return out;
}

namespace {

// One file's documents: views into its text, which is held once (not a copy per document).
struct FileDocuments {
  std::string text;
  std::vector<std::string_view> documents;
  bool transcoded = false;  // read as Windows-1252
};

// The documents of `bytes` (moved in, so kept bytes are not copied), handled as `handling` says.
FileDocuments documents_of(std::string bytes, const std::string& source, TextHandling handling) {
  if (const auto nul = bytes.find('\0'); nul != std::string::npos) {
    MT_FAIL_AS(PrepareError, "input file \"", source, "\" holds a NUL byte at offset ", nul, ": it is binary, not text");
  }
  FileDocuments file;
  const bool keep = handling == TextHandling::keep_bytes;
  const bool utf8 = keep || is_valid_utf8(bytes);  // kept bytes are not decoded
  file.transcoded = !utf8;
  if (keep) {
    file.text = std::move(bytes);
  } else if (utf8) {
    std::string_view view = bytes;
    if (view.substr(0, 3) == "\xef\xbb\xbf") view.remove_prefix(3);
    file.text = clean_text(view);
  } else {
    file.text = clean_text(windows1252_to_utf8(bytes));
  }
  bytes = std::string();  // the raw bytes go before the caller tokenizes
  const std::string_view text = file.text;
  std::vector<std::string_view>& documents = file.documents;

  // Fortune format: some line is exactly "%" ("%\r" too: cleaned text has no CR, kept bytes may).
  struct Separator {
    std::size_t at, next;  // where the "%" line starts; where the line after it starts
  };
  std::vector<Separator> separators;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line == "%" || line == "%\r") separators.push_back({at, std::min(text.size(), end + 1)});
    at = end + 1;
  }
  if (separators.empty()) {
    if (!is_blank(text)) documents.push_back(text);
    return file;
  }
  std::size_t begin = 0;
  for (const Separator& sep : separators) {
    std::string_view entry = text.substr(begin, sep.at - begin);
    if (!is_blank(entry)) documents.push_back(entry);
    begin = sep.next;
  }
  std::string_view tail = text.substr(begin);
  if (!is_blank(tail)) documents.push_back(tail);
  return file;
}

}  // namespace

std::vector<std::string> split_documents(std::string_view bytes, const std::string& source, TextHandling handling,
                                         bool* transcoded) {
  const FileDocuments file = documents_of(std::string(bytes), source, handling);
  if (transcoded != nullptr) *transcoded = file.transcoded;
  return {file.documents.begin(), file.documents.end()};
}

PrepareSummary prepare_corpus(const PrepareOptions& options, const Tokenizer& tokenizer, const PrepareLog& log) {
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0)) {
    MT_FAIL_AS(PrepareError, "validation fraction (--val-fraction) must be in [0, 1), got ", options.val_fraction);
  }
  if (options.shard_tokens < 1 || options.shard_tokens > INT32_MAX) {
    MT_FAIL_AS(PrepareError, "tokens per shard (--shard-tokens) must be in [1, 2^31-1], got ", options.shard_tokens);
  }
  if (options.inputs.empty()) MT_FAIL_AS(PrepareError, "no input files to prepare");
  if (options.output_dir.empty()) MT_FAIL_AS(PrepareError, "no output directory given");
  const std::string prefix = options.prefix.empty() ? default_prefix(options.output_dir) : options.prefix;
  if (prefix.find('/') != std::string::npos) {
    MT_FAIL_AS(PrepareError, "shard name prefix (--name) \"", prefix, "\" must not hold '/'");
  }
  refuse_other_shard_sets(options.output_dir, prefix);

  // Pass 1: count the documents, so the split can guarantee a document on each side. Splitting is
  // cheap next to tokenizing; the files are read again in pass 2.
  std::vector<std::int64_t> per_file;
  std::int64_t documents = 0, expected_tokens = 0;
  for (const fs::path& file : options.inputs) {
    const FileDocuments docs = documents_of(read_file_bytes(file), file.string(), options.text);
    per_file.push_back(static_cast<std::int64_t>(docs.documents.size()));
    documents += per_file.back();
    for (const std::string_view text : docs.documents) expected_tokens += static_cast<std::int64_t>(text.size()) + 1;
  }
  if (documents == 0) {
    MT_FAIL_AS(PrepareError, "empty corpus: the ", options.inputs.size(), " input file(s), starting with ", options.inputs.front(),
            ", hold no text");
  }

  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  if (ec || !fs::is_directory(options.output_dir)) {
    MT_FAIL_AS(PrepareError, "cannot create output directory ", options.output_dir, ": ",
            ec ? ec.message() : std::string("a file of that name exists"));
  }

  PrepareSummary summary;
  summary.tokenizer = tokenizer.name();
  summary.vocab_size = tokenizer.vocab_size();
  summary.documents = documents;
  const SplitRule rule(documents, options.val_fraction, options.split_seed);
  SplitWriter train(options.output_dir, prefix, "train", options.shard_tokens, tokenizer.vocab_size(), expected_tokens, log);
  SplitWriter val(options.output_dir, prefix, "val", options.shard_tokens, tokenizer.vocab_size(), expected_tokens, log);
  const std::int32_t eot = tokenizer.eot_token();

  std::int64_t index = 0;
  for (std::size_t f = 0; f < options.inputs.size(); ++f) {
    const fs::path& file = options.inputs[f];
    std::string bytes = read_file_bytes(file);
    const bool invalid_utf8 = options.text == TextHandling::keep_bytes && !is_valid_utf8(bytes);
    const FileDocuments docs = documents_of(std::move(bytes), file.string(), options.text);
    if (static_cast<std::int64_t>(docs.documents.size()) != per_file[f]) {
      MT_FAIL_AS(PrepareError, "input file ", file, " changed while it was being prepared");
    }
    summary.transcoded_files += docs.transcoded;
    summary.invalid_utf8_files += invalid_utf8;
    for (const std::string_view text : docs.documents) {
      const bool to_val = rule.is_val(index);
      SplitWriter& split = to_val ? val : train;
      // Straight from the tokenizer into the split's shard buffer: no token vector per document.
      split.append(std::span<const std::int32_t>(&eot, 1), index);
      tokenizer.encode_to(text, [&](std::span<const std::int32_t> tokens) { split.append(tokens, index); });
      (to_val ? summary.val_documents : summary.train_documents) += 1;
      ++index;
    }
    if (log) {
      std::string note;
      if (docs.transcoded) note = " (not UTF-8: read as Windows-1252)";
      if (invalid_utf8) {
        note = tokenizer.name() == "gpt2" ? " (not valid UTF-8: gpt2 reads each invalid sequence as U+FFFD)"
                                          : " (not valid UTF-8: kept byte for byte)";
      }
      log("read " + file.string() + ": " + std::to_string(docs.documents.size()) + " documents" + note);
    }
  }
  train.finish();
  val.finish();

  summary.files = static_cast<int>(options.inputs.size());
  summary.train_tokens = train.tokens();
  summary.val_tokens = val.tokens();
  summary.train_shards = std::move(train.shards());
  summary.val_shards = std::move(val.shards());
  std::set<fs::path> written(summary.train_shards.begin(), summary.train_shards.end());
  written.insert(summary.val_shards.begin(), summary.val_shards.end());
  summary.removed_stale_shards = remove_stale_shards(options.output_dir, prefix, written);
  if (log) {
    for (const fs::path& file : summary.removed_stale_shards) log("removed stale shard " + file.string());
  }
  return summary;
}

fs::path default_corpus_dir() { return "/usr/share/games/fortunes"; }

std::vector<fs::path> default_corpus_files(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(dir, ec)) {
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      if (entry.is_symlink() || !entry.is_regular_file()) continue;
      const std::string name = entry.path().filename().string();
      if (name.empty() || name.front() == '.') continue;
      if (entry.path().extension() == ".dat" || entry.path().extension() == ".u8") continue;
      files.push_back(entry.path());
    }
  }
  if (files.empty()) {
    MT_FAIL_AS(PrepareError, "no fortune files in ", dir, ": install Debian's fortunes package (apt-get install fortunes) ",
            "or give the input files explicitly");
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace mt::data
