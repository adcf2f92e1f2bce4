// Activation recomputation under tensor parallelism (the world is one tp group): the recomputed
// layer's forward makes the forward's collectives again on every rank, in step, so with selective
// and full recomputation each rank's losses, parameter gradients and input gradients are those of
// the run without it bit for bit, fused and with B and W split, fp32 and bf16; gpt2, and llama with
// its kv heads split over tp (2 kv heads) and replicated (1 kv head).
#include <gtest/gtest.h>

#include <string>

#include "models/tests/split_backward_harness.h"  // defines: run_pipeline, split_layouts, BackwardOrder
#include "parallel/tensor_parallel.h"
#include "tests/float_bits.h"  // defines: same_bits
#include "tests/test_env.h"    // defines: test_world, test_context

namespace mt {
namespace {

using testing::BackwardOrder;

TEST(RecomputeTensorParallel, GradientsAreTheBitsOfNoRecomputationOnEveryRank) {
  Communicator& world = testing::test_world();
  DeviceContext& ctx = testing::test_context();
  const TensorParallel tp(&world);
  for (const GptConfig& config : testing::tp_test_configs()) {
    auto layouts = testing::split_layouts(config);
    layouts.resize(2);  // whole, three stages (embedding, middle and head chunks)
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (const testing::SplitLayout& layout : layouts) {
        const testing::PipelineOutcome plain =
            testing::run_pipeline(ctx, config, layout, dtype, BackwardOrder::Fused, 2, 2, 8, tp);
        for (Recompute r : {Recompute::Selective, Recompute::Full}) {
          for (BackwardOrder order : {BackwardOrder::Fused, BackwardOrder::Lagged}) {
            SCOPED_TRACE(testing::config_name(config) + ", " + layout.name + ", recompute " + recompute_name(r) + ", " +
                         testing::order_name(order) + ", " + dtype_name(dtype) + ", tp " + std::to_string(tp.size()) +
                         " rank " + std::to_string(tp.rank()));
            const testing::PipelineOutcome got =
                testing::run_pipeline(ctx, config, layout, dtype, order, 2, 2, 8, tp, GptOptions{r});
            EXPECT_TRUE(testing::same_bits(got.losses, plain.losses));
            ASSERT_EQ(got.grads.size(), plain.grads.size());
            for (std::size_t s = 0; s < plain.grads.size(); ++s)
              EXPECT_TRUE(testing::same_bits(got.grads[s], plain.grads[s])) << "stage " << s;
            EXPECT_TRUE(got.input_grads == plain.input_grads);
            EXPECT_EQ(got.ready, plain.ready);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mt
