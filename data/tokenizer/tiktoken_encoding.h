// OpenAI's tiktoken encodings cl100k_base and o200k_base: what tiktoken itself compiles in for them
// (tiktoken_ext/openai_public.py: the pre-tokenizer pattern, the special tokens, the ranks file's
// name and size), and the reader of a ranks file in tiktoken's format: one "TOKEN RANK" line per
// token, TOKEN the token's bytes in base64, RANK its id (and its merge priority: lower merges
// first). scripts/fetch_tiktoken.sh fetches the files into assets/cl100k and assets/o200k.
// defines: TiktokenEncoding, tiktoken_encoding, tiktoken_encoding_names, load_tiktoken_ranks
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace mt::data {

struct TiktokenEncoding {
  std::string name;        // meshtrain's tokenizer name: "cl100k" or "o200k"
  std::string ranks_file;  // "cl100k_base.tiktoken", in the tokenizer directory
  std::string pattern;     // the pre-tokenizer's regular expression
  std::vector<std::pair<std::string, std::int32_t>> special_tokens;  // text -> id; <|endoftext|> first
  std::int32_t ranks = 0;  // ordinary tokens: ids 0 .. ranks-1
  std::int32_t vocab_size() const;  // the largest id + 1 (tiktoken's n_vocab)
};

// The encoding called `name`, or nullptr.
const TiktokenEncoding* tiktoken_encoding(const std::string& name);
std::vector<std::string> tiktoken_encoding_names();  // {"cl100k", "o200k"}

// The token bytes by rank, read from `file`. The ranks must be exactly 0 .. n-1, each once, every
// token distinct, and the 256 single bytes among them (byte-level BPE starts from them); with
// expected_ranks > 0, n must be that. Throws Error naming the file, the line and what is wrong (a
// missing file: which script fetches it).
std::vector<std::string> load_tiktoken_ranks(const std::filesystem::path& file, std::int32_t expected_ranks = 0);

}  // namespace mt::data
