// What the tokenizer tests share: where the GPT-2 files are, a scratch directory, file writing, and
// a tiny synthetic GPT-2 vocabulary that needs no downloaded files.
// defines: gpt2_asset_dir, have_gpt2_assets, MT_SKIP_WITHOUT_GPT2_ASSETS, ScratchDir, write_file,
//          read_file, byte_symbols, TinyVocab, write_tiny_vocab, random_merges, random_run
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>  // defines: getpid

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer/byte_unicode.h"  // defines: byte_to_unicode
#include "data/tokenizer/utf8.h"          // defines: append_utf8

namespace mt::data::testing {

inline std::filesystem::path gpt2_asset_dir() { return MESHTRAIN_TEST_TOKENIZER_DIR; }

inline bool have_gpt2_assets() {
  return std::filesystem::exists(gpt2_asset_dir() / "encoder.json") &&
         std::filesystem::exists(gpt2_asset_dir() / "vocab.bpe");
}

#define MT_SKIP_WITHOUT_GPT2_ASSETS()                                                              \
  do {                                                                                             \
    if (!::mt::data::testing::have_gpt2_assets())                                                  \
      GTEST_SKIP() << "no GPT-2 tokenizer files in " << ::mt::data::testing::gpt2_asset_dir()      \
                   << ": run scripts/fetch_tokenizer.sh";                                          \
  } while (0)

// A fresh directory under the system temp dir, removed with everything in it at the end of scope.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("meshtrain_tokenizer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// How encoder.json and vocab.bpe spell `bytes` (GPT-2's bytes_to_unicode, as UTF-8).
inline std::string byte_symbols(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) append_utf8(out, byte_to_unicode(static_cast<std::uint8_t>(c)));
  return out;
}

// A GPT-2-shaped vocabulary small enough to reason about: the 256 bytes (id = byte value), then one
// token per merge (id 256 + rank), then <|endoftext|>.
struct TinyVocab {
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"}, {" w", "or"},
      {"a", "a"}, {"aa", "aa"}};
  std::int32_t id(const std::string& token) const {
    if (token.size() == 1) return static_cast<std::uint8_t>(token[0]);
    for (std::size_t r = 0; r < merges.size(); ++r) {
      if (merges[r].first + merges[r].second == token) return 256 + static_cast<std::int32_t>(r);
    }
    ADD_FAILURE() << "no token " << token;
    return -1;
  }
  std::int32_t eot() const { return 256 + static_cast<std::int32_t>(merges.size()); }
};

// Writes encoder.json and vocab.bpe of `vocab` into `dir`.
inline void write_tiny_vocab(const std::filesystem::path& dir, const TinyVocab& vocab) {
  std::string json = "{";
  const auto add = [&](const std::string& bytes, std::int32_t id) {
    std::string escaped;
    for (const char c : byte_symbols(bytes)) {
      if (c == '"' || c == '\\') escaped.push_back('\\');
      escaped.push_back(c);
    }
    if (json.size() > 1) json += ", ";
    json += "\"" + escaped + "\": " + std::to_string(id);
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)), b);
  for (const auto& [left, right] : vocab.merges) add(left + right, vocab.id(left + right));
  if (json.size() > 1) json += ", ";
  json += "\"<|endoftext|>\": " + std::to_string(vocab.eot()) + "}";
  write_file(dir / "encoder.json", json);

  std::string bpe = "#version: 0.2\n";
  for (const auto& [left, right] : vocab.merges) bpe += byte_symbols(left) + " " + byte_symbols(right) + "\n";
  write_file(dir / "vocab.bpe", bpe);
}

// The merges of a synthetic BPE vocabulary over the characters `characters` (UTF-8), in rank
// order, as BPE training makes them: first each multi-byte character from its bytes, then `count`
// more, each two earlier tokens joined (at most 16 bytes, all distinct).
inline std::vector<std::pair<std::string, std::string>> random_merges(const std::vector<std::string>& characters,
                                                                       std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> tokens;
  std::set<std::string> known;
  std::vector<std::pair<std::string, std::string>> merges;
  const auto add = [&](const std::string& left, const std::string& right) {
    if (!known.insert(left + right).second) return false;
    tokens.push_back(left + right);
    if (left.size() + right.size() > 1) merges.emplace_back(left, right);
    return true;
  };
  for (const std::string& c : characters) {
    add(c.substr(0, 1), "");
    for (std::size_t i = 1; i < c.size(); ++i) add(c.substr(0, i), c.substr(i, 1));
  }
  const std::size_t before = merges.size();
  while (merges.size() < before + count) {
    // Recent tokens half the time, as training merges what it just made; any token otherwise.
    const auto pick = [&] {
      const std::size_t span = rng() % 2 == 0 ? std::min<std::size_t>(tokens.size(), 100) : tokens.size();
      return tokens[tokens.size() - 1 - rng() % span];
    };
    const std::string left = pick(), right = pick();
    if (left.size() + right.size() <= 16) add(left, right);
  }
  return merges;
}

// `length` bytes of characters drawn at random from `characters` (whole characters: may end short).
inline std::string random_run(const std::vector<std::string>& characters, std::size_t length, std::mt19937& rng) {
  std::string run;
  while (run.size() < length) {
    const std::string& c = characters[rng() % characters.size()];
    if (run.size() + c.size() > length) break;
    run += c;
  }
  return run;
}

}  // namespace mt::data::testing
