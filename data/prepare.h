// Corpus preparation: text files -> documents -> tokens -> llm.c shards for train and validation.
//
// Documents. A file is in the fortune format when at least one of its lines is exactly "%" (as
// the files of Debian's `fortunes` package, strfile's input; "%" before a CRLF counts too): every
// entry between such lines is one document. Any other file is one document. Entries that are
// blank (only spaces, tabs, CR and LF) are skipped. Files holding NUL bytes are refused as binary.
//
// Text, by default (TextHandling::clean). Files that are valid UTF-8 are read as UTF-8 (a leading
// BOM dropped); any other file is read as Windows-1252 / Latin-1, the usual legacy encoding of such
// text, and converted to UTF-8 (PrepareSummary::transcoded_files counts them). Then: CRLF and lone
// CR become LF, terminal overstriking ("_\bX" underline, "X\bX" bold, as in a few fortunes)
// resolves to the characters printed, and other control characters except tab and newline (the
// bells of some fortunes) are dropped.
// With TextHandling::keep_bytes, none of that: each document is the file's bytes between the "%"
// lines as they are (CR, controls, a BOM and invalid UTF-8 included). The bytes tokenizer keeps
// every byte; gpt2 reads each invalid UTF-8 sequence as U+FFFD, as OpenAI's Encoder.js does
// (PrepareSummary::invalid_utf8_files counts such files).
//
// Tokens and split. Documents are numbered in input order across all files; document i goes to
// validation when a hash of (i, split_seed) falls below val_fraction, else to train. When
// val_fraction > 0 and there are >= 2 documents, validation gets at least one document and train
// keeps at least one; a single document always goes to train. Each document contributes
// [eot] + encode(text) to its split; splits are written as <prefix>_val_000000.bin and
// <prefix>_train_000000.bin, _000001, ..., each shard holding shard_tokens tokens except the last
// (documents continue across shard boundaries, as llm.c's fineweb.py does): shard version 1
// (uint16 ids) for vocabularies up to 65536 such as gpt2's, version 2 (uint32 ids) beyond, as
// cl100k's and o200k's need. Shards of earlier runs with the same prefix and a higher number are
// removed, so find_shards never mixes runs.
//
// Errors. What the caller gave that cannot be used (an option's value, an input file, the output
// directory, the tokenizer's files) throws PrepareError, whose message() is complete for a user;
// any other Error is a bug.
//
// defines: PrepareOptions, PrepareSummary, PrepareLog, PrepareError, TextHandling, prepare_corpus,
//          split_documents, clean_text, default_corpus_dir, default_corpus_files
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"

namespace mt::data {

class Tokenizer;

// A mistake in what prepare was given (see "Errors" above), not a bug.
class PrepareError : public Error {
 public:
  using Error::Error;
};

enum class TextHandling {
  clean,       // decode, fold line ends, drop controls and a BOM (see above)
  keep_bytes,  // tokenize the bytes as given
};

struct PrepareOptions {
  std::string tokenizer = "gpt2";        // "gpt2", "cl100k", "o200k" or "bytes" (make_tokenizer)
  std::filesystem::path tokenizer_dir;   // empty: default_tokenizer_dir(tokenizer)
  std::vector<std::filesystem::path> inputs;  // text files, read in this order
  std::filesystem::path output_dir;      // created when missing
  double val_fraction = 0.1;             // in [0, 1)
  std::int64_t shard_tokens = 100'000'000;  // tokens per shard (llm.c's fineweb.py uses 10^8)
  std::string prefix;                    // empty: the output directory's name
  std::uint64_t split_seed = 20240520;   // keys the train/validation assignment
  TextHandling text = TextHandling::clean;
};

struct PrepareSummary {
  std::string tokenizer;
  int vocab_size = 0;
  int files = 0;
  int transcoded_files = 0;    // clean: files read as Windows-1252 because they were not UTF-8
  int invalid_utf8_files = 0;  // keep_bytes: files that are not valid UTF-8, tokenized as they are
  std::int64_t documents = 0;
  std::int64_t train_documents = 0;
  std::int64_t val_documents = 0;
  std::int64_t train_tokens = 0;  // sums of the shards' token counts (eot included)
  std::int64_t val_tokens = 0;
  std::vector<std::filesystem::path> train_shards;
  std::vector<std::filesystem::path> val_shards;  // empty when val_fraction == 0
  std::vector<std::filesystem::path> removed_stale_shards;
};

// Progress lines (one per input file read, one per shard written); may be empty.
using PrepareLog = std::function<void(const std::string& line)>;

// Makes the tokenizer (make_tokenizer(options.tokenizer, dir)) and prepares the corpus. Throws
// PrepareError for: missing or malformed tokenizer files, no inputs, a missing, unreadable or
// binary input file, an empty corpus (no documents), an output directory that cannot be created or
// a shard that cannot be written, val_fraction outside [0, 1), shard_tokens < 1 or > 2^31-1, a
// prefix holding '/'; Error for a token id outside the tokenizer's vocabulary (a tokenizer's bug).
PrepareSummary prepare_corpus(const PrepareOptions& options, const PrepareLog& log = {});
// The same with a tokenizer already made (options.tokenizer and tokenizer_dir are ignored).
PrepareSummary prepare_corpus(const PrepareOptions& options, const Tokenizer& tokenizer, const PrepareLog& log = {});

// The documents of one file's raw bytes, handled as `text` says (see above). Sets *transcoded when
// the bytes were read as Windows-1252 (clean only). Throws PrepareError naming `source` on NUL bytes.
std::vector<std::string> split_documents(std::string_view bytes, const std::string& source,
                                         TextHandling text = TextHandling::clean, bool* transcoded = nullptr);

// UTF-8 text cleaned as described above: CRLF -> LF, overstriking resolved, controls dropped.
std::string clean_text(std::string_view utf8);

// /usr/share/games/fortunes, where Debian's `fortunes` package installs its files.
std::filesystem::path default_corpus_dir();

// The fortune text files in `dir`, sorted by name: regular files only (no directories such as
// off/, no symbolic links such as the *.u8 aliases), without the strfile indexes (*.dat) and
// hidden files. Throws PrepareError naming the directory (and the package to install) when none.
std::vector<std::filesystem::path> default_corpus_files(const std::filesystem::path& dir = default_corpus_dir());

}  // namespace mt::data
