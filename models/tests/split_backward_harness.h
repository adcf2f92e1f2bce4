// A pipeline of Gpt stages on one process (each stage its own model, every chunk on this rank),
// run forward and then backward either fused (backward_chunk) or split into B and W
// (backward_chunk_input, backward_chunk_weights) in one of the orders zero-bubble schedules use.
// What comes out (every stage's gradients, every input gradient sent back, the grad-ready calls)
// is compared between the two by the split-backward tests, single-rank and tensor-parallel.
// defines: SplitLayout, BackwardOrder, PipelineOutcome, run_pipeline, split_test_config,
//          llama_split_test_config, tp_test_configs, config_name, raw_bytes
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt.h"
#include "models/gpt_config.h"
#include "runtime/context.h"
#include "runtime/tensor.h"

namespace mt::testing {

inline GptConfig split_test_config() {
  GptConfig c = gpt_preset("tiny");  // 4 layers, 4 heads, 64 channels
  c.vocab_size = 96;
  c.padded_vocab = 128;
  return c;
}

// The llama family at the same widths (llama-tiny: 4 layers, 4 query heads sharing 2 kv heads, 64
// channels, SwiGLU hidden 160): tp 2 splits the kv heads, tp 4 replicates them.
inline GptConfig llama_split_test_config() {
  GptConfig c = gpt_preset("llama-tiny");
  c.vocab_size = 96;
  c.padded_vocab = 128;
  return c;
}

inline GptConfig split_test_config(ModelFamily family) {
  return family == ModelFamily::Llama ? llama_split_test_config() : split_test_config();
}

// What a tensor-parallel test runs: gpt2; llama with 2 kv heads (tp 2 splits them, tp 4 replicates
// them); llama with 1 kv head (replicated at any tp, so also at 2 ranks).
inline std::vector<GptConfig> tp_test_configs() {
  GptConfig one_kv = llama_split_test_config();
  one_kv.kv_heads = 1;
  return {split_test_config(), llama_split_test_config(), one_kv};
}

// "gpt2", "llama kv 2", ...: for traces.
inline std::string config_name(const GptConfig& c) {
  return std::string(model_family_name(c.family)) + (c.is_llama() ? " kv " + std::to_string(c.kv_head_count()) : "");
}

// The stages' partitions and the global chunks in model order, as (stage, local chunk).
struct SplitLayout {
  std::string name;
  std::vector<GptPartition> stages;
  std::vector<std::pair<int, int>> chunks;
};

inline GptPartition stage_of(std::vector<LayerRange> chunks, bool embedding, bool head) {
  GptPartition p;
  p.chunks = std::move(chunks);
  p.embedding = embedding;
  p.head = head;
  return p;
}

inline std::vector<SplitLayout> split_layouts(const GptConfig& config) {
  return {
      {"whole", {GptPartition::whole(config)}, {{0, 0}}},
      // An embedding chunk, a middle chunk, a head chunk.
      {"three stages",
       {stage_of({{0, 1}}, true, false), stage_of({{1, 3}}, false, false), stage_of({{3, 4}}, false, true)},
       {{0, 0}, {1, 0}, {2, 0}}},
      // Two chunks per stage (interleaved): embedding + middle on stage 0, middle + head on stage 1.
      {"interleaved",
       {stage_of({{0, 1}, {2, 3}}, true, false), stage_of({{1, 2}, {3, 4}}, false, true)},
       {{0, 0}, {1, 0}, {0, 1}, {1, 1}}},
      // V-shaped (ZB-V): stage 0 holds the first and the last chunk, so the embedding and the tied
      // head share a model and wte collects both gradients there.
      {"V-shaped",
       {stage_of({{0, 1}, {3, 4}}, true, true), stage_of({{1, 2}, {2, 3}}, false, false)},
       {{0, 0}, {1, 0}, {1, 1}, {0, 1}}},
  };
}

enum class BackwardOrder {
  Fused,        // backward_chunk per chunk and micro-batch
  AllBThenW,    // B of every micro-batch (B0 B1 B2), then the W's (W0 W1 W2)
  EachBThenW,   // B0 W0 B1 W1 ...
  Lagged,       // B0 B1 W0 B2 W1 W2: W of micro-batch m after B of m + 1
};

inline const char* order_name(BackwardOrder o) {
  switch (o) {
    case BackwardOrder::Fused: return "fused";
    case BackwardOrder::AllBThenW: return "B B B W W W";
    case BackwardOrder::EachBThenW: return "B W B W";
    case BackwardOrder::Lagged: return "B B W B W W";
  }
  return "?";
}

// The raw bytes of a tensor of any dtype.
inline std::vector<std::uint8_t> raw_bytes(const Tensor& t, DeviceContext& ctx) {
  std::vector<std::uint8_t> out(t.nbytes());
  t.copy_to_host(out.data(), out.size(), ctx.stream());
  ctx.synchronize();
  return out;
}

struct PipelineOutcome {
  std::vector<float> losses;                                             // per micro-batch
  std::vector<std::vector<float>> grads;                                 // per stage, flat
  std::map<std::pair<int, int>, std::vector<std::uint8_t>> input_grads;  // (global chunk, micro)
  std::map<std::pair<int, int>, std::vector<std::size_t>> ready;         // grad-ready calls of (chunk, micro)
};

// Runs `micros` micro-batches of B x T through the layout (parameters from init(seed); the same
// batches for every order), then the backward in `order` with loss_weight 1/micros. `options` go to
// every stage's Gpt (recompute).
inline PipelineOutcome run_pipeline(DeviceContext& ctx, const GptConfig& config, const SplitLayout& layout, DType dtype,
                                    BackwardOrder order, int micros, int B, int T, TensorParallel tp = {},
                                    GptOptions options = {}) {
  std::vector<std::unique_ptr<Gpt>> stages;
  for (GptPartition p : layout.stages) {
    p.tp_size = tp.size();
    p.tp_rank = tp.rank();
    stages.push_back(std::make_unique<Gpt>(ctx, config, dtype, p, tp, 1, options));
    stages.back()->init(5);
    stages.back()->parameters().zero_grads(ctx);
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> token(0, config.vocab_size - 1);
  std::vector<std::vector<std::int32_t>> inputs(static_cast<std::size_t>(micros)), targets = inputs;
  for (int m = 0; m < micros; ++m) {
    for (int i = 0; i < B * T; ++i) {
      inputs[static_cast<std::size_t>(m)].push_back(token(rng));
      targets[static_cast<std::size_t>(m)].push_back(token(rng));
    }
  }
  const int G = static_cast<int>(layout.chunks.size());
  auto model = [&](int g) -> Gpt& {
    return *stages[static_cast<std::size_t>(layout.chunks[static_cast<std::size_t>(g)].first)];
  };
  auto local = [&](int g) { return layout.chunks[static_cast<std::size_t>(g)].second; };

  PipelineOutcome out;
  const float weight = 1.0f / static_cast<float>(micros);
  for (int m = 0; m < micros; ++m) {
    float loss = 0.0f;
    for (int g = 0; g < G; ++g) {
      if (g > 0) model(g).input_buffer(local(g), m, B, T).copy_from(model(g - 1).output(local(g - 1), m), ctx.stream());
      loss = model(g).forward_chunk(local(g), m, B, T, inputs[static_cast<std::size_t>(m)],
                                    targets[static_cast<std::size_t>(m)], weight);
    }
    out.losses.push_back(loss);
  }

  auto recorder = [&](int g, int m) {
    return [&out, g, m](std::size_t i) { out.ready[{g, m}].push_back(i); };
  };
  auto receive = [&](int g, int m) {  // the next chunk's input gradient into this chunk's buffer
    if (g + 1 < G)
      model(g).output_grad_buffer(local(g), m).copy_from(model(g + 1).input_grad(local(g + 1), m), ctx.stream());
  };
  auto sent = [&](int g, int m) {
    if (g > 0) out.input_grads[{g, m}] = raw_bytes(model(g).input_grad(local(g), m), ctx);
  };
  auto fused = [&](int m) {
    for (int g = G - 1; g >= 0; --g) {
      receive(g, m);
      model(g).backward_chunk(local(g), m, recorder(g, m));
      sent(g, m);
    }
  };
  auto input = [&](int m) {
    for (int g = G - 1; g >= 0; --g) {
      receive(g, m);
      model(g).backward_chunk_input(local(g), m);
      sent(g, m);
    }
  };
  auto weights = [&](int m) {
    for (int g = G - 1; g >= 0; --g) model(g).backward_chunk_weights(local(g), m, recorder(g, m));
  };
  switch (order) {
    case BackwardOrder::Fused:
      for (int m = 0; m < micros; ++m) fused(m);
      break;
    case BackwardOrder::AllBThenW:
      for (int m = 0; m < micros; ++m) input(m);
      for (int m = 0; m < micros; ++m) weights(m);
      break;
    case BackwardOrder::EachBThenW:
      for (int m = 0; m < micros; ++m) {
        input(m);
        weights(m);
      }
      break;
    case BackwardOrder::Lagged:
      for (int m = 0; m < micros; ++m) {
        input(m);
        if (m > 0) weights(m - 1);
      }
      weights(micros - 1);
      break;
  }
  for (int m = 0; m < micros; ++m)
    for (int g = 0; g < G; ++g) model(g).release(local(g), m);
  for (const auto& s : stages) out.grads.push_back(s->parameters().flat_grads().to_host<float>());
  return out;
}

}  // namespace mt::testing
