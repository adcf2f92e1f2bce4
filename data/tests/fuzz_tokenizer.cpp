// libFuzzer target: GPT-2 tokenizer files and the text they encode. An input is
//   encoder.json <split> vocab.bpe <split> text          (split: mt::fuzz::kFuzzSplit)
// read by make_tokenizer("gpt2", dir) (load_gpt2_vocab: every check of both files), then the text
// encoded and decoded with it. An input without a split is text alone, encoded with OpenAI's
// vocabulary when assets/gpt2 holds it (scripts/fetch_tokenizer.sh), else with the seeds' small one.
// Properties: ids lie in the vocabulary, and valid UTF-8 decodes back to itself.
// Seeds: a small vocabulary made here (the 256 byte tokens, a few merges including Encoder.js's
// comma-key collision, <|endoftext|>) with several texts.
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <nlohmann/json.hpp>  // defines: nlohmann::json (writing the seed encoder.json)

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer/byte_unicode.h"  // defines: byte_to_unicode
#include "data/tokenizer/tokenizer.h"     // defines: make_tokenizer
#include "data/tokenizer/utf8.h"          // defines: decode_utf8, append_utf8
#include "tests/fuzz_support.h"

#ifndef MESHTRAIN_FUZZ_GPT2_DIR
#error "MESHTRAIN_FUZZ_GPT2_DIR must name the directory of OpenAI's encoder.json and vocab.bpe (data/tests/CMakeLists.txt)"
#endif

namespace {
namespace fs = std::filesystem;
using namespace mt::data;

// Byte string -> its spelling in GPT-2's files (bytes_to_unicode, as UTF-8).
std::string spell(std::string_view bytes) {
  std::string out;
  for (const char b : bytes) append_utf8(out, byte_to_unicode(static_cast<std::uint8_t>(b)));
  return out;
}

// encoder.json and vocab.bpe of a small vocabulary: bytes, then one token per merge, then eot.
std::pair<std::string, std::string> small_vocabulary() {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"}, {" w", "or"}, {" wor", "l"},
      {" worl", "d"}, {"\"", ","}, {",", "\""}, {"\",", "\""}, {"\xc3", "\xa9"}, {"1", "2"}};
  nlohmann::json encoder = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) encoder[spell(std::string(1, static_cast<char>(b)))] = id++;
  std::string bpe = "#version: 0.2\n";
  for (const auto& [left, right] : merges) {
    encoder[spell(left + right)] = id++;
    bpe += spell(left) + " " + spell(right) + "\n";
  }
  encoder["<|endoftext|>"] = id++;
  return {encoder.dump(), bpe};
}

const std::vector<std::string>& seed_texts() {
  static const std::vector<std::string> texts = {
      "hello world",
      "hello hello world's \"a\",\"b\" 12 123 caf\xc3\xa9 <|endoftext|>",
      "  \t\n\r\n  trailing spaces   \xe2\x80\x83 and \xf0\x9f\x98\x80 emoji",
      "invalid \xff\xfe utf-8 \xe2\x82 cut \xc0\x80",
      "I'm we'll they'VE you'd 2024-05-20 x=1+2",
  };
  return texts;
}

void write_seeds(const fs::path& dir) {
  const auto [encoder, bpe] = small_vocabulary();
  for (std::size_t i = 0; i < seed_texts().size(); ++i) {
    mt::fuzz::write_seed(dir, "vocab_text_" + std::to_string(i), mt::fuzz::join_input({encoder, bpe, seed_texts()[i]}));
    mt::fuzz::write_seed(dir, "text_" + std::to_string(i), seed_texts()[i]);
  }
}

bool valid_utf8(std::string_view text) {
  std::string again;
  for (const char32_t cp : decode_utf8(text)) append_utf8(again, cp);
  return again == text;
}

void check_round_trip(const Tokenizer& tokenizer, std::string_view text) {
  const std::vector<std::int32_t> ids = tokenizer.encode(text);
  for (const std::int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
  const std::string back = tokenizer.decode(ids);
  if (valid_utf8(text)) FUZZ_CHECK(back == text);
}

// The tokenizer for text-only inputs: OpenAI's when fetched, else the small one.
std::unique_ptr<Tokenizer> text_tokenizer;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mt::fuzz::handle_write_seeds(argc, argv, write_seeds);
  fs::path dir = MESHTRAIN_FUZZ_GPT2_DIR;
  if (!fs::exists(dir / "encoder.json") || !fs::exists(dir / "vocab.bpe")) {
    dir = mt::fuzz::fuzz_dir() / "small_vocab";
    fs::create_directories(dir);
    const auto [encoder, bpe] = small_vocabulary();
    mt::fuzz::write_input(dir / "encoder.json", encoder);
    mt::fuzz::write_input(dir / "vocab.bpe", bpe);
  }
  text_tokenizer = make_tokenizer("gpt2", dir);
  fs::create_directories(mt::fuzz::fuzz_dir() / "vocab");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.find(mt::fuzz::kFuzzSplit) == std::string_view::npos) {
    check_round_trip(*text_tokenizer, input);
    return 0;
  }
  const std::vector<std::string_view> parts = mt::fuzz::split_input(input, 3);
  const fs::path dir = mt::fuzz::fuzz_dir() / "vocab";
  mt::fuzz::write_input(dir / "encoder.json", parts[0]);
  mt::fuzz::write_input(dir / "vocab.bpe", parts[1]);
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = make_tokenizer("gpt2", dir);
  } catch (const std::exception&) {
    return 0;  // rejected files: fine, as long as nothing worse happened
  }
  FUZZ_CHECK(tokenizer->vocab_size() >= 257);
  FUZZ_CHECK(tokenizer->eot_token() >= 0 && tokenizer->eot_token() < tokenizer->vocab_size());
  check_round_trip(*tokenizer, parts[2]);
  return 0;
}
