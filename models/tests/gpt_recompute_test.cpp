// Activation recomputation (GptOptions::recompute) on the CPU, fp32 and bf16: with selective and
// full recomputation the losses, every parameter gradient, every input gradient sent back and the
// grad-ready calls equal the run without recomputation bit for bit, for the whole model and for
// pipeline partitions with several micro-batches in flight, with the fused backward and with B and
// W split (zero-bubble); both families (gpt2, llama). And what it saves: activation_bytes() at the
// `small` shape, T = 256.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "models/tests/split_backward_harness.h"  // defines: run_pipeline, split_layouts, BackwardOrder
#include "runtime/context.h"
#include "tests/float_bits.h"  // defines: same_bits

namespace mt {
namespace {

using testing::BackwardOrder;

constexpr int kMicros = 3, kB = 2, kT = 16;

void expect_same(const testing::PipelineOutcome& got, const testing::PipelineOutcome& want) {
  EXPECT_TRUE(testing::same_bits(got.losses, want.losses)) << "losses differ";
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (std::size_t s = 0; s < want.grads.size(); ++s) {
    bool any = false;
    for (float g : want.grads[s]) any = any || g != 0.0f;
    EXPECT_TRUE(any) << "stage " << s << " has no gradient at all";
    EXPECT_TRUE(testing::same_bits(got.grads[s], want.grads[s])) << "stage " << s << " gradients differ";
  }
  EXPECT_TRUE(got.input_grads == want.input_grads) << "input gradients differ";
  EXPECT_EQ(got.ready, want.ready);
}

class GptRecompute : public ::testing::TestWithParam<DType> {
 protected:
  DeviceContext ctx_{DeviceOptions{Device::cpu(), 0, 2}};
};

TEST_P(GptRecompute, LossesAndGradientsAreTheBitsOfNoRecomputation) {
  for (ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama}) {
    const GptConfig config = testing::split_test_config(family);
    for (const testing::SplitLayout& layout : testing::split_layouts(config)) {
      const testing::PipelineOutcome plain =
          testing::run_pipeline(ctx_, config, layout, GetParam(), BackwardOrder::Fused, kMicros, kB, kT);
      for (Recompute r : {Recompute::Selective, Recompute::Full}) {
        for (BackwardOrder order : {BackwardOrder::Fused, BackwardOrder::AllBThenW, BackwardOrder::Lagged}) {
          SCOPED_TRACE(std::string(model_family_name(family)) + ", " + layout.name + ", recompute " +
                       recompute_name(r) + ", " + testing::order_name(order) + ", " + dtype_name(GetParam()));
          expect_same(
              testing::run_pipeline(ctx_, config, layout, GetParam(), order, kMicros, kB, kT, {}, GptOptions{r}), plain);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GptRecompute, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

// activation_bytes() after a forward and a backward of one B x T micro-batch of the whole model.
std::int64_t activation_bytes(DeviceContext& ctx, const GptConfig& config, Recompute r, int B, int T) {
  Gpt model(ctx, config, DType::F32, {}, {}, 1, GptOptions{r});
  model.init(3);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> token(0, config.vocab_size - 1);
  std::vector<std::int32_t> inputs, targets;
  for (int i = 0; i < B * T; ++i) {
    inputs.push_back(token(rng));
    targets.push_back(token(rng));
  }
  model.forward(inputs, targets, B, T, 1.0f);
  model.backward();
  return model.activation_bytes();
}

// The `small` preset's layers (6 x 384 channels, 6 heads) at T = 256, with a small vocabulary: the
// head's logits [B*T, vocab] are kept whatever recompute does, and at GPT-2's 50257 they would
// outweigh the layers this measures.
TEST(GptRecomputeMemory, FullKeepsAThirdOrLessOfTheActivations) {
  DeviceContext ctx{DeviceOptions{Device::cpu(), 0, 2}};
  GptConfig config = gpt_preset("small");
  config.vocab_size = 96;
  config.padded_vocab = 128;
  const int B = 1, T = 256;
  const std::int64_t none = activation_bytes(ctx, config, Recompute::None, B, T);
  const std::int64_t selective = activation_bytes(ctx, config, Recompute::Selective, B, T);
  const std::int64_t full = activation_bytes(ctx, config, Recompute::Full, B, T);
  // Selective drops per layer the probabilities [H, T, T] and the GELU output [T, 4C] (fp32), and
  // scratch holds one layer's worth of each.
  const std::int64_t N = static_cast<std::int64_t>(B) * T, C = config.channels, H = config.heads;
  EXPECT_EQ(none - selective, (config.layers - 1) * 4 * (B * H * T * T + N * 4 * C));
  EXPECT_GE(none, 3 * full) << "none " << none << " bytes, full " << full;
  EXPECT_LT(full, selective);
}

// With B and W split, what B recomputes for W is held from B to W only, and counted meanwhile.
TEST(GptRecomputeMemory, WhatBRecomputesForWIsHeldUntilW) {
  DeviceContext ctx{DeviceOptions{Device::cpu(), 0, 2}};
  const GptConfig config = testing::split_test_config();
  for (Recompute r : {Recompute::Selective, Recompute::Full}) {
    SCOPED_TRACE(recompute_name(r));
    Gpt model(ctx, config, DType::F32, {}, {}, 1, GptOptions{r});
    model.init(3);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(kB * kT), 1);
    model.forward_chunk(0, 0, kB, kT, tokens, tokens, 1.0f);
    const std::int64_t after_forward = model.activation_bytes();
    model.backward_chunk_input(0, 0);
    const std::int64_t between = model.activation_bytes();
    EXPECT_GT(between, after_forward);
    model.backward_chunk_weights(0, 0);
    const std::int64_t after_w = model.activation_bytes();
    EXPECT_LT(after_w, between);
    // A second micro-batch reuses the pooled set: the bytes between its B and W are the first's.
    model.release(0, 0);
    model.forward_chunk(0, 1, kB, kT, tokens, tokens, 1.0f);
    model.backward_chunk_input(0, 1);
    EXPECT_EQ(model.activation_bytes(), between);
    model.backward_chunk_weights(0, 1);
    model.release(0, 1);
  }
}

}  // namespace
}  // namespace mt
