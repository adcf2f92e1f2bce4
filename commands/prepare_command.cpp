// `meshtrain prepare`: text files -> GPT-2, cl100k, o200k (or byte) tokens -> llm.c train/validation shards.
#include "commands/prepare_command.h"

#include <cstdio>
#include <optional>

#include "data/prepare.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "launch/early_agreement.h"  // defines: outcome_of_rank0
#include "launch/model_options.h"

namespace po = boost::program_options;

namespace mt {
namespace {

constexpr const char* kSummary =
    "Tokenizes text into llm.c token shards: <name>_train_NNNNNN.bin and <name>_val_NNNNNN.bin, each\n"
    "document starting with <|endoftext|>.\n"
    "\n"
    "The text is cleaned before it is tokenized, unless --keep-bytes is given:\n"
    "  - a file that is not valid UTF-8 is read as Windows-1252 (Latin-1) and converted to UTF-8;\n"
    "  - a leading UTF-8 byte order mark (BOM) is dropped;\n"
    "  - CRLF and lone CR line ends become LF;\n"
    "  - backspace overstriking (\"_\\bX\", \"X\\bX\") becomes the character shown;\n"
    "  - other control characters except tab and newline are dropped.\n"
    "So gpt2's token parity with OpenAI's encoder (Encoder.js), and cl100k's and o200k's with tiktoken,\n"
    "hold for the cleaned text of each document, not for the file; with --keep-bytes they hold for the\n"
    "file's own bytes. Files holding a NUL byte are refused as binary either way.\n"
    "\n"
    "gpt2 and bytes write shards of version 1 (uint16 ids, llm.c's format); cl100k and o200k, whose ids\n"
    "pass 65535, write version 2 (uint32 ids: twice the bytes per token). Train on them with the same\n"
    "--tokenizer: it sets the model's vocabulary.";

}  // namespace

int prepare_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc("options");
  desc.add_options()
      ("input", path_values(PathKind::ReadFile)->multitoken(),
       "text files to tokenize, in order (default: the fortunes of Debian's `fortunes` package in "
       "/usr/share/games/fortunes). A file with lines holding only `%` is split into one document "
       "per entry; any other file is one document")
      ("output", path_value(PathKind::WriteDir)->required(), "directory for the shards (created when missing)")
      ("val-fraction", po::value<double>()->default_value(0.1, "0.1"),
       "share of documents held out for validation, in [0, 1). It needs at least 2 documents: a "
       "single one goes to train, with a warning")
      ("shard-tokens", po::value<std::int64_t>()->default_value(100'000'000), "tokens per shard file")
      ("name", po::value<std::string>(), "file name prefix (default: the output directory's name)")
      ("keep-bytes", po::bool_switch(),
       "tokenize each document's bytes as given: no cleaning (see above), so CR, control characters "
       "and a BOM become tokens, and a file that is not UTF-8 is not converted: --tokenizer bytes "
       "keeps its bytes, gpt2 reads each invalid sequence as U+FFFD (as Encoder.js does; the file "
       "is named). Costs nothing in speed");
  add_tokenizer_options(desc);
  auto parsed = parse_command_line("prepare", kSummary, desc, args, mpi.world_rank());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  data::PrepareOptions options;
  options.tokenizer = tokenizer_name(vm);
  options.tokenizer_dir = tokenizer_dir(vm);
  if (vm.count("input")) {
    for (const std::string& f : vm["input"].as<std::vector<std::string>>()) options.inputs.emplace_back(f);
  }
  options.output_dir = vm["output"].as<std::string>();
  options.val_fraction = vm["val-fraction"].as<double>();
  options.shard_tokens = vm["shard-tokens"].as<std::int64_t>();
  if (vm.count("name")) options.prefix = vm["name"].as<std::string>();
  if (vm["keep-bytes"].as<bool>()) options.text = data::TextHandling::keep_bytes;

  std::optional<std::string> error;
  data::PrepareSummary s;
  if (mpi.world_rank() == 0) {
    try {
      if (options.inputs.empty()) options.inputs = data::default_corpus_files();
      s = data::prepare_corpus(options, [](const std::string& line) {
        std::printf("  %s\n", line.c_str());
        std::fflush(stdout);
      });
    } catch (const data::PrepareError& e) {
      error = e.message();
    }
  }
  // Rank 0 alone reads and writes; the others wait for its outcome, so every rank ends alike: a user's
  // mistake is one line (from rank 0) and exit 2 on every rank. A bug on rank 0 still ends the job
  // through the guard's abort, with its location.
  if (const std::optional<std::string> agreed = outcome_of_rank0(MPI_COMM_WORLD, error)) throw UsageError(*agreed);
  if (mpi.world_rank() != 0) return 0;
  std::printf("prepared %lld document(s) from %d file(s) with the %s tokenizer: %lld train tokens in %zu shard(s), "
              "%lld validation tokens in %zu shard(s), in %s\n",
              static_cast<long long>(s.documents), s.files, s.tokenizer.c_str(),
              static_cast<long long>(s.train_tokens), s.train_shards.size(), static_cast<long long>(s.val_tokens),
              s.val_shards.size(), options.output_dir.c_str());
  std::fflush(stdout);
  // Not an error: the train shards are whole and training runs without a validation loss.
  if (options.val_fraction > 0 && s.val_documents == 0) {
    std::fprintf(stderr,
                 "meshtrain: warning: no validation split: --val-fraction %g needs at least 2 documents and the "
                 "input holds %lld (a file with `%%` lines holds one per entry, any other file is one)\n",
                 options.val_fraction, static_cast<long long>(s.documents));
  }
  return 0;
}

}  // namespace mt
