// What the node reference tests share (GPT-2's against Encoder.js, cl100k's and o200k's against
// tiktoken): finding node, quoting, base64 for the texts handed to it, printing token ids, and the
// fortunes corpus cut into records.
// defines: Ids, find_node, shell_quote, base64, escaped, ids_str, fortune_records
#pragma once

#include <unistd.h>  // defines: access

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer/tests/tokenizer_test_support.h"  // defines: read_file

namespace mt::data::testing {

using Ids = std::vector<std::int32_t>;

// The node to run: the one CMake found, else the first on PATH; empty when there is none.
inline std::string find_node() {
  const std::string configured = MESHTRAIN_TEST_NODE;
  if (!configured.empty() && std::filesystem::exists(configured)) return configured;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const auto candidate = std::filesystem::path(dir.empty() ? "." : dir) / "node";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string base64(const std::string& bytes) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const auto v = (static_cast<std::uint8_t>(bytes[i]) << 16) | (static_cast<std::uint8_t>(bytes[i + 1]) << 8) |
                   static_cast<std::uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kDigits[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const auto v = static_cast<std::uint8_t>(bytes[i]) << 16;
    out += std::string{kDigits[(v >> 18) & 63], kDigits[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const auto v = (static_cast<std::uint8_t>(bytes[i]) << 16) | (static_cast<std::uint8_t>(bytes[i + 1]) << 8);
    out += std::string{kDigits[(v >> 18) & 63], kDigits[(v >> 12) & 63], kDigits[(v >> 6) & 63], '='};
  }
  return out;
}

inline std::string escaped(const std::string& bytes) {
  return nlohmann::json(bytes).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

inline std::string ids_str(const Ids& ids, std::size_t from, std::size_t count = 12) {
  std::string s;
  for (std::size_t i = from; i < std::min(ids.size(), from + count); ++i) s += std::to_string(ids[i]) + " ";
  return s + (from + count < ids.size() ? "..." : "");
}

// The fortunes files cut into their records ("%" lines end each one).
inline std::vector<std::string> fortune_records(const std::filesystem::path& dir, std::size_t* bytes) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() || name.ends_with(".dat") || name.ends_with(".u8")) continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> records;
  *bytes = 0;
  for (const auto& f : files) {
    const std::string text = read_file(f);
    *bytes += text.size();
    for (std::size_t start = 0; start < text.size();) {
      std::size_t end = text.find("\n%\n", start);
      end = end == std::string::npos ? text.size() : end + 3;
      records.push_back(text.substr(start, end - start));
      start = end;
    }
  }
  return records;
}

}  // namespace mt::data::testing
