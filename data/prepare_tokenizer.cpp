// prepare_corpus by tokenizer name: the one place data/ makes a tokenizer (kept apart so the rest of
// prepare works with any Tokenizer, the fakes of tests included).
#include <memory>

#include "data/prepare.h"
#include "data/tokenizer/tokenizer.h"  // defines: make_tokenizer, default_tokenizer_dir

namespace mt::data {

PrepareSummary prepare_corpus(const PrepareOptions& options, const PrepareLog& log) {
  const std::filesystem::path dir = options.tokenizer_dir.empty() ? default_tokenizer_dir(options.tokenizer) : options.tokenizer_dir;
  // make_tokenizer fails only on what it was given (the name, the files in dir): the user's to fix.
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = make_tokenizer(options.tokenizer, dir);
  } catch (const Error& e) {
    MT_FAIL_AS(PrepareError, e.message());
  }
  return prepare_corpus(options, *tokenizer, log);
}

}  // namespace mt::data
