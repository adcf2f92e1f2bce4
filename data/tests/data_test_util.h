// Helpers of the data tests: a scratch directory removed afterwards, a byte-level fake tokenizer,
// and raw file writing for hand-made (bad) shards.
// defines: ScratchDir, FakeByteTokenizer, write_bytes, raw_shard
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/shard.h"
#include "data/tokenizer/tokenizer.h"
#include "runtime/error.h"
#include "tests/scratch_dir.h"

namespace mt::data::testing {

using mt::testing::ScratchDir;

// The bytes tokenizer's contract (vocab 256, eot 0, one id per byte), without the tokenizer library.
class FakeByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "fake-bytes"; }
  int vocab_size() const override { return 256; }
  std::int32_t eot_token() const override { return 0; }
  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(std::span<const std::int32_t> tokens) const override {
    std::string text;
    for (std::int32_t t : tokens) {
      if (t < 0 || t > 255) MT_FAIL("fake tokenizer: id ", t, " out of range");
      text += static_cast<char>(t);
    }
    return text;
  }
};

inline void write_bytes(const std::filesystem::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A shard's bytes with any header fields and payload, for files the writer would refuse to make.
inline std::string raw_shard(std::int32_t magic, std::int32_t version, std::int32_t count,
                             const std::vector<std::uint16_t>& tokens) {
  std::vector<std::int32_t> header(kShardHeaderInts, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string bytes(kShardHeaderBytes + tokens.size() * 2, '\0');
  std::memcpy(bytes.data(), header.data(), kShardHeaderBytes);
  if (!tokens.empty()) std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), tokens.size() * 2);
  return bytes;
}

}  // namespace mt::data::testing
