// Memory of tokenizing text without whitespace and of preparing a corpus, measured by counting
// every allocation of this executable (operator new is replaced below): a long pre-token costs its
// tokens and a window of merge state, not tens of bytes a byte; prepare holds a file's text once.
#include <gtest/gtest.h>
#include <malloc.h>  // defines: malloc_usable_size

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/tests/data_test_util.h"  // defines: ScratchDir, write_bytes
#include "data/tokenizer/bytes_tokenizer.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/gpt2_vocab.h"
#include "data/tokenizer/tiktoken_encoding.h"
#include "data/tokenizer/tiktoken_tokenizer.h"

namespace {

std::atomic<std::size_t> g_live{0}, g_peak{0};

void* counted(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  const std::size_t live = g_live.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
  std::size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void uncounted(void* p) noexcept {
  if (p == nullptr) return;
  g_live.fetch_sub(malloc_usable_size(p));
  std::free(p);
}

}  // namespace

void* operator new(std::size_t size) { return counted(std::malloc(size == 0 ? 1 : size)); }
void* operator new(std::size_t size, std::align_val_t align) {
  const auto a = static_cast<std::size_t>(align);
  return counted(std::aligned_alloc(a, (size + a - 1) / a * a));
}
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t) noexcept { uncounted(p); }
void operator delete(void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }

namespace mt::data {
namespace {

// The most bytes allocated at once while `work` ran, beyond what was allocated before it.
template <class Work>
std::size_t peak_bytes_of(Work&& work) {
  const std::size_t before = g_live.load();
  g_peak.store(before);
  work();
  return g_peak.load() - before;
}

void report(std::size_t peak, std::size_t input) {
  std::cout << "[   info   ] peak " << peak << " bytes allocated for " << input << " bytes of input: "
            << static_cast<double>(peak) / static_cast<double>(input) << " a byte\n";
}

std::string random_letters(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string text(n, 'a');
  for (char& c : text) c = static_cast<char>('a' + rng() % 26);
  return text;
}

// A made-up vocabulary for letter text, ids in rank order: the 256 bytes, every pair of lowercase
// letters, then 4000 triples, each a pair and a letter.
std::vector<std::string> letter_tokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (char x = 'a'; x <= 'z'; ++x)
    for (char y = 'a'; y <= 'z'; ++y) tokens.push_back(std::string{x, y});
  std::set<std::string> triples;
  std::mt19937 rng(2);
  while (triples.size() < 4000) {
    std::string t(3, 'a');
    for (char& c : t) c = static_cast<char>('a' + rng() % 26);
    if (triples.insert(t).second) tokens.push_back(t);
  }
  return tokens;
}

constexpr std::size_t kRun = std::size_t{4} << 20;  // one pre-token piece of 4 MiB

// Bytes a byte of the run may cost while it is encoded: its tokens (4 bytes each, at about 2.5
// bytes a token here), held until the piece ends, a window's merge state, and nothing else that
// grows with the run. A merge over the whole piece takes 20 bytes a byte more.
constexpr double kBytesPerByte = 4.0;

TEST(TokenizerMemory, ALongTiktokenPieceCostsItsTokensNotItsMergeState) {
  TiktokenEncoding encoding = *tiktoken_encoding("cl100k");
  const std::vector<std::string> tokens = letter_tokens();
  encoding.ranks = static_cast<std::int32_t>(tokens.size());
  encoding.special_tokens = {{"<|endoftext|>", encoding.ranks}};
  const TiktokenTokenizer tok(encoding, tokens);
  const std::string run = random_letters(kRun, 1);
  std::size_t count = 0;
  const std::size_t peak = peak_bytes_of([&] {
    tok.encode_to(run, [&](std::span<const std::int32_t> batch) { count += batch.size(); });
  });
  EXPECT_GT(count, kRun / 3);
  report(peak, kRun);
  EXPECT_LT(static_cast<double>(peak), kBytesPerByte * kRun) << peak << " bytes for " << count << " tokens";
}

TEST(TokenizerMemory, ALongGpt2PieceCostsItsTokensNotItsMergeState) {
  // The same vocabulary as GPT-2's merges: a pair's rank is its rank among the tokens after the bytes.
  const std::vector<std::string> tokens = letter_tokens();
  Gpt2Vocab vocab;
  vocab.token_bytes = tokens;
  vocab.token_bytes.push_back("<|endoftext|>");
  vocab.eot_token = static_cast<std::int32_t>(tokens.size());
  for (int b = 0; b < 256; ++b) vocab.byte_token[static_cast<std::size_t>(b)] = b;
  const auto id = [](const std::string& t) {
    return t.size() == 1 ? static_cast<std::int32_t>(static_cast<unsigned char>(t[0]))
                         : 256 + (t[0] - 'a') * 26 + (t[1] - 'a');
  };
  for (std::size_t i = 256; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    vocab.merges.add(id(t.substr(0, t.size() - 1)), id(t.substr(t.size() - 1)),
                     {static_cast<std::int32_t>(i - 256), static_cast<std::int32_t>(i)});
  }
  const Gpt2Tokenizer tok(std::move(vocab));
  const std::string run = random_letters(kRun, 1);
  std::size_t count = 0;
  const std::size_t peak = peak_bytes_of([&] {
    tok.encode_to(run, [&](std::span<const std::int32_t> batch) { count += batch.size(); });
  });
  EXPECT_GT(count, kRun / 3);
  report(peak, kRun);
  EXPECT_LT(static_cast<double>(peak), kBytesPerByte * kRun) << peak << " bytes for " << count << " tokens";
}

TEST(PrepareMemory, HoldsAFileOnceAndAShardOfTokens) {
  testing::ScratchDir dir;
  const auto file = dir.path() / "one.txt";
  testing::write_bytes(file, random_letters(std::size_t{8} << 20, 3));
  PrepareOptions options;
  options.inputs = {file};
  options.output_dir = dir.path() / "out";
  options.val_fraction = 0;
  options.shard_tokens = 1 << 20;
  const BytesTokenizer tok;
  PrepareSummary summary;
  const std::size_t peak = peak_bytes_of([&] { summary = prepare_corpus(options, tok); });
  EXPECT_EQ(summary.train_tokens, (std::int64_t{8} << 20) + 1);
  // The file's bytes and their cleaned copy while it is read, then the text and one shard's uint16
  // tokens: about 2 bytes a byte (one token vector per document and copies made it 12).
  report(peak, std::size_t{8} << 20);
  EXPECT_LT(static_cast<double>(peak), 2.5 * (std::size_t{8} << 20)) << peak;
}

}  // namespace
}  // namespace mt::data
