// Token-for-token agreement with the JavaScript reference: node runs encode_reference.js, which calls
// the Encoder.js of npm gpt-3-encoder (assets/gpt2), on the same bytes the C++ tokenizer encodes.
// Inputs: generated lines that stress the pre-tokenizer (scripts, marks, digits, contractions,
// whitespace runs, punctuation, emoji, invalid UTF-8), and the fortunes corpus (real English text).
// Also compares JavaScript's \s, \p{L} and \p{N} with the C++ classes over all of Unicode.
// Skips, saying why, where node or the GPT-2 files are missing.
#include <gtest/gtest.h>
#include <unicode/uchar.h>  // defines: u_charType

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <sstream>

#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/gpt2_vocab.h"
#include "data/tokenizer/pretokenizer.h"
#include "data/tokenizer/tests/reference_test_support.h"
#include "data/tokenizer/tests/tokenizer_test_support.h"
#include "data/tokenizer/tokenizer.h"

namespace mt::data {
namespace {

using Ids = std::vector<std::int32_t>;
using testing::ScratchDir;
using testing::base64;
using testing::escaped;
using testing::find_node;
using testing::fortune_records;
using testing::ids_str;
using testing::shell_quote;

// Runs `node encode_reference.js ARGS...` in `dir`; its stderr goes to the failure message.
::testing::AssertionResult run_reference_script(const std::string& node, const std::vector<std::string>& args,
                                                const std::filesystem::path& dir) {
  std::string cmd = shell_quote(node) + " " + shell_quote(MESHTRAIN_TEST_ENCODE_REFERENCE_JS);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  const auto err = dir / "node_stderr.txt";
  cmd += " 2>" + shell_quote(err.string());
  const int status = std::system(cmd.c_str());
  if (status == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << cmd << " exited with status " << status << ":\n"
                                       << testing::read_file(err);
}

// What Encoder.js gives for each of `texts`.
std::vector<Ids> reference_encode(const std::string& node, const std::vector<std::string>& texts) {
  ScratchDir dir;
  nlohmann::json in = nlohmann::json::array();
  for (const auto& t : texts) in.push_back(base64(t));
  testing::write_file(dir.path() / "in.json", in.dump());
  const auto encoder_js = (testing::gpt2_asset_dir() / "Encoder.js").string();
  const auto out_path = dir.path() / "out.json";
  EXPECT_TRUE(run_reference_script(node, {"encode", encoder_js, (dir.path() / "in.json").string(),
                                          out_path.string()}, dir.path()));
  if (!std::filesystem::exists(out_path)) return {};
  return nlohmann::json::parse(testing::read_file(out_path)).get<std::vector<Ids>>();
}

// Encodes each text in C++ and compares with `expected`; reports the first few differences.
void expect_same_tokens(const Tokenizer& tok, const std::vector<std::string>& texts,
                        const std::vector<Ids>& expected) {
  ASSERT_EQ(expected.size(), texts.size());
  int reported = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const Ids got = tok.encode(texts[i]);
    if (got == expected[i]) continue;
    std::size_t at = 0;
    while (at < got.size() && at < expected[i].size() && got[at] == expected[i][at]) ++at;
    const std::size_t from = at < 4 ? 0 : at - 4;
    ADD_FAILURE() << "text " << i << " " << escaped(texts[i].substr(0, 300)) << "\n  tokens differ at " << at
                  << "\n  C++:        ... " << ids_str(got, from) << "\n  Encoder.js: ... "
                  << ids_str(expected[i], from);
    if (++reported == 5) break;
  }
}

#define MT_SKIP_WITHOUT_REFERENCE(node)                                                              \
  MT_SKIP_WITHOUT_GPT2_ASSETS();                                                                     \
  if (!std::filesystem::exists(testing::gpt2_asset_dir() / "Encoder.js"))                           \
    GTEST_SKIP() << "no Encoder.js in " << testing::gpt2_asset_dir() << ": run scripts/fetch_tokenizer.sh"; \
  if ((node).empty()) GTEST_SKIP() << "node is not installed: cannot run the reference Encoder.js"

// Lines built from fragments that exercise every alternative of GPT-2's pattern. Only characters
// of Unicode 15 or older: ICU 72 (the C++ side) does not know letters added since.
std::vector<std::string> generated_lines() {
  const std::vector<std::string> words = {
      "Hello", "world", "the", "THE", "a", "I", "naïve", "café", "Über", "straße", "ÆØÅ", "Ωμέγα",
      "Привет", "мир", "日本語", "テキスト", "中文字符", "한국어", "مرحبا", "بالعالم", "שלום", "हिन्दी",
      "ไทย", "e\u0301", "n\u0303o", "Z\u0351\u0362a\u0489l", "ǅ", "ʰ", "ﬁ", "x\u200by", "🙂", "👍🏽",
      "👨\u200d👩\u200d👧", "🇫🇷", "™", "©", "µs", "°C", "\u00ad"};
  const std::vector<std::string> numbers = {"0", "7", "42", "123", "2024", "3.14159", "1,000,000",
                                            "0x1F", "٣٤٥", "½", "Ⅻ", "x²", "१२३", "12345678901234567890"};
  const std::vector<std::string> contractions = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T",
                                                 "'RE", "'LL", "don't", "I'm", "it's", "we'll", "they've",
                                                 "she'd", "you're", "o'clock", "'", "''", "'''s"};
  const std::vector<std::string> punctuation = {"!", "!!!", "...", "?!", "--", "—", "()", "[]{}",
                                                "\"quoted\"", "#$%^&*", "<|endoftext|>", "\",\"", "},\"",
                                                "\"],\"", "',','", "«»", "¿¡", "。", "、", "…"};
  const std::vector<std::string> invalid = {"\xff", "\xc0\x80", "\xed\xa0\x80", "\xe2\x82", "\xf0\x9f\x98",
                                            "\x80", "\xf4\x90\x80\x80", "\xef\xbb\xbf"};
  const std::vector<std::string> spaces = {" ", " ", " ", " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n",
                                           " \n ", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\v",
                                           "\f", "\x1c", "\ufeff", "\u2003", " \t\n", ""};
  const std::vector<const std::vector<std::string>*> kinds = {&words, &words, &words, &numbers,
                                                              &contractions, &punctuation, &invalid};
  std::mt19937 rng(20240611);
  const auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  std::vector<std::string> lines = {
      "Hello world", "", " ", "  ", "\n", "a   b", "a\n\nb", "trailing   ", "   leading",
      "I'm you'RE it's 'S", "<|endoftext|>", "x<|endoftext|>y", "{\"a\":\"b\",\"c\":[1,2],\"d\":\"e\"}",
      std::string(300, ' ') + "x", std::string(500, '='), std::string(64, '\n') + "end  \n\t "};
  // Long runs of one class: BPE on long pieces.
  std::string letters, cjk;
  for (int i = 0; i < 1200; ++i) letters += static_cast<char>('a' + rng() % 26);
  for (int i = 0; i < 400; ++i) cjk += pick({"的", "是", "不", "了", "人", "我", "在", "有", "他", "这"});
  lines.push_back(letters);
  lines.push_back(cjk);
  for (int n = 0; n < 300; ++n) {
    std::string line = rng() % 6 == 0 ? pick(spaces) : "";
    const int fragments = 1 + static_cast<int>(rng() % 12);
    for (int f = 0; f < fragments; ++f) {
      line += pick(*kinds[rng() % kinds.size()]);
      if (rng() % 3 != 0) line += pick(spaces);  // else glued to the next fragment
    }
    if (rng() % 4 == 0) line += pick(spaces) + pick(spaces);
    lines.push_back(line);
  }
  return lines;
}

TEST(Gpt2Reference, GeneratedLinesMatchEncoderJs) {
  const std::string node = find_node();
  MT_SKIP_WITHOUT_REFERENCE(node);
  const auto tok = make_tokenizer("gpt2", testing::gpt2_asset_dir());
  const std::vector<std::string> lines = generated_lines();
  const std::vector<Ids> expected = reference_encode(node, lines);
  if (HasFailure()) return;
  expect_same_tokens(*tok, lines, expected);
}

TEST(Gpt2Reference, LongRunsInWindowsMatchEncoderJs) {
  // Pieces of 2-4 KB merged in windows of 512 bytes (the tokenizer's are 64 KiB: the same code on
  // pieces Encoder.js, quadratic, can take), as text without whitespace makes them.
  const std::string node = find_node();
  MT_SKIP_WITHOUT_REFERENCE(node);
  Gpt2Tokenizer tok(load_gpt2_vocab(testing::gpt2_asset_dir()));
  tok.set_window_sizes({512, 64});
  std::mt19937 rng(31);
  std::string lower, mixed, cjk, digits;
  for (int i = 0; i < 4000; ++i) lower += static_cast<char>('a' + rng() % 26);
  for (int i = 0; i < 3000; ++i) mixed += static_cast<char>(rng() % 2 ? 'a' + rng() % 26 : 'A' + rng() % 26);
  for (int i = 0; i < 1000; ++i) cjk += std::vector<std::string>{"的", "是", "不", "了", "人", "我"}[rng() % 6];
  for (int i = 0; i < 2000; ++i) digits += static_cast<char>('0' + rng() % 10);
  const std::vector<std::string> lines = {lower, mixed, cjk, digits, std::string(4000, 'a'), " " + lower + "!!" + digits};
  const std::vector<Ids> expected = reference_encode(node, lines);
  if (HasFailure()) return;
  expect_same_tokens(tok, lines, expected);
}

TEST(Gpt2Reference, FortunesMatchEncoderJs) {
  const std::string node = find_node();
  MT_SKIP_WITHOUT_REFERENCE(node);
  const std::filesystem::path dir = MESHTRAIN_TEST_FORTUNES_DIR;
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "no fortunes corpus in " << dir;
  const auto tok = make_tokenizer("gpt2", testing::gpt2_asset_dir());
  std::size_t bytes = 0;
  const std::vector<std::string> records = fortune_records(dir, &bytes);
  ASSERT_FALSE(records.empty());

  // The whole corpus through C++ (timed), a third of its records through node too: Encoder.js takes
  // about 2.5 s a megabyte, and the test suite must stay quick.
  constexpr std::size_t kStride = 3;
  std::vector<std::string> sample;
  for (std::size_t i = 0; i < records.size(); i += kStride) sample.push_back(records[i]);
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t tokens = 0;
  for (const auto& r : records) tokens += tok->encode(r).size();
  const double cpp_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<Ids> expected = reference_encode(node, sample);
  const double js_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::cout << "[   info   ] fortunes: " << records.size() << " records, " << bytes << " bytes, " << tokens
            << " tokens: C++ " << cpp_s << " s for all; node " << js_s << " s for 1 in " << kStride
            << " records\n";
  if (HasFailure()) return;
  expect_same_tokens(*tok, sample, expected);
}

// JavaScript's \s, \p{L} and \p{N} against char_class, over every code point. Code points this ICU
// leaves unassigned (letters and digits added after its Unicode version) are counted, not compared.
TEST(Gpt2Reference, CharClassesMatchJavaScript) {
  const std::string node = find_node();
  if (node.empty()) GTEST_SKIP() << "node is not installed";
  ScratchDir dir;
  const auto out = dir.path() / "classes.json";
  ASSERT_TRUE(run_reference_script(node, {"classes", out.string()}, dir.path()));
  const auto json = nlohmann::json::parse(testing::read_file(out));
  std::vector<std::uint8_t> js(0x110000, static_cast<std::uint8_t>(CharClass::kOther));
  for (const auto& [name, cls] : {std::pair{"letter", CharClass::kLetter}, std::pair{"number", CharClass::kNumber},
                                  std::pair{"space", CharClass::kSpace}}) {
    for (const auto& range : json.at(name)) {
      for (auto cp = range[0].get<std::uint32_t>(); cp <= range[1].get<std::uint32_t>(); ++cp) {
        js[cp] = static_cast<std::uint8_t>(cls);
      }
    }
  }
  int newer = 0, mismatches = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const auto expected = static_cast<CharClass>(js[cp]);
    if (char_class(cp) == expected) continue;
    if (u_charType(static_cast<UChar32>(cp)) == U_UNASSIGNED) {
      ++newer;
      continue;
    }
    if (++mismatches <= 10) {
      ADD_FAILURE() << "U+" << std::hex << static_cast<std::uint32_t>(cp) << ": C++ class "
                    << static_cast<int>(char_class(cp)) << ", JavaScript " << static_cast<int>(expected);
    }
  }
  EXPECT_EQ(mismatches, 0);
  std::cout << "[   info   ] " << newer << " code points are letters or numbers to node (Unicode "
            << "newer than ICU " << U_ICU_VERSION << ") and unassigned to ICU: not compared\n";
}

}  // namespace
}  // namespace mt::data
