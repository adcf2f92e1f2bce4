// Gpt's split backward (B, then W) against the fused backward under tensor parallelism: the world
// is one tp group (2 or 4 ranks), and every rank runs the whole model and a three-stage pipeline
// (embedding, middle and head chunks), fp32 and bf16, in the orders zero-bubble schedules use.
// On every rank the parameter gradients and the input gradients sent back are the fused ones bit
// for bit: B makes all the tensor-parallel collectives of the backward in the fused order, so
// the ranks' sums are the same sums. Both families: gpt2, and llama with its kv heads split over tp
// (2 kv heads at tp 2) or replicated (2 kv heads at tp 4, 1 kv head at any tp; W sums their
// weight gradient over tp).
#include <gtest/gtest.h>

#include <string>

#include "models/tests/split_backward_harness.h"  // defines: run_pipeline, split_layouts, BackwardOrder
#include "parallel/tensor_parallel.h"
#include "tests/float_bits.h"  // defines: same_bits
#include "tests/test_env.h"    // defines: test_world, test_context

namespace mt {
namespace {

using testing::BackwardOrder;

TEST(SplitBackwardTensorParallel, InputThenWeightsIsTheFusedBackwardBitForBitOnEveryRank) {
  Communicator& world = testing::test_world();
  DeviceContext& ctx = testing::test_context();
  const TensorParallel tp(&world);
  for (const GptConfig& config : testing::tp_test_configs()) {
    auto layouts = testing::split_layouts(config);
    layouts.resize(2);  // whole, three stages: the chunk layouts with two chunks add nothing tensor-parallel
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (const testing::SplitLayout& layout : layouts) {
        const testing::PipelineOutcome fused =
            testing::run_pipeline(ctx, config, layout, dtype, BackwardOrder::Fused, 2, 2, 8, tp);
        for (BackwardOrder order : {BackwardOrder::AllBThenW, BackwardOrder::Lagged}) {
          SCOPED_TRACE(testing::config_name(config) + ", " + layout.name + ", " + testing::order_name(order) + ", " +
                       dtype_name(dtype) + ", tp " + std::to_string(tp.size()) + " rank " + std::to_string(tp.rank()));
          const testing::PipelineOutcome split = testing::run_pipeline(ctx, config, layout, dtype, order, 2, 2, 8, tp);
          ASSERT_EQ(split.grads.size(), fused.grads.size());
          for (std::size_t s = 0; s < fused.grads.size(); ++s)
            EXPECT_TRUE(testing::same_bits(split.grads[s], fused.grads[s])) << "stage " << s;
          EXPECT_EQ(split.input_grads, fused.input_grads);
          EXPECT_EQ(split.ready, fused.ready);
        }
      }
    }
  }
}

// With sequence parallelism B gathers the row-parallel layers' output gradients and the layernorms'
// outputs for W and reduce-scatters the column-parallel input gradients, as the fused backward
// does; W sums the layernorms' parameter gradients over tp. Every recompute mode, as it changes
// what B recomputes for W.
TEST(SplitBackwardTensorParallel, SequenceParallelInputThenWeightsIsTheFusedBackwardBitForBit) {
  Communicator& world = testing::test_world();
  DeviceContext& ctx = testing::test_context();
  const TensorParallel tp(&world);
  for (const GptConfig& config : testing::tp_test_configs()) {
    auto layouts = testing::split_layouts(config);
    layouts.resize(2);
    for (Recompute recompute : {Recompute::None, Recompute::Selective, Recompute::Full}) {
      GptOptions options;
      options.recompute = recompute;
      options.sequence_parallel = true;
      for (DType dtype : {DType::F32, DType::BF16}) {
        for (const testing::SplitLayout& layout : layouts) {
          const testing::PipelineOutcome fused =
              testing::run_pipeline(ctx, config, layout, dtype, BackwardOrder::Fused, 2, 2, 8, tp, options);
          for (BackwardOrder order : {BackwardOrder::AllBThenW, BackwardOrder::Lagged}) {
            SCOPED_TRACE(testing::config_name(config) + ", " + layout.name + ", " + testing::order_name(order) + ", " +
                         dtype_name(dtype) + ", recompute " +
                         std::to_string(static_cast<int>(recompute)) + ", tp " + std::to_string(tp.size()) +
                         " rank " + std::to_string(tp.rank()));
            const testing::PipelineOutcome split =
                testing::run_pipeline(ctx, config, layout, dtype, order, 2, 2, 8, tp, options);
            ASSERT_EQ(split.grads.size(), fused.grads.size());
            for (std::size_t s = 0; s < fused.grads.size(); ++s)
              EXPECT_TRUE(testing::same_bits(split.grads[s], fused.grads[s])) << "stage " << s;
            EXPECT_EQ(split.input_grads, fused.input_grads);
            EXPECT_EQ(split.ready, fused.ready);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mt
