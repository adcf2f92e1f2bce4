// libFuzzer target: read_full_state (train/checkpoint_convert.h), the entry point of `meshtrain
// convert` and `meshtrain sample --weights CHECKPOINT`, over the manifest.json of a real GPT
// checkpoint: the model section becomes a GptConfig, its parameter list names the tensors to read,
// and every tensor is read whole against real shard files and checked against the model's shapes.
// Two checkpoints are written at start by the project's own writer (write_checkpoint_for_layout):
// tp 2 x pp 2 with AdamW moments, and a single rank's, weights only. Input: one byte choosing the
// checkpoint (bit 0) and with_optimizer (bit 1), then the manifest's text. A bad manifest must end
// in mt::Error naming the checkpoint; the saved manifest must read back the saved values.
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "models/gpt_parameters.h"      // defines: gpt_parameter_specs, spec_offsets
#include "runtime/error.h"              // defines: Error
#include "tests/fuzz_support.h"
#include "train/checkpoint_convert.h"   // defines: FullState, read_full_state, write_checkpoint_for_layout

namespace {
namespace fs = std::filesystem;

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

mt::FullState sample_state(bool moments) {
  mt::FullState state;
  state.config.layers = 2;
  state.config.heads = 2;
  state.config.channels = 8;
  state.config.max_seq_len = 8;
  state.config.vocab_size = 16;
  const auto n = static_cast<std::size_t>(mt::spec_offsets(mt::gpt_parameter_specs(state.config)).back());
  for (std::size_t i = 0; i < n; ++i) state.params.push_back(0.25f * static_cast<float>(i % 97) - 3.0f);
  if (moments) {
    state.adam_m.assign(n, 0.125f);
    state.adam_v.assign(n, 0.5f);
  }
  return state;
}

struct Sample {
  fs::path step_dir;
  mt::FullState state;
  std::string manifest;  // as saved
};

// [0]: tp 2 x pp 2 with moments; [1]: one rank, weights only.
std::vector<Sample> write_samples(const fs::path& root) {
  std::vector<Sample> samples;
  for (int i = 0; i < 2; ++i) {
    Sample s;
    s.state = sample_state(i == 0);
    mt::LayoutRequest request;
    request.tp = i == 0 ? 2 : 1;
    request.pp = i == 0 ? 2 : 1;
    const mt::LayoutPlan plan(request, mt::layout_dims(s.state.config, 8), request.world_size(), request.pp);
    mt::ckpt::Manifest base;
    base.step = 3;
    base.training = {{"optimizer_steps", 3}, {"seq_len", 8}};
    base.data = {{"sequences_consumed", 24}};
    base.rng = {{"state", "fuzz"}};
    s.step_dir = mt::write_checkpoint_for_layout(root / ("sample_" + std::to_string(i)), s.state, plan, base);
    s.manifest = read_all(s.step_dir / "manifest.json");
    samples.push_back(std::move(s));
  }
  return samples;
}

void write_seeds(const fs::path& dir) {
  const std::vector<Sample> samples = write_samples(mt::fuzz::fuzz_dir() / "seeds");
  for (char choice = 0; choice < 4; ++choice)
    mt::fuzz::write_seed(dir, "manifest_" + std::to_string(static_cast<int>(choice)),
                         std::string(1, choice) + samples[static_cast<std::size_t>(choice & 1)].manifest);
}

std::vector<Sample> samples;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mt::fuzz::handle_write_seeds(argc, argv, write_seeds);
  samples = write_samples(mt::fuzz::fuzz_dir() / "checkpoints");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Sample& sample = samples[data[0] & 1];
  const bool with_optimizer = (data[0] & 2) != 0;
  const std::string_view manifest(reinterpret_cast<const char*>(data) + 1, size - 1);
  mt::fuzz::write_input(sample.step_dir / "manifest.json", manifest);
  try {
    const mt::FullState state = mt::read_full_state(sample.step_dir, with_optimizer);
    const auto n = static_cast<std::size_t>(mt::spec_offsets(mt::gpt_parameter_specs(state.config)).back());
    FUZZ_CHECK(state.params.size() == n);
    FUZZ_CHECK(state.adam_m.size() == state.adam_v.size());
    FUZZ_CHECK(state.adam_m.empty() || state.adam_m.size() == n);
    FUZZ_CHECK(with_optimizer || state.adam_m.empty());
    if (manifest == sample.manifest) {
      FUZZ_CHECK(state.params == sample.state.params);
      if (with_optimizer) FUZZ_CHECK(state.adam_m == sample.state.adam_m && state.adam_v == sample.state.adam_v);
    }
  } catch (const mt::Error& e) {
    FUZZ_CHECK(std::string_view(e.what()).find(sample.step_dir.string()) != std::string_view::npos);
  }
  return 0;
}
