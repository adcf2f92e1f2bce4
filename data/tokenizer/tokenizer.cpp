// defines: collect_tokens, make_tokenizer, default_tokenizer_dir, tokenizer_names, known_vocab_size (see tokenizer.h)
#include "data/tokenizer/tokenizer.h"

#include <cstdlib>

#include "data/tokenizer/bytes_tokenizer.h"  // defines: BytesTokenizer
#include "data/tokenizer/gpt2_tokenizer.h"   // defines: Gpt2Tokenizer
#include "data/tokenizer/gpt2_vocab.h"       // defines: load_gpt2_vocab
#include "data/tokenizer/tiktoken_encoding.h"  // defines: tiktoken_encoding, load_tiktoken_ranks
#include "data/tokenizer/tiktoken_tokenizer.h"  // defines: TiktokenTokenizer
#include "runtime/error.h"                   // defines: MT_FAIL

#ifndef MESHTRAIN_TOKENIZER_DEFAULT_DIR
#error "MESHTRAIN_TOKENIZER_DEFAULT_DIR must be defined (data/tokenizer/CMakeLists.txt)"
#endif

namespace mt::data {

std::vector<std::int32_t> collect_tokens(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<std::int32_t> tokens;
  tokenizer.encode_to(text, [&](std::span<const std::int32_t> batch) { tokens.insert(tokens.end(), batch.begin(), batch.end()); });
  return tokens;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::filesystem::path& dir) {
  if (name == "gpt2") return std::make_unique<Gpt2Tokenizer>(load_gpt2_vocab(dir));
  if (name == "bytes") return std::make_unique<BytesTokenizer>();
  if (const TiktokenEncoding* e = tiktoken_encoding(name)) {
    return std::make_unique<TiktokenTokenizer>(*e, load_tiktoken_ranks(dir / e->ranks_file, e->ranks));
  }
  MT_FAIL("unknown tokenizer \"", name, "\": known are \"gpt2\", \"cl100k\", \"o200k\" and \"bytes\"");
}

std::filesystem::path default_tokenizer_dir() {
  const char* dir = std::getenv("MESHTRAIN_TOKENIZER_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return MESHTRAIN_TOKENIZER_DEFAULT_DIR;
}

std::filesystem::path default_tokenizer_dir(const std::string& name) {
  if (name == "gpt2") return default_tokenizer_dir();
  if (tiktoken_encoding(name) != nullptr) return std::filesystem::path(MESHTRAIN_TOKENIZER_DEFAULT_DIR).parent_path() / name;
  return {};
}

std::vector<std::string> tokenizer_names() { return {"gpt2", "cl100k", "o200k", "bytes"}; }

int known_vocab_size(const std::string& name) {
  if (name == "gpt2") return 50257;
  if (name == "bytes") return 256;
  if (const TiktokenEncoding* e = tiktoken_encoding(name)) return e->vocab_size();
  return 0;
}

}  // namespace mt::data
