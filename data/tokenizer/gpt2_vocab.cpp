// defines: load_gpt2_vocab (see gpt2_vocab.h)
#include "data/tokenizer/gpt2_vocab.h"

#include <nlohmann/json.hpp>  // defines: nlohmann::json

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "data/tokenizer/byte_unicode.h"  // defines: unicode_to_byte
#include "data/tokenizer/pretokenizer.h"  // defines: char_class (JavaScript's \s)
#include "data/tokenizer/utf8.h"          // defines: decode_utf8
#include "runtime/error.h"                // defines: MT_FAIL

namespace mt::data {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    MT_FAIL(path.string(), " does not exist: run scripts/fetch_tokenizer.sh to fetch GPT-2's "
            "tokenizer files, or point MESHTRAIN_TOKENIZER_DIR at a directory holding them");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) MT_FAIL("cannot open ", path.string(), ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) MT_FAIL("cannot read ", path.string());
  return text.str();
}

std::string hex_code_point(char32_t cp) {
  std::ostringstream s;
  s << "U+" << std::uppercase << std::hex << std::setw(4) << std::setfill('0')
    << static_cast<std::uint32_t>(cp);
  return s.str();
}

// The bytes a vocabulary string spells, or the first code point that is no byte symbol.
bool spelled_bytes(std::string_view spelled, std::string* bytes, char32_t* bad) {
  bytes->clear();
  for (const char32_t cp : decode_utf8(spelled)) {
    const int b = unicode_to_byte(cp);
    if (b < 0) {
      *bad = cp;
      return false;
    }
    bytes->push_back(static_cast<char>(b));
  }
  return true;
}

struct Encoder {
  std::vector<std::string> token_bytes;
  std::unordered_map<std::string, std::int32_t> id_of;  // bytes -> id
};

Encoder read_encoder(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL(path.string(), " is not valid JSON: ", e.what());
  }
  if (!json.is_object() || json.empty()) {
    MT_FAIL(path.string(), " must be a non-empty JSON object of token -> id, not ", json.type_name());
  }
  const auto size = static_cast<std::int64_t>(json.size());
  Encoder enc;
  enc.token_bytes.resize(static_cast<std::size_t>(size));
  std::vector<bool> seen(static_cast<std::size_t>(size), false);
  std::string bytes;
  for (const auto& [token, value] : json.items()) {
    if (!value.is_number_integer()) {
      MT_FAIL(path.string(), ": the id of token ", nlohmann::json(token).dump(), " is ", value.dump(),
              ", not an integer");
    }
    const auto id = value.get<std::int64_t>();
    if (id < 0 || id >= size) {
      MT_FAIL(path.string(), ": token ", nlohmann::json(token).dump(), " has id ", id, ", outside [0, ",
              size, ") for ", size, " tokens");
    }
    if (seen[static_cast<std::size_t>(id)]) {
      MT_FAIL(path.string(), ": id ", id, " is given to two tokens, one of them ",
              nlohmann::json(token).dump());
    }
    seen[static_cast<std::size_t>(id)] = true;
    char32_t bad = 0;
    if (!spelled_bytes(token, &bytes, &bad)) {
      MT_FAIL(path.string(), ": token ", nlohmann::json(token).dump(), " (id ", id, ") contains ",
              hex_code_point(bad), ", which is none of GPT-2's 256 byte symbols");
    }
    enc.token_bytes[static_cast<std::size_t>(id)] = bytes;
    enc.id_of.emplace(bytes, static_cast<std::int32_t>(id));
  }
  return enc;
}

struct MergeLine {
  std::string left, right;  // bytes
  int line = 0;             // 1-based, for messages
};

std::vector<MergeLine> read_merges(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  if (text.empty()) MT_FAIL(path.string(), " is empty");
  if (text.back() != '\n') {
    MT_FAIL(path.string(), " does not end with a newline: the file is truncated");
  }
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = text.find('\n', start);
    lines.push_back(std::string_view(text).substr(start, end - start));
    start = end + 1;
  }
  if (!lines[0].starts_with("#version")) {
    MT_FAIL(path.string(), ": line 1 must be the \"#version: ...\" header, not \"", lines[0], "\"");
  }
  std::vector<MergeLine> merges;
  merges.reserve(lines.size() - 1);
  for (std::size_t k = 1; k < lines.size(); ++k) {
    const int line = static_cast<int>(k) + 1;
    // Encoder.js splits on \s and drops empty parts.
    std::vector<std::u32string> parts;
    std::u32string part;
    for (const char32_t cp : decode_utf8(lines[k])) {
      if (char_class(cp) == CharClass::kSpace) {
        if (!part.empty()) parts.push_back(std::move(part));
        part.clear();
      } else {
        part.push_back(cp);
      }
    }
    if (!part.empty()) parts.push_back(std::move(part));
    if (parts.size() != 2) {
      MT_FAIL(path.string(), ": line ", line, " must be a merge \"left right\", not \"", lines[k], "\"");
    }
    MergeLine m;
    m.line = line;
    for (int side = 0; side < 2; ++side) {
      std::string& bytes = side == 0 ? m.left : m.right;
      for (const char32_t cp : parts[static_cast<std::size_t>(side)]) {
        const int b = unicode_to_byte(cp);
        if (b < 0) {
          MT_FAIL(path.string(), ": line ", line, " contains ", hex_code_point(cp),
                  ", which is none of GPT-2's 256 byte symbols");
        }
        bytes.push_back(static_cast<char>(b));
      }
    }
    merges.push_back(std::move(m));
  }
  return merges;
}

// Encoder.js looks merges up in a plain object keyed by the pair array, which JavaScript turns into
// the string left + "," + right. So the pair ("\",", "\"") finds the rank of the merge ("\"", ",\""):
// same key, and the same merged token "\",\"". GPT-2's vocab.bpe has 11 such keys, all around
// commas and quotes. To encode as Encoder.js does, every way to split a merge's key at a comma into
// two vocabulary tokens is a merge at that key's rank; a key listed twice keeps its later rank.
BpeMerges build_merges(const std::vector<MergeLine>& lines, const Encoder& enc,
                       const std::filesystem::path& path) {
  const auto id_of = [&](const std::string& bytes) -> std::int32_t {
    const auto it = enc.id_of.find(bytes);
    return it == enc.id_of.end() ? -1 : it->second;
  };
  const auto printable = [](const std::string& bytes) { return nlohmann::json(bytes).dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace); };

  std::unordered_map<std::string, std::int32_t> key_rank;
  for (std::size_t r = 0; r < lines.size(); ++r) {
    const MergeLine& m = lines[r];
    for (const std::string* side : {&m.left, &m.right}) {
      if (id_of(*side) < 0) {
        MT_FAIL(path.string(), ": line ", m.line, ": symbol ", printable(*side),
                " is not a token of encoder.json");
      }
    }
    if (id_of(m.left + m.right) < 0) {
      MT_FAIL(path.string(), ": line ", m.line, ": the merged token ", printable(m.left + m.right),
              " is not in encoder.json");
    }
    key_rank[m.left + "," + m.right] = static_cast<std::int32_t>(r);
  }

  BpeMerges merges;
  for (std::size_t r = 0; r < lines.size(); ++r) {
    const std::string key = lines[r].left + "," + lines[r].right;
    if (key_rank.at(key) != static_cast<std::int32_t>(r)) continue;  // listed again later
    for (std::size_t comma = key.find(','); comma != std::string::npos; comma = key.find(',', comma + 1)) {
      const std::string left = key.substr(0, comma), right = key.substr(comma + 1);
      const std::int32_t a = id_of(left), b = id_of(right);
      if (a < 0 || b < 0) continue;
      const std::int32_t result = id_of(left + right);
      if (result < 0) {
        MT_FAIL(path.string(), ": line ", lines[r].line, ": Encoder.js would merge ", printable(left),
                " and ", printable(right), " (same key as this line) into ", printable(left + right),
                ", which is not in encoder.json");
      }
      merges.add(a, b, {static_cast<std::int32_t>(r), result});
    }
  }
  return merges;
}

}  // namespace

Gpt2Vocab load_gpt2_vocab(const std::filesystem::path& dir) {
  const auto encoder_path = dir / "encoder.json";
  const auto vocab_path = dir / "vocab.bpe";
  Encoder enc = read_encoder(encoder_path);

  Gpt2Vocab vocab;
  for (int b = 0; b < 256; ++b) {
    const auto it = enc.id_of.find(std::string(1, static_cast<char>(b)));
    if (it == enc.id_of.end()) {
      MT_FAIL(encoder_path.string(), " has no token for byte ", b, " (spelled ",
              hex_code_point(byte_to_unicode(static_cast<std::uint8_t>(b))), ")");
    }
    vocab.byte_token[static_cast<std::size_t>(b)] = it->second;
  }
  const auto eot = enc.id_of.find(std::string(kEndOfText));
  if (eot == enc.id_of.end()) MT_FAIL(encoder_path.string(), " has no ", kEndOfText, " token");
  vocab.eot_token = eot->second;

  const std::vector<MergeLine> lines = read_merges(vocab_path);
  // GPT-2's tokens are the 256 bytes, one per merge, and <|endoftext|>: fewer merges means a
  // vocab.bpe cut at a line boundary.
  const std::size_t expected = enc.token_bytes.size() - 257;
  if (lines.size() != expected) {
    MT_FAIL(vocab_path.string(), " has ", lines.size(), " merges, but the ", enc.token_bytes.size(),
            " tokens of encoder.json need ", expected,
            " (256 bytes + one token per merge + <|endoftext|>): is it truncated or from another vocabulary?");
  }
  vocab.merges = build_merges(lines, enc, vocab_path);
  vocab.token_bytes = std::move(enc.token_bytes);
  return vocab;
}

}  // namespace mt::data
