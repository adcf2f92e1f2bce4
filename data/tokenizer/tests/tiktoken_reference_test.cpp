// cl100k and o200k token for token against tiktoken itself: node runs tiktoken_reference.js, which
// calls the npm package tiktoken 1.0.22 (OpenAI's Rust tiktoken built to WASM, in assets/tiktoken-js)
// on the same bytes the C++ tokenizer encodes. Inputs: lines that stress the patterns (digit groups,
// contractions in any case, CJK, emoji, combining marks, camel case, long whitespace runs, CR LF,
// Unicode spaces, invalid UTF-8) and the whole fortunes corpus. Also checks that the patterns,
// special tokens and rank counts compiled into meshtrain are the package's. Skips, saying why,
// where node or the files of scripts/fetch_tiktoken.sh are missing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>
#include <random>

#include "data/tokenizer/tests/reference_test_support.h"
#include "data/tokenizer/tests/tokenizer_test_support.h"
#include "data/tokenizer/tiktoken_encoding.h"
#include "data/tokenizer/tiktoken_tokenizer.h"
#include "data/tokenizer/tokenizer.h"

namespace mt::data {
namespace {

using testing::Ids;
using testing::ScratchDir;
namespace fs = std::filesystem;

fs::path assets_dir() { return fs::path(MESHTRAIN_TEST_TOKENIZER_DIR).parent_path(); }
fs::path tiktoken_js_dir() { return assets_dir() / "tiktoken-js"; }
fs::path encoding_json(const TiktokenEncoding& e) {
  return assets_dir() / e.name / (e.ranks_file.substr(0, e.ranks_file.find('.')) + ".json");
}

// Runs `node tiktoken_reference.js ARGS...` in `dir`; its stderr goes to the failure message.
::testing::AssertionResult run_script(const std::string& node, const std::vector<std::string>& args, const fs::path& dir) {
  std::string cmd = testing::shell_quote(node) + " " + testing::shell_quote(MESHTRAIN_TEST_TIKTOKEN_REFERENCE_JS);
  for (const auto& a : args) cmd += " " + testing::shell_quote(a);
  const auto err = dir / "node_stderr.txt";
  cmd += " 2>" + testing::shell_quote(err.string());
  const int status = std::system(cmd.c_str());
  if (status == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << cmd << " exited with status " << status << ":\n" << testing::read_file(err);
}

// What tiktoken's encode_ordinary gives for each of `texts`.
std::vector<Ids> reference_encode(const std::string& node, const TiktokenEncoding& e,
                                  const std::vector<std::string>& texts) {
  ScratchDir dir;
  nlohmann::json in = nlohmann::json::array();
  for (const auto& t : texts) in.push_back(testing::base64(t));
  testing::write_file(dir.path() / "in.json", in.dump());
  const auto out = dir.path() / "out.json";
  EXPECT_TRUE(run_script(node, {"encode", tiktoken_js_dir().string(), encoding_json(e).string(),
                                (dir.path() / "in.json").string(), out.string()}, dir.path()));
  if (!fs::exists(out)) return {};
  return nlohmann::json::parse(testing::read_file(out)).get<std::vector<Ids>>();
}

void expect_same_tokens(const Tokenizer& tok, const std::vector<std::string>& texts, const std::vector<Ids>& expected) {
  ASSERT_EQ(expected.size(), texts.size());
  int reported = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const Ids got = tok.encode(texts[i]);
    if (got == expected[i]) continue;
    std::size_t at = 0;
    while (at < got.size() && at < expected[i].size() && got[at] == expected[i][at]) ++at;
    const std::size_t from = at < 4 ? 0 : at - 4;
    ADD_FAILURE() << tok.name() << " text " << i << " " << testing::escaped(texts[i].substr(0, 300))
                  << "\n  tokens differ at " << at << "\n  C++:      ... " << testing::ids_str(got, from)
                  << "\n  tiktoken: ... " << testing::ids_str(expected[i], from);
    if (++reported == 5) break;
  }
}

class TiktokenReference : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    encoding_ = tiktoken_encoding(GetParam());
    ASSERT_NE(encoding_, nullptr);
    dir_ = assets_dir() / encoding_->name;
    if (!fs::exists(dir_ / encoding_->ranks_file) || !fs::exists(encoding_json(*encoding_)))
      GTEST_SKIP() << "no " << encoding_->ranks_file << " in " << dir_ << ": run scripts/fetch_tiktoken.sh";
    if (!fs::exists(tiktoken_js_dir() / "lite" / "tiktoken.cjs"))
      GTEST_SKIP() << "no tiktoken JavaScript in " << tiktoken_js_dir() << ": run scripts/fetch_tiktoken.sh";
    node_ = testing::find_node();
    if (node_.empty()) GTEST_SKIP() << "node is not installed: cannot run the reference tiktoken";
  }
  const TiktokenEncoding* encoding_ = nullptr;
  fs::path dir_;
  std::string node_;
};

TEST_P(TiktokenReference, PatternSpecialTokensAndRanksAreThePackages) {
  ScratchDir dir;
  const auto out = dir.path() / "spec.json";
  ASSERT_TRUE(run_script(node_, {"spec", encoding_json(*encoding_).string(), out.string()}, dir.path()));
  const auto spec = nlohmann::json::parse(testing::read_file(out));
  EXPECT_EQ(spec.at("pattern").get<std::string>(), encoding_->pattern);
  nlohmann::json specials = nlohmann::json::object();
  for (const auto& [text, id] : encoding_->special_tokens) specials[text] = id;
  EXPECT_EQ(spec.at("special_tokens"), specials);
  EXPECT_EQ(spec.at("ranks").get<int>(), encoding_->ranks);
}

// Lines built from fragments that exercise every alternative of both patterns. Only characters of
// Unicode 14 or older: PCRE2 10.42 (the C++ side) does not know letters added since.
std::vector<std::string> tricky_lines() {
  const std::vector<std::string> words = {
      "Hello", "world", "the", "THE", "a", "I", "naïve", "café", "Über", "straße", "ÆØÅ", "Ωμέγα", "Привет",
      "МИР", "日本語", "テキスト", "中文字符", "한국어", "مرحبا", "שלום", "हिन्दी", "ไทย", "e\u0301", "E\u0301TAT",
      "n\u0303o", "Z\u0351\u0362a\u0489l", "\u0301\u0302", "ǅungla", "ǅ", "ʰ", "ﬁ", "x\u200by", "camelCase",
      "HTTPServer", "getHTTPResponseCode", "iPhone", "ÉCOLE", "McDonald", "🙂", "👍🏽", "👨\u200d👩\u200d👧",
      "🇫🇷", "™", "©", "µs", "°C", "\u00ad", "ſ", "\u212a", "𝐀𝐁𝐂", "𐍈"};
  const std::vector<std::string> numbers = {"0", "7", "42", "123", "1234", "12345", "123456", "1234567",
                                            "2024", "3.14159", "1,000,000", "0x1F", "٣٤٥", "٣٤٥٦", "½", "Ⅻ",
                                            "x²", "१२३४", "12345678901234567890", "v1.2.3", "10:30"};
  const std::vector<std::string> contractions = {
      "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE", "'VE", "'M", "'LL", "'Ll", "'D",
      "don't", "DON'T", "I'm", "I'M", "it's", "IT'S", "we'll", "WE'LL", "they've", "she'd", "you're", "YOU'RE",
      "o'clock", "'", "''", "'''s", "'ſ", "'\u212a", "’s", "l'été"};
  const std::vector<std::string> punctuation = {"!", "!!!", "...", "?!", "--", "—", "()", "[]{}", "\"quoted\"",
                                                "#$%^&*", "<|endoftext|>", "<|fim_prefix|>", "\",\"", "},\"",
                                                "//", "a/b", "http://x.org/a/b/", "/*", "*/\n", ".\r\n", "«»",
                                                "¿¡", "。", "、", "…", "_", "__init__", "@", "~/"};
  const std::vector<std::string> invalid = {"\xff", "\xc0\x80", "\xed\xa0\x80", "\xe2\x82", "\xf0\x9f\x98", "\x80",
                                            "\xf4\x90\x80\x80", "\xef\xbb\xbf"};
  const std::vector<std::string> spaces = {" ", " ", " ", " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", " \n ",
                                           "\r\n", "\r\n\r\n", " \r\n", "\r", "\n\r", "\u00a0", "\u3000",
                                           "\u2028", "\u0085", "\u180e", "\v", "\f", "\x1c", "\ufeff", "\u2003",
                                           " \t\n", "\t \n  ", ""};
  const std::vector<const std::vector<std::string>*> kinds = {&words, &words, &words, &numbers,
                                                              &contractions, &punctuation, &invalid};
  std::mt19937 rng(20240807);
  const auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  std::vector<std::string> lines = {
      "Hello world", "", " ", "  ", "\n", "a   b", "a\n\nb", "a \n\n b", "trailing   ", "   leading",
      "I'm you'RE it's 'S I'M", "<|endoftext|>", "x<|endoftext|>y", "{\"a\":\"b\",\"c\":[1,2],\"d\":\"e\"}",
      "line one\r\nline two\r\n\r\n  indented\r\n", "int main() {\n    return 0;\n}\n",
      "    def f(x):\n        return x  \n\n\n", "1234567890123", "a1b22c333d4444", "ЁЛКИ-ПАЛКИ",
      std::string(300, ' ') + "x", std::string(500, '='), std::string(64, '\n') + "end  \n\t ",
      std::string(200, ' ') + "\n" + std::string(200, '\t'), std::string(40, '\r') + std::string(40, '\n')};
  // Long runs of one class: BPE on long pieces.
  std::string letters, cjk, digits;
  for (int i = 0; i < 1200; ++i) letters += static_cast<char>('a' + rng() % 26);
  for (int i = 0; i < 400; ++i) cjk += pick({"的", "是", "不", "了", "人", "我", "在", "有", "他", "这"});
  for (int i = 0; i < 100; ++i) digits += static_cast<char>('0' + rng() % 10);
  lines.insert(lines.end(), {letters, cjk, digits});
  for (int n = 0; n < 400; ++n) {
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

TEST_P(TiktokenReference, TrickyTextsMatchTiktoken) {
  const auto tok = make_tokenizer(encoding_->name, dir_);
  const std::vector<std::string> lines = tricky_lines();
  const std::vector<Ids> expected = reference_encode(node_, *encoding_, lines);
  if (HasFailure()) return;
  expect_same_tokens(*tok, lines, expected);
}

TEST_P(TiktokenReference, LongRunsInWindowsMatchTiktoken) {
  // Pieces of 8-24 KB merged in windows of 1 KiB (the tokenizer's are 64 KiB: the same code on
  // pieces the quadratic reference can take), as text without whitespace makes them.
  TiktokenTokenizer tok(*encoding_, load_tiktoken_ranks(dir_ / encoding_->ranks_file, encoding_->ranks));
  tok.set_window_sizes({1024, 128});
  std::mt19937 rng(32);
  std::string lower, mixed, cjk, punctuation;
  for (int i = 0; i < 24000; ++i) lower += static_cast<char>('a' + rng() % 26);
  for (int i = 0; i < 12000; ++i) mixed += static_cast<char>(rng() % 2 ? 'a' + rng() % 26 : 'A' + rng() % 26);
  for (int i = 0; i < 4000; ++i) cjk += std::vector<std::string>{"的", "是", "不", "了", "人", "我"}[rng() % 6];
  for (int i = 0; i < 8000; ++i) punctuation += "!?-=+*/#"[rng() % 8];
  const std::vector<std::string> lines = {lower, mixed, cjk, punctuation, std::string(20000, 'a'), lower + "1234" + cjk};
  const std::vector<Ids> expected = reference_encode(node_, *encoding_, lines);
  if (HasFailure()) return;
  expect_same_tokens(tok, lines, expected);
}

TEST_P(TiktokenReference, FortunesMatchTiktoken) {
  const fs::path corpus = MESHTRAIN_TEST_FORTUNES_DIR;
  if (!fs::is_directory(corpus)) GTEST_SKIP() << "no fortunes corpus in " << corpus;
  const auto tok = make_tokenizer(encoding_->name, dir_);
  std::size_t bytes = 0;
  const std::vector<std::string> records = testing::fortune_records(corpus, &bytes);
  ASSERT_FALSE(records.empty());
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t tokens = 0;
  for (const auto& r : records) tokens += tok->encode(r).size();
  const double cpp_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<Ids> expected = reference_encode(node_, *encoding_, records);
  const double js_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::cout << "[   info   ] " << encoding_->name << " fortunes: " << records.size() << " records, " << bytes
            << " bytes, " << tokens << " tokens: C++ " << cpp_s << " s (cold cache), tiktoken in node " << js_s
            << " s\n";
  if (HasFailure()) return;
  expect_same_tokens(*tok, records, expected);
}

INSTANTIATE_TEST_SUITE_P(Encodings, TiktokenReference, ::testing::Values("cl100k", "o200k"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace mt::data
