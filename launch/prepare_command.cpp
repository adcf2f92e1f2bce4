// `meshtrain prepare`: text files -> GPT-2 (or byte) tokens -> llm.c train/validation shards.
#include "launch/prepare_command.h"

#include <cstdio>

#include "data/prepare.h"
#include "launch/cli.h"
#include "launch/command_line.h"
#include "launch/model_options.h"

namespace po = boost::program_options;

namespace mt {

int prepare_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc("options");
  desc.add_options()
      ("input", path_values(PathKind::ReadFile)->multitoken(),
       "text files to tokenize, in order (default: the fortunes of Debian's `fortunes` package in "
       "/usr/share/games/fortunes). A file with lines holding only `%` is split into one document "
       "per entry; any other file is one document")
      ("output", path_value(PathKind::WriteDir)->required(), "directory for the shards (created when missing)")
      ("val-fraction", po::value<double>()->default_value(0.1),
       "share of documents held out for validation, in [0, 1)")
      ("shard-tokens", po::value<std::int64_t>()->default_value(100'000'000), "tokens per shard file")
      ("name", po::value<std::string>(), "file name prefix (default: the output directory's name)");
  add_tokenizer_options(desc);
  auto parsed = parse_command_line("prepare",
                                   "Tokenizes text into llm.c token shards: <name>_train_NNNNNN.bin and "
                                   "<name>_val_NNNNNN.bin, each document starting with <|endoftext|>.",
                                   desc, args, mpi.world_rank());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  data::PrepareOptions options;
  options.tokenizer = tokenizer_name(vm);
  options.tokenizer_dir = tokenizer_dir(vm);
  if (vm.count("input")) {
    for (const std::string& f : vm["input"].as<std::vector<std::string>>()) options.inputs.emplace_back(f);
  } else {
    options.inputs = data::default_corpus_files();
  }
  options.output_dir = vm["output"].as<std::string>();
  options.val_fraction = vm["val-fraction"].as<double>();
  options.shard_tokens = vm["shard-tokens"].as<std::int64_t>();
  if (vm.count("name")) options.prefix = vm["name"].as<std::string>();
  if (options.val_fraction < 0.0 || options.val_fraction >= 1.0)
    throw UsageError("--val-fraction must be in [0, 1)");
  // Files are written once, by rank 0; other ranks (if launched under mpirun) wait at the end.
  if (mpi.world_rank() != 0) return 0;
  const data::PrepareSummary s = data::prepare_corpus(options, [](const std::string& line) {
    std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  });
  std::printf("prepared %lld document(s) from %d file(s) with the %s tokenizer: %lld train tokens in %zu shard(s), "
              "%lld validation tokens in %zu shard(s), in %s\n",
              static_cast<long long>(s.documents), s.files, s.tokenizer.c_str(),
              static_cast<long long>(s.train_tokens), s.train_shards.size(), static_cast<long long>(s.val_tokens),
              s.val_shards.size(), options.output_dir.c_str());
  return 0;
}

}  // namespace mt
