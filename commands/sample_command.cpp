// `meshtrain sample`: generates text from llm.c GPT-2 weights or a checkpoint, with the GPT-2 (or
// byte) tokenizer.
#include "commands/sample_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "comm/agreement.h"
#include "data/tokenizer/tokenizer.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "launch/model_options.h"
#include "launch/session.h"
#include "launch/seed_option.h"
#include "models/gpt_weights.h"
#include "models/llmc/llmc_weights.h"
#include "models/sampler.h"
#include "perf/memory_model.h"
#include "train/checkpoint_convert.h"

namespace po = boost::program_options;

namespace mt {
namespace {

// As `meshtrain train` does (commands/train_command.cpp check_memory_cap): a cap too small for the
// model and the longest context a forward will see is a usage error up front, not an out-of-memory
// abort in the middle of generating. The config comes from the weights, the same on every rank.
void check_memory_cap(std::size_t cap, const GptConfig& config, std::size_t prompt_tokens, int new_tokens) {
  if (cap == 0) return;
  // The last forward sees the prompt and every new token but the last, at most the context.
  const std::size_t longest = prompt_tokens + static_cast<std::size_t>(std::max(new_tokens, 1)) - 1;
  const int window = static_cast<int>(std::min(longest, static_cast<std::size_t>(config.max_seq_len)));
  const perf::MemoryBreakdown m = perf::estimate_sampling_memory(config, window);
  const double need = new_tokens > 0 ? m.total() : m.parameters + m.gradients;
  if (need <= static_cast<double>(cap)) return;
  const auto bytes = [](double b) { return format_bytes(static_cast<std::size_t>(b)); };
  throw UsageError("--device-memory-limit " + bytes(static_cast<double>(cap)) + " is too small to sample from " +
                   config.describe() + ": it needs up to " + bytes(need) + " (parameters " + bytes(m.parameters) +
                   " and their gradient buffer " + bytes(m.gradients) + ", activations of " + std::to_string(window) +
                   " tokens " + bytes(m.activations + m.logits + m.workspace + m.transient) +
                   "); raise the cap, or shorten --prompt or --tokens");
}

// --temperature, read as a double so that no value is refused for being outside float's range:
// below it is the greedy limit (0), above it the flat one (the largest float).
float temperature_option(double t) {
  if (!std::isfinite(t) || t < 0) {
    std::ostringstream given;
    given << t;
    throw UsageError("--temperature must be a finite number >= 0 (0: always the most likely token), got " +
                     given.str());
  }
  return static_cast<float>(std::min(t, static_cast<double>(std::numeric_limits<float>::max())));
}

}  // namespace

int sample_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc("options");
  desc.add_options()
      ("weights", path_value(PathKind::ReadFileOrDir)->required(),
       "what to sample from: an llm.c GPT-2 weights file (`meshtrain train --save-weights`), or a checkpoint "
       "of any layout (a --checkpoint-dir, meaning its latest, or one step_N directory in it)")
      ("prompt", po::value<std::string>()->default_value("\n"), "text to continue")
      ("tokens", po::value<int>()->default_value(64), "new tokens to generate")
      ("temperature", po::value<double>()->default_value(1.0, "1"),
       "softmax temperature, >= 0: lower is greedier, 0 always takes the most likely token; the --top-k "
       "candidates are the model's most likely at any temperature")
      ("top-k", po::value<int>()->default_value(40), "sample among the k most likely tokens (0: all)")
      ("seed", seed_value(1337), "the same seed gives the same text (a whole number, 0 to 2^64 - 1)");
  add_tokenizer_options(desc);
  add_runtime_options(desc);
  auto parsed = parse_command_line("sample",
                                   "Generates text from a trained model: the prompt is encoded, continued "
                                   "token by token and printed as it grows.",
                                   desc, args, mpi.world_rank());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  SampleOptions options;
  options.tokens = vm["tokens"].as<int>();
  options.temperature = temperature_option(vm["temperature"].as<double>());
  options.top_k = vm["top-k"].as<int>();
  options.seed = vm["seed"].as<SeedValue>().value;
  if (options.tokens < 0) throw UsageError("--tokens must be >= 0, got " + std::to_string(options.tokens));
  if (options.top_k < 0)
    throw UsageError("--top-k must be >= 0 (0: the whole vocabulary), got " + std::to_string(options.top_k));
  const std::string name = tokenizer_name(vm);

  const RuntimeOptions runtime = read_runtime_options(vm);
  Session session = open_session(runtime);
  DeviceContext& ctx = *session.context;
  const std::filesystem::path weights = vm["weights"].as<std::string>();
  // A directory is a checkpoint: its parameters, gathered whole from the shards of any layout.
  // Every rank reads the same files, so a missing or bad one fails every rank alike: agreed, it is
  // said once by rank 0.
  std::optional<FullState> checkpoint;
  GptConfig config;
  run_agreed(*session.world, ctx, [&] {
    if (std::filesystem::is_directory(weights))
      checkpoint = read_full_state(ckpt::resolve_checkpoint(weights.string(), "", "--weights"), false);
    config = checkpoint ? checkpoint->config : read_llmc_header(weights);
  });
  if (tokenizer_vocab_size(name) != config.vocab_size)
    throw UsageError("the " + name + " tokenizer has " + std::to_string(tokenizer_vocab_size(name)) +
                     " tokens, the model in " + weights.string() + " " + std::to_string(config.vocab_size) +
                     " (use --tokenizer " + (config.vocab_size == 256 ? "bytes" : "gpt2") + ")");
  std::unique_ptr<data::Tokenizer> tokenizer;
  run_agreed(*session.world, ctx, [&] { tokenizer = data::make_tokenizer(name, tokenizer_dir(vm)); });
  const std::string prompt = vm["prompt"].as<std::string>();
  std::vector<std::int32_t> tokens = tokenizer->encode(prompt);
  if (tokens.empty()) tokens.push_back(tokenizer->eot_token());
  check_memory_cap(runtime.device_memory_limit, config, tokens.size(), options.tokens);
  Gpt model(ctx, config);
  run_agreed(*session.world, ctx, [&] {
    if (checkpoint) {
      load_full_parameters(model, ctx, checkpoint->params);
    } else {
      load_llmc_weights(model, ctx, weights);
    }
  });

  const bool root = session.placement.world_rank == 0;
  if (root) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  generate(model, ctx, tokens, options, [&](std::int32_t token) {
    if (!root) return;
    const std::string text = token == tokenizer->eot_token() ? "\n---\n" : tokenizer->decode({&token, 1});
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (root) std::fputs("\n", stdout);
  return 0;
}

}  // namespace mt
