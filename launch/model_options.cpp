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
        "OpenAI's 124M (12 x 768, context 1024); the larger gpt2 shapes as published. The llama family (RMSNorm, "
        "RoPE, SwiGLU, grouped-query attention, untied head): llama-tiny: 4 x 64, 4 heads, 2 kv heads (tests); "
        "llama-125m: 12 x 576, 9 heads, 3 kv heads, SwiGLU 1536, cl100k's vocabulary; llama3-8b and llama3-70b: "
        "Meta's Llama 3 shapes (for plan)")
           .c_str())
      ("layers", po::value<int>(), "transformer blocks (overrides the preset)")
      ("heads", po::value<int>(), "attention heads; must divide --channels (overrides the preset)")
      ("channels", po::value<int>(), "model width C (overrides the preset)")
      ("max-seq-len", po::value<int>(),
       "context length (overrides the preset): rows of gpt2's position embedding; llama has none and only caps "
       "--seq-len")
      ("padded-vocab", po::value<int>(),
       "rows of the token embedding, >= the tokenizer's vocabulary (default: rounded up to 128)")
      // The llama family's own fields (models/gpt_config.h); a gpt2 preset refuses them.
      ("kv-heads", po::value<int>(),
       "llama only: key/value heads of grouped-query attention, dividing --heads (overrides the preset). Fewer "
       "shrink the k and v projections and the K/V activations by heads/kv-heads; tensor parallelism splits them "
       "when --tp divides kv-heads, else every tp rank holds them all and sums their gradients")
      ("ffn-hidden", po::value<int>(),
       "llama only: SwiGLU's hidden width F (overrides the preset; 0: 4 x channels). The MLP's gate, up and down "
       "projections are 3 x F x channels weights, 6 x F x channels FLOPs per token forward; --tp must divide F")
      ("rope-theta", po::value<float>(),
       "llama only: RoPE's base (overrides the preset; Llama 3: 500000, larger spreads the rotation over longer "
       "contexts). Costs nothing; weights trained with one theta expect it")
      ("norm-eps", po::value<float>(),
       "llama only: RMSNorm's epsilon (default 1e-5; Llama 2 and older folders: 1e-6). Costs nothing; an "
       "--init-weights folder's rms_norm_eps must equal it");
}

GptConfig read_model_config(const po::variables_map& vm, int vocab_size) {
  GptConfig c = gpt_preset(vm["model"].as<std::string>());
  if (vm.count("layers")) c.layers = vm["layers"].as<int>();
  if (vm.count("heads")) c.heads = vm["heads"].as<int>();
  if (vm.count("channels")) c.channels = vm["channels"].as<int>();
  if (vm.count("max-seq-len")) c.max_seq_len = vm["max-seq-len"].as<int>();
  for (const char* llama_only : {"kv-heads", "ffn-hidden", "rope-theta", "norm-eps"}) {
    if (vm.count(llama_only) && !c.is_llama())
      throw UsageError("--" + std::string(llama_only) + " is a llama option, and --model " +
                       vm["model"].as<std::string>() + " is a gpt2 (llama presets: llama-tiny, llama-125m, "
                       "llama3-8b, llama3-70b)");
  }
  if (vm.count("kv-heads")) c.kv_heads = vm["kv-heads"].as<int>();
  if (vm.count("ffn-hidden")) c.ffn_hidden = vm["ffn-hidden"].as<int>();
  if (vm.count("rope-theta")) c.rope_theta = vm["rope-theta"].as<float>();
  if (vm.count("norm-eps")) c.norm_eps = vm["norm-eps"].as<float>();
  c.vocab_size = vocab_size;
  c.padded_vocab = vm.count("padded-vocab") ? vm["padded-vocab"].as<int>() : 0;
  c.validate();
  return c;
}

void add_tokenizer_options(po::options_description& desc) {
  desc.add_options()
      ("tokenizer", po::value<std::string>()->default_value("gpt2"),
       "gpt2 (OpenAI's GPT-2 byte-level BPE, vocab 50257), cl100k or o200k (tiktoken's cl100k_base and "
       "o200k_base: vocab 100277 and 200019, token shards of uint32 ids, twice the bytes of gpt2's "
       "uint16; the model's embedding and head grow with the vocabulary) or bytes (one token per byte, "
       "vocab 256). It sets the model's vocabulary, so train with the tokenizer that prepared the shards")
      ("tokenizer-dir", path_value(PathKind::ReadDir),
       "directory with the tokenizer's files: GPT-2's encoder.json and vocab.bpe (default: "
       "$MESHTRAIN_TOKENIZER_DIR, else assets/gpt2, filled by scripts/fetch_tokenizer.sh), or "
       "cl100k_base.tiktoken / o200k_base.tiktoken (default: assets/cl100k, assets/o200k, filled by "
       "scripts/fetch_tiktoken.sh)");
}

std::string tokenizer_name(const po::variables_map& vm) {
  const std::string name = vm["tokenizer"].as<std::string>();
  if (data::known_vocab_size(name) == 0) {
    std::string known;
    for (const std::string& n : data::tokenizer_names()) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("unknown --tokenizer '" + name + "' (known: " + known + ")");
  }
  return name;
}

std::filesystem::path tokenizer_dir(const po::variables_map& vm) {
  return vm.count("tokenizer-dir") ? std::filesystem::path(vm["tokenizer-dir"].as<std::string>())
                                   : data::default_tokenizer_dir(tokenizer_name(vm));
}

int tokenizer_vocab_size(const std::string& name) { return data::known_vocab_size(name); }

}  // namespace mt
