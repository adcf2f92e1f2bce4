// defines: TiktokenEncoding, tiktoken_encoding, tiktoken_encoding_names, load_tiktoken_ranks
// (see tiktoken_encoding.h)
#include "data/tokenizer/tiktoken_encoding.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "runtime/error.h"  // defines: MT_FAIL

namespace mt::data {
namespace {

// The patterns as tiktoken 0.9 writes them (tiktoken_ext/openai_public.py); the reference test
// compares them with the ones the npm package ships.
const std::vector<TiktokenEncoding>& encodings() {
  static const std::vector<TiktokenEncoding> all = {
      {"cl100k",
       "cl100k_base.tiktoken",
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}},
       100256},
      {"o200k",
       "o200k_base.tiktoken",
       R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
       R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
       R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}},
       199998},
  };
  return all;
}

// -1 for a character outside the standard base64 alphabet.
int base64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with its '=' padding; false for anything else.
bool decode_base64(std::string_view text, std::string* out) {
  out->clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  std::size_t pad = 0;
  while (pad < 2 && text[text.size() - 1 - pad] == '=') ++pad;
  std::uint32_t bits = 0;
  int count = 0;
  for (std::size_t i = 0; i < text.size() - pad; ++i) {
    const int d = base64_digit(text[i]);
    if (d < 0) return false;
    bits = (bits << 6) | static_cast<std::uint32_t>(d);
    if (++count == 4) {
      out->push_back(static_cast<char>(bits >> 16));
      out->push_back(static_cast<char>(bits >> 8));
      out->push_back(static_cast<char>(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count == 3) {
    out->push_back(static_cast<char>(bits >> 10));
    out->push_back(static_cast<char>(bits >> 2));
  } else if (count == 2) {
    out->push_back(static_cast<char>(bits >> 4));
  }
  return !out->empty();
}

}  // namespace

std::int32_t TiktokenEncoding::vocab_size() const {
  std::int32_t top = ranks - 1;
  for (const auto& special : special_tokens) top = std::max(top, special.second);
  return top + 1;
}

const TiktokenEncoding* tiktoken_encoding(const std::string& name) {
  for (const TiktokenEncoding& e : encodings())
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<std::string> tiktoken_encoding_names() {
  std::vector<std::string> names;
  for (const TiktokenEncoding& e : encodings()) names.push_back(e.name);
  return names;
}

std::vector<std::string> load_tiktoken_ranks(const std::filesystem::path& file, std::int32_t expected_ranks) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    MT_FAIL(file.string(), " does not exist: run scripts/fetch_tiktoken.sh to fetch the cl100k_base and "
            "o200k_base ranks, or give --tokenizer-dir a directory holding it");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) MT_FAIL("cannot open ", file.string(), ": ", std::strerror(errno));

  std::vector<std::string> by_rank;
  std::vector<char> seen;
  std::unordered_map<std::string, std::int64_t> line_of;  // token bytes -> line, for duplicates
  std::string line, bytes;
  std::int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    const auto where = [&] { return file.string() + ":" + std::to_string(number); };
    const std::size_t space = line.find(' ');
    if (line.empty() || space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      MT_FAIL(where(), ": expected \"BASE64-TOKEN RANK\", got \"", line.substr(0, 80), "\"");
    }
    const std::string_view token(line.data(), space), rank_text(line.data() + space + 1, line.size() - space - 1);
    std::int32_t rank = -1;
    const auto [end, err] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (err != std::errc() || end != rank_text.data() + rank_text.size() || rank < 0) {
      MT_FAIL(where(), ": the rank \"", rank_text.substr(0, 20), "\" is not an integer in [0, 2^31)");
    }
    if (!decode_base64(token, &bytes)) MT_FAIL(where(), ": \"", token.substr(0, 80), "\" is not base64 of a token");
    if (expected_ranks > 0 && rank >= expected_ranks) {
      MT_FAIL(where(), ": rank ", rank, " is outside [0, ", expected_ranks, "), the ranks of this encoding");
    }
    if (static_cast<std::size_t>(rank) >= by_rank.size()) {
      by_rank.resize(static_cast<std::size_t>(rank) + 1);
      seen.resize(static_cast<std::size_t>(rank) + 1, 0);
    }
    if (seen[rank]) MT_FAIL(where(), ": rank ", rank, " is given twice");
    const auto [it, fresh] = line_of.emplace(bytes, number);
    if (!fresh) MT_FAIL(where(), ": token ", token, " is given twice (first at line ", it->second, ")");
    seen[rank] = 1;
    by_rank[rank] = bytes;
  }
  if (in.bad()) MT_FAIL("cannot read ", file.string());
  const auto missing = std::find(seen.begin(), seen.end(), 0);
  if (missing != seen.end()) MT_FAIL(file.string(), ": rank ", missing - seen.begin(), " is missing");
  if (expected_ranks > 0 && static_cast<std::int32_t>(by_rank.size()) != expected_ranks) {
    MT_FAIL(file.string(), " holds ", by_rank.size(), " ranks, expected ", expected_ranks,
            " (truncated, or the ranks of another encoding)");
  }
  for (int b = 0; b < 256; ++b) {
    if (!line_of.contains(std::string(1, static_cast<char>(b)))) {
      MT_FAIL(file.string(), ": the single byte ", b, " has no rank (byte-level BPE needs all 256)");
    }
  }
  return by_rank;
}

}  // namespace mt::data
