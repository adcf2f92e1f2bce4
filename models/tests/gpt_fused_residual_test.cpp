// The residual adds fused into the norm after them (Norm::add_forward): inside a chunk a layer's
// output add is made by the next layer's ln1, the last one's by lnf, so a chunk's forward launches
// one op less per layer boundary than one chunk per layer, which adds at each chunk's end. The
// losses and every gradient are those of one chunk per layer, bit for bit: both families, fp32 and
// bf16, with and without recomputation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/gpt.h"
#include "models/tests/split_backward_harness.h"  // defines: run_pipeline, split_test_config, stage_of
#include "runtime/context.h"
#include "runtime/device_counters.h"
#include "tests/float_bits.h"  // defines: same_bits

namespace mt {
namespace {

constexpr int kMicros = 2, kB = 2, kT = 16;

// The whole model on one stage: in one chunk, or one chunk per layer.
testing::SplitLayout one_chunk(const GptConfig& config) { return testing::split_layouts(config)[0]; }

testing::SplitLayout chunk_per_layer(const GptConfig& config) {
  testing::SplitLayout layout{"one chunk per layer", {}, {}};
  std::vector<LayerRange> chunks;
  for (int l = 0; l < config.layers; ++l) {
    chunks.push_back({l, l + 1});
    layout.chunks.emplace_back(0, l);
  }
  layout.stages.push_back(testing::stage_of(chunks, true, true));
  return layout;
}

// The launches of one training forward of every chunk of `layout`'s only stage, in order (the
// copies from one chunk's output to the next one's input not counted).
std::uint64_t forward_launches(DeviceContext& ctx, const GptConfig& config, const testing::SplitLayout& layout) {
  Gpt model(ctx, config, DType::F32, layout.stages[0]);
  model.init(5);
  const std::vector<std::int32_t> ids(static_cast<std::size_t>(kB * kT), 3);
  const Tensor on_device = Tensor::from_host(ids, {kB * kT}, ctx);
  const Gpt::DeviceTokens tokens{on_device, on_device};
  Tensor loss_sum = Tensor::zeros({1}, DType::F32, ctx);
  std::uint64_t launches = 0;
  for (int c = 0; c < model.num_chunks(); ++c) {
    if (c > 0) model.input_buffer(c, 0, kB, kT).copy_from(model.output(c - 1, 0), ctx.stream());
    const DeviceCounters before = device_counters();
    model.forward_chunk(c, 0, kB, kT, tokens, 1.0f, loss_sum);
    launches += (device_counters() - before).launches;
  }
  return launches;
}

TEST(GptFusedResidual, EachLayerBoundaryInsideAChunkSavesTheAddsLaunch) {
  DeviceContext ctx{DeviceOptions{Device::cpu(), 0, 2}};
  for (ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama}) {
    SCOPED_TRACE(model_family_name(family));
    const GptConfig config = testing::split_test_config(family);
    ASSERT_GT(config.layers, 1);
    EXPECT_EQ(forward_launches(ctx, config, chunk_per_layer(config)) - forward_launches(ctx, config, one_chunk(config)),
              static_cast<std::uint64_t>(config.layers - 1));
  }
}

class GptFusedResidualBits : public ::testing::TestWithParam<DType> {
 protected:
  DeviceContext ctx_{DeviceOptions{Device::cpu(), 0, 2}};
};

TEST_P(GptFusedResidualBits, LossesAndGradientsAreThoseOfOneChunkPerLayer) {
  for (ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama}) {
    const GptConfig config = testing::split_test_config(family);
    for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
      SCOPED_TRACE(std::string(model_family_name(family)) + ", recompute " + recompute_name(r) + ", " +
                   dtype_name(GetParam()));
      const auto run = [&](const testing::SplitLayout& layout) {
        return testing::run_pipeline(ctx_, config, layout, GetParam(), testing::BackwardOrder::Fused, kMicros, kB, kT,
                                     {}, GptOptions{r});
      };
      const testing::PipelineOutcome fused = run(one_chunk(config)), unfused = run(chunk_per_layer(config));
      EXPECT_TRUE(testing::same_bits(fused.losses, unfused.losses)) << "losses differ";
      ASSERT_EQ(fused.grads.size(), 1u);
      ASSERT_EQ(unfused.grads.size(), 1u);
      EXPECT_TRUE(testing::same_bits(fused.grads[0], unfused.grads[0])) << "gradients differ";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GptFusedResidualBits, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace mt
