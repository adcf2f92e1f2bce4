// GPT-2's vocabulary, read from the files OpenAI ships: encoder.json (token string -> id, strings
// spelled with bytes_to_unicode) and vocab.bpe (a "#version" line, then one merge "left right" per
// line, in rank order, and a final newline). Everything is checked; a problem throws Error naming the
// file, the line where there is one, and what is wrong.
// defines: Gpt2Vocab, load_gpt2_vocab
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/tokenizer/bpe.h"  // defines: BpeMerges

namespace mt::data {

struct Gpt2Vocab {
  std::vector<std::string> token_bytes;        // id -> the bytes it stands for
  std::array<std::int32_t, 256> byte_token{};  // byte -> id of its one-byte token
  std::int32_t eot_token = -1;                 // id of <|endoftext|>
  BpeMerges merges;                            // on ids, with Encoder.js's key collisions (see .cpp)
};

// Reads dir/encoder.json and dir/vocab.bpe.
Gpt2Vocab load_gpt2_vocab(const std::filesystem::path& dir);

}  // namespace mt::data
