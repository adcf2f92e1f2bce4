#include "launch/model_options.h"

#include "data/tokenizer/tokenizer.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/path_option.h"

namespace po = boost::program_options;

namespace mt {

void add_model_options(po::options_description& desc) {
  std::string presets;
  for (const std::string& p : gpt_preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  desc.add_options()
      ("model", po::value<std::string>()->default_value("tiny"),
       ("model preset: " + presets + ". tiny: 4 layers x 64 channels (tests); small: 6 x 384; gpt2: "
        "OpenAI's 124M (12 x 768, context 1024); the larger gpt2 shapes as published")
           .c_str())
      ("layers", po::value<int>(), "transformer blocks (overrides the preset)")
      ("heads", po::value<int>(), "attention heads; must divide --channels (overrides the preset)")
      ("channels", po::value<int>(), "model width C (overrides the preset)")
      ("max-seq-len", po::value<int>(), "context length: rows of the position embedding (overrides the preset)")
      ("padded-vocab", po::value<int>(),
       "rows of the token embedding, >= the tokenizer's vocabulary (default: rounded up to 128)");
}

GptConfig read_model_config(const po::variables_map& vm, int vocab_size) {
  GptConfig c = gpt_preset(vm["model"].as<std::string>());
  if (vm.count("layers")) c.layers = vm["layers"].as<int>();
  if (vm.count("heads")) c.heads = vm["heads"].as<int>();
  if (vm.count("channels")) c.channels = vm["channels"].as<int>();
  if (vm.count("max-seq-len")) c.max_seq_len = vm["max-seq-len"].as<int>();
  c.vocab_size = vocab_size;
  c.padded_vocab = vm.count("padded-vocab") ? vm["padded-vocab"].as<int>() : 0;
  c.validate();
  return c;
}

void add_tokenizer_options(po::options_description& desc) {
  desc.add_options()
      ("tokenizer", po::value<std::string>()->default_value("gpt2"),
       "gpt2 (OpenAI's byte-level BPE, vocab 50257) or bytes (one token per byte, vocab 256)")
      ("tokenizer-dir", path_value(PathKind::ReadDir),
       "directory with GPT-2's encoder.json and vocab.bpe (default: $MESHTRAIN_TOKENIZER_DIR, else "
       "assets/gpt2, filled by scripts/fetch_tokenizer.sh)");
}

std::string tokenizer_name(const po::variables_map& vm) {
  const std::string name = vm["tokenizer"].as<std::string>();
  if (name != "gpt2" && name != "bytes") throw UsageError("unknown --tokenizer '" + name + "' (known: gpt2, bytes)");
  return name;
}

std::filesystem::path tokenizer_dir(const po::variables_map& vm) {
  return vm.count("tokenizer-dir") ? std::filesystem::path(vm["tokenizer-dir"].as<std::string>())
                                   : data::default_tokenizer_dir();
}

int tokenizer_vocab_size(const std::string& name) { return name == "bytes" ? 256 : 50257; }

}  // namespace mt
