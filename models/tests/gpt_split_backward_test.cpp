// Gpt's split backward (backward_chunk_input = B, backward_chunk_weights = W) against the fused
// backward_chunk, on the CPU, in fp32 and bf16: over several micro-batches, in the orders
// zero-bubble schedules run them (all B's then the W's, B W pairs, W one micro-batch behind), for
// the whole model and for pipeline partitions (embedding, middle and head chunks; two chunks per
// stage; V-shaped, with the embedding and the tied head in one model), the parameter gradients and
// every input gradient sent back are the fused ones bit for bit, and W tells the grad-ready
// callback the fused backward's parameters in the fused order.
// Also: what B keeps for W is counted in activation_bytes() and pooled with the slot, and misuse
// (W without B, B twice, fused after B, a release or forward between B and W) is an InternalError.
// The llama family gets the bitwise and the grad-ready cases too.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "models/tests/split_backward_harness.h"  // defines: run_pipeline, split_layouts, BackwardOrder
#include "runtime/context.h"
#include "runtime/error.h"
#include "tests/float_bits.h"    // defines: same_bits
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt {
namespace {

using testing::BackwardOrder;
using testing::contains;
using testing::error_of;

constexpr int kMicros = 3, kB = 2, kT = 16;

class SplitBackward : public ::testing::TestWithParam<DType> {
 protected:
  DeviceContext ctx_{DeviceOptions{Device::cpu(), 0, 2}};
};

void expect_same(const testing::PipelineOutcome& got, const testing::PipelineOutcome& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (std::size_t s = 0; s < want.grads.size(); ++s) {
    bool any = false;
    for (float g : want.grads[s]) any = any || g != 0.0f;
    EXPECT_TRUE(any) << "stage " << s << " has no gradient at all";
    EXPECT_TRUE(testing::same_bits(got.grads[s], want.grads[s])) << "stage " << s << " gradients differ";
  }
  EXPECT_EQ(got.input_grads.size(), want.input_grads.size());
  for (const auto& [key, bytes] : want.input_grads) {
    auto it = got.input_grads.find(key);
    ASSERT_NE(it, got.input_grads.end());
    EXPECT_TRUE(it->second == bytes) << "input gradient of chunk " << key.first << " micro-batch " << key.second;
  }
  // The grad-ready calls: per (chunk, micro-batch) the same parameters in the same order, each once.
  EXPECT_EQ(got.ready, want.ready);
  for (const auto& [key, calls] : got.ready)
    EXPECT_EQ(std::set<std::size_t>(calls.begin(), calls.end()).size(), calls.size())
        << "a parameter reported twice by chunk " << key.first << " micro-batch " << key.second;
}

void expect_split_is_fused(DeviceContext& ctx_, const GptConfig& config, DType dtype) {
  for (const testing::SplitLayout& layout : testing::split_layouts(config)) {
    const testing::PipelineOutcome fused =
        testing::run_pipeline(ctx_, config, layout, dtype, BackwardOrder::Fused, kMicros, kB, kT);
    for (BackwardOrder order : {BackwardOrder::AllBThenW, BackwardOrder::EachBThenW, BackwardOrder::Lagged}) {
      const testing::PipelineOutcome split = testing::run_pipeline(ctx_, config, layout, dtype, order, kMicros, kB, kT);
      expect_same(split, fused, std::string(model_family_name(config.family)) + ", " + layout.name + ", " +
                                    testing::order_name(order));
    }
  }
}

TEST_P(SplitBackward, InputThenWeightsIsTheFusedBackwardBitForBit) {
  expect_split_is_fused(ctx_, testing::split_test_config(), GetParam());
}

// llama's layer (RMSNorm, q and [k | v], RoPE, grouped-query attention, SwiGLU) and its untied head.
TEST_P(SplitBackward, LlamaInputThenWeightsIsTheFusedBackwardBitForBit) {
  expect_split_is_fused(ctx_, testing::llama_split_test_config(), GetParam());
}

// On the whole model the fused backward reports every parameter once per micro-batch (lnf, the
// layers from the last, wpe, wte): so does W.
TEST_P(SplitBackward, WeightsReportEveryParameterOnceInTheFusedOrder) {
  const GptConfig config = testing::split_test_config();
  const testing::SplitLayout whole = testing::split_layouts(config)[0];
  const testing::PipelineOutcome split =
      testing::run_pipeline(ctx_, config, whole, GetParam(), BackwardOrder::Lagged, kMicros, kB, kT);
  Gpt model(ctx_, config, GetParam());
  ASSERT_EQ(split.ready.size(), static_cast<std::size_t>(kMicros));
  for (const auto& [key, calls] : split.ready) {
    EXPECT_EQ(calls.size(), model.parameters().size());
    EXPECT_EQ(std::set<std::size_t>(calls.begin(), calls.end()).size(), model.parameters().size());
    ASSERT_FALSE(calls.empty());
    EXPECT_EQ(model.parameters().spec(calls.front()).name, "lnf.weight");
    EXPECT_EQ(model.parameters().spec(calls.back()).name, "wte");
  }
}

// llama's fused backward reports the untied head first (made whole by the forward), then lnf, the
// layers from the last, wte: so does W.
TEST_P(SplitBackward, LlamaWeightsReportEveryParameterOnceInTheFusedOrder) {
  const GptConfig config = testing::llama_split_test_config();
  const testing::SplitLayout whole = testing::split_layouts(config)[0];
  const testing::PipelineOutcome fused =
      testing::run_pipeline(ctx_, config, whole, GetParam(), BackwardOrder::Fused, kMicros, kB, kT);
  const testing::PipelineOutcome split =
      testing::run_pipeline(ctx_, config, whole, GetParam(), BackwardOrder::Lagged, kMicros, kB, kT);
  EXPECT_EQ(split.ready, fused.ready);
  Gpt model(ctx_, config, GetParam());
  ASSERT_EQ(split.ready.size(), static_cast<std::size_t>(kMicros));
  for (const auto& [key, calls] : split.ready) {
    EXPECT_EQ(calls.size(), model.parameters().size());
    EXPECT_EQ(std::set<std::size_t>(calls.begin(), calls.end()).size(), model.parameters().size());
    ASSERT_GE(calls.size(), 2u);
    EXPECT_EQ(model.parameters().spec(calls[0]).name, "lm_head");
    EXPECT_EQ(model.parameters().spec(calls[1]).name, "lnf.weight");
    EXPECT_EQ(model.parameters().spec(calls.back()).name, "wte");
  }
}

// B keeps, per layer, 4 x [B*T, C] + [B*T, 3C] activations (the head's lnf gradient is the slot's
// since the forward: nothing more); the slot keeps them in the pool, so the next micro-batch's slot
// brings them along.
TEST_P(SplitBackward, WhatBKeepsForWIsCountedAndPooled) {
  const GptConfig config = testing::split_test_config();
  Gpt model(ctx_, config, GetParam());
  model.init(5);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(kB * kT), 3);
  model.forward_chunk(0, 0, kB, kT, tokens, tokens, 1.0f);
  const std::int64_t before = model.activation_bytes();
  model.backward_chunk_input(0, 0);
  const std::int64_t N = kB * kT, C = config.channels, L = config.layers;
  const std::int64_t elements = L * (4 * N * C + 3 * N * C);
  EXPECT_EQ(model.activation_bytes() - before, elements * static_cast<std::int64_t>(dtype_size(GetParam())));
  const std::int64_t with_grads = model.activation_bytes();
  model.backward_chunk_weights(0, 0);
  model.release(0, 0);
  model.forward_chunk(0, 1, kB, kT, tokens, tokens, 1.0f);  // the pooled slot, W's buffers included
  EXPECT_EQ(model.activation_bytes(), with_grads);
  model.backward_chunk(0, 1);  // the fused backward after the slot held a split one
  model.release(0, 1);
}

TEST_P(SplitBackward, MisuseIsAnInternalError) {
  const GptConfig config = testing::split_test_config();
  Gpt model(ctx_, config, GetParam());
  model.init(5);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(kB * kT), 3);
  model.forward_chunk(0, 0, kB, kT, tokens, tokens, 1.0f);
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.backward_chunk_weights(0, 0); }),
                       "without its backward_chunk_input"));
  model.backward_chunk_input(0, 0);
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.backward_chunk_input(0, 0); }), "twice"));
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.backward_chunk(0, 0); }),
                       "after its backward_chunk_input"));
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.release(0, 0); }),
                       "between its backward_chunk_input and backward_chunk_weights"));
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.forward_chunk(0, 0, kB, kT, tokens, tokens, 1.0f); }),
                       "between its backward_chunk_input and backward_chunk_weights"));
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.forward(tokens, tokens, kB, kT, 1.0f); }),
                       "between its backward_chunk_input and backward_chunk_weights"));
  model.backward_chunk_weights(0, 0);
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.backward_chunk_weights(0, 0); }), "twice"));
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.backward_chunk_input(0, 0); }),
                       "after its backward already ran"));
  model.release(0, 0);
  EXPECT_TRUE(contains(error_of<InternalError>([&] { model.backward_chunk_weights(0, 0); }), "in flight"));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SplitBackward, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace mt
