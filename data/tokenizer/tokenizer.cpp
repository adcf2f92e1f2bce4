// defines: make_tokenizer, default_tokenizer_dir (see tokenizer.h)
#include "data/tokenizer/tokenizer.h"

#include <cstdlib>

#include "data/tokenizer/bytes_tokenizer.h"  // defines: BytesTokenizer
#include "data/tokenizer/gpt2_tokenizer.h"   // defines: Gpt2Tokenizer
#include "data/tokenizer/gpt2_vocab.h"       // defines: load_gpt2_vocab
#include "runtime/error.h"                   // defines: MT_FAIL

#ifndef MESHTRAIN_TOKENIZER_DEFAULT_DIR
#error "MESHTRAIN_TOKENIZER_DEFAULT_DIR must be defined (data/tokenizer/CMakeLists.txt)"
#endif

namespace mt::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::filesystem::path& dir) {
  if (name == "gpt2") return std::make_unique<Gpt2Tokenizer>(load_gpt2_vocab(dir));
  if (name == "bytes") return std::make_unique<BytesTokenizer>();
  MT_FAIL("unknown tokenizer \"", name, "\": known are \"gpt2\" and \"bytes\"");
}

std::filesystem::path default_tokenizer_dir() {
  const char* dir = std::getenv("MESHTRAIN_TOKENIZER_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return MESHTRAIN_TOKENIZER_DEFAULT_DIR;
}

}  // namespace mt::data
