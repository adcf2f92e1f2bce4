// The LM head's loss and gradient in row chunks (models/head_chunks.h), on a world that is one
// tensor-parallel group (1 and 2 ranks: vocab-parallel at 2). Proves that
//  - forcing several chunks (5 rows of 16 and 32: uneven, the last one short) gives the losses
//    and every gradient of one chunk, within rounding: 1e-6 relative per stage, fp32 and bf16 (the
//    GEMMs of a few rows may round apart from one over all rows, and dwte sums the chunks one after
//    the other), with and without sequence parallelism, fused and split backward, whole model and
//    three pipeline stages; gpt2's tied head and llama's untied one;
//  - no slot keeps the logits: activation_bytes() after a training forward grows with the
//    vocabulary by one chunk's [R, Vp/tp] alone, not by [N, Vp/tp];
//  - the head's gradient is made in the forward (dwte moves before any backward), and an
//    evaluation forward touches no gradient, makes no gradient use of a unit, and allows no backward;
//  - the parameter-use hooks hear the head's tied embedding as one ForwardWithGradient use in a
//    training forward, and the head's backward use lnf alone.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "models/head_chunks.h"
#include "models/tests/split_backward_harness.h"  // defines: run_pipeline, split_layouts, BackwardOrder
#include "parallel/tensor_parallel.h"
#include "runtime/kernels.h"
#include "tests/float_bits.h"  // defines: same_bits
#include "tests/test_env.h"    // defines: test_world, test_context

namespace mt {
namespace {

using testing::BackwardOrder;

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    diff += d * d;
    norm += double(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

TEST(HeadChunks, RowsFollowTheBudgetAndAreEvenedOut) {
  EXPECT_EQ(head_chunk_rows(32, 128, 4, false), 32);             // all fit
  EXPECT_EQ(head_chunk_rows(32, 128, 4, false, 5), 5);           // forced: 7 chunks of 5, 5, ..., 2
  EXPECT_EQ(head_chunk_rows(1024, 50304, 4, false), 256);        // 64 MiB of 201216-byte rows: 333, evened: 4 chunks
  EXPECT_EQ(head_chunk_rows(1000, 50304, 4, false), 250);        // 4 chunks of 250
  EXPECT_EQ(head_chunk_rows(8192, 50304, 2, true), 8192);        // 1 GiB of bf16 rows: 10672, all fit
  EXPECT_EQ(head_chunk_rows(32768, 50304, 2, true), 8192);       // 4 chunks of 8192
  EXPECT_EQ(head_chunk_rows(4, std::int64_t{1} << 30, 4, false), 1);  // a row beyond the budget: one row at a time
}

TEST(HeadChunks, SeveralChunksGiveTheLossAndGradientsOfOne) {
  Communicator& world = testing::test_world();
  DeviceContext& ctx = testing::test_context();
  const TensorParallel tp(&world);
  std::vector<bool> sequence_parallel{false};
  if (tp.size() > 1) sequence_parallel.push_back(true);
  for (ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama}) {
    const GptConfig config = testing::split_test_config(family);
    auto layouts = testing::split_layouts(config);
    layouts.resize(2);  // whole, three stages
    for (DType dtype : {DType::F32, DType::BF16}) {
      const double tolerance = 1e-6;  // measured: 2.4e-7 (fp32), 4e-8 (bf16: each row's logits are the same bits)
      for (const bool sp : sequence_parallel) {
        for (const testing::SplitLayout& layout : layouts) {
          for (BackwardOrder order : {BackwardOrder::Fused, BackwardOrder::Lagged}) {
            SCOPED_TRACE(testing::config_name(config) + ", " + layout.name + ", " + testing::order_name(order) + ", " +
                         dtype_name(dtype) + ", tp " + std::to_string(tp.size()) + (sp ? " sequence parallel" : ""));
            GptOptions one{Recompute::None, sp}, several = one;
            several.head_chunk_rows = 5;
            const testing::PipelineOutcome want =
                testing::run_pipeline(ctx, config, layout, dtype, order, 2, 2, 8, tp, one);
            const testing::PipelineOutcome got =
                testing::run_pipeline(ctx, config, layout, dtype, order, 2, 2, 8, tp, several);
            ASSERT_EQ(got.losses.size(), want.losses.size());
            for (std::size_t m = 0; m < want.losses.size(); ++m)
              EXPECT_NEAR(got.losses[m], want.losses[m], tolerance * want.losses[m]) << "micro-batch " << m;
            ASSERT_EQ(got.grads.size(), want.grads.size());
            for (std::size_t s = 0; s < want.grads.size(); ++s)
              EXPECT_LE(relative_error(got.grads[s], want.grads[s]), tolerance) << "stage " << s;
            EXPECT_EQ(got.ready, want.ready);
          }
        }
      }
    }
  }
}

// ZeRO-3's vocabulary pieces (GptOptions::vocab_pieces): wte and lm_head as 4 row pieces, each
// its own parameter, the head's logits and gradients made piece by piece into their columns and
// the embedding looked up and scattered piece by piece. The pieces lie in the flat store in the
// whole table's order, so the gradients compare element for element: within 1e-6 relative of the
// whole table (the pieces' GEMMs may round apart from one over all columns, and dlnf sums the
// pieces one after the other), also with several row chunks, on the layouts above. The
// embedding's own gradient rows and its lookup keep their bits (only the head's GEMMs differ).
TEST(HeadChunks, VocabularyPiecesGiveTheLossAndGradientsOfTheWholeTable) {
  Communicator& world = testing::test_world();
  DeviceContext& ctx = testing::test_context();
  const TensorParallel tp(&world);
  for (ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama}) {
    const GptConfig config = testing::split_test_config(family);
    ASSERT_EQ(config.vocab_rows() / tp.size() % 4, 0);
    auto layouts = testing::split_layouts(config);
    layouts.resize(2);  // whole, three stages
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (const bool sp : tp.size() > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
        for (const testing::SplitLayout& layout : layouts) {
          for (const std::int64_t rows : {0, 5}) {
            SCOPED_TRACE(testing::config_name(config) + ", " + layout.name + ", " + dtype_name(dtype) + ", tp " +
                         std::to_string(tp.size()) + (sp ? " sequence parallel" : "") + ", head rows " +
                         std::to_string(rows));
            GptOptions whole{Recompute::None, sp};
            whole.head_chunk_rows = rows;
            GptOptions pieces = whole;
            pieces.vocab_pieces = 4;
            const testing::PipelineOutcome want =
                testing::run_pipeline(ctx, config, layout, dtype, BackwardOrder::Lagged, 2, 2, 8, tp, whole);
            const testing::PipelineOutcome got =
                testing::run_pipeline(ctx, config, layout, dtype, BackwardOrder::Lagged, 2, 2, 8, tp, pieces);
            ASSERT_EQ(got.losses.size(), want.losses.size());
            for (std::size_t m = 0; m < want.losses.size(); ++m)
              EXPECT_NEAR(got.losses[m], want.losses[m], 1e-6 * want.losses[m]) << "micro-batch " << m;
            ASSERT_EQ(got.grads.size(), want.grads.size());
            for (std::size_t s = 0; s < want.grads.size(); ++s) {
              ASSERT_EQ(got.grads[s].size(), want.grads[s].size());
              EXPECT_LE(relative_error(got.grads[s], want.grads[s]), 1e-6) << "stage " << s;
            }
            EXPECT_EQ(got.input_grads.size(), want.input_grads.size());
          }
        }
      }
    }
  }
}

// Pieces: the fewest that bring a rank's table within a layer's largest unit (its MLP), dividing its
// rows.
TEST(HeadChunks, VocabularyPiecesAreTheFewestWithinALayersUnit) {
  EXPECT_EQ(vocab_pieces(50304, 384, 1774464), 12);  // 19.3M in pieces of 4192 rows (1.61M)
  EXPECT_EQ(vocab_pieces(50304, 384, 1182336), 24);  // small's MLP unit: pieces of 2096 rows (0.80M)
  EXPECT_EQ(vocab_pieces(4096, 64, 49984), 8);         // 512 rows, 32768 elements
  EXPECT_EQ(vocab_pieces(256, 64, 49984), 1);          // already within a layer
  EXPECT_EQ(vocab_pieces(7, 64, 100), 7);              // a prime number of rows: one row each
  GptConfig small = gpt_preset("small");
  EXPECT_EQ(gpt_vocab_pieces(small, 1, 3), 24);
  EXPECT_EQ(gpt_vocab_pieces(small, 2, 3), 24);  // 25152 rows against an MLP of 0.59M: 1048 rows each
  EXPECT_EQ(gpt_vocab_pieces(small, 1, 2), 1);  // only ZeRO-3 gathers per unit
  EXPECT_EQ(gpt_vocab_pieces(gpt_preset("gpt3-175b"), 8, 3), 1);
}

GptPartition whole(const GptConfig& c, const TensorParallel& tp) {
  GptPartition p = GptPartition::whole(c);
  p.tp_size = tp.size();
  p.tp_rank = tp.rank();
  return p;
}

std::vector<std::int32_t> tokens(int n, int vocab, unsigned seed) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((seed * 131 + i * 37) % static_cast<unsigned>(vocab));
  return t;
}

// activation_bytes() after a training forward of one 2 x 16 micro-batch, the head's chunks forced
// to 4 rows.
std::int64_t bytes_after_forward(int padded_vocab) {
  DeviceContext& ctx = testing::test_context();
  const TensorParallel tp(&testing::test_world());
  GptConfig c = testing::split_test_config();
  c.padded_vocab = padded_vocab;
  GptOptions options;
  options.head_chunk_rows = 4;
  Gpt model(ctx, c, DType::F32, whole(c, tp), tp, 1, options);
  model.init(3);
  const auto in = tokens(32, c.vocab_size, 1);
  model.forward(in, in, 2, 16, 1.0f);
  return model.activation_bytes();
}

TEST(HeadChunks, NoSlotKeepsTheLogits) {
  const int tp = testing::test_world().size();
  const std::int64_t small = bytes_after_forward(128), large = bytes_after_forward(1024);
  // One chunk of 4 rows of this rank's columns, fp32: [N = 32, Vp/tp] would be 8 times as much.
  EXPECT_EQ(large - small, 4 * (1024 - 128) / tp * 4);
}

// Records every use the model announces.
class Recorder : public ParamUseHooks {
 public:
  void begin(int unit, ParamUse use) override { uses.emplace_back(unit, use); }
  void end(int, ParamUse) override {}
  std::vector<std::pair<int, ParamUse>> uses;
};

TEST(HeadChunks, TheTrainingForwardMakesTheHeadsGradientAndAnEvaluationNone) {
  DeviceContext& ctx = testing::test_context();
  const TensorParallel tp(&testing::test_world());
  const GptConfig c = testing::split_test_config();
  GptOptions options;
  options.head_chunk_rows = 5;
  Gpt model(ctx, c, DType::F32, whole(c, tp), tp, 1, options);
  model.init(7);
  Recorder hooks;
  model.set_param_hooks(&hooks);
  const auto in = tokens(32, c.vocab_size, 2), target = tokens(32, c.vocab_size, 9);
  ParameterStore& store = model.parameters();
  Tensor grads = store.flat_grads();
  kernels::fill(ctx, grads, 0.25);
  const std::vector<float> before = grads.to_host<float>();

  const float evaluated = model.forward(in, target, 2, 16, Gpt::kEvaluation);
  EXPECT_TRUE(testing::same_bits(grads.to_host<float>(), before)) << "an evaluation forward wrote gradients";
  for (const auto& [unit, use] : hooks.uses) EXPECT_FALSE(writes_gradients(use)) << "unit " << unit;
  EXPECT_THROW(model.backward(), Error);

  hooks.uses.clear();
  const float trained = model.forward(in, target, 2, 16, 0.5f);
  EXPECT_EQ(trained, evaluated);
  // The head made dwte (and only it) in the forward.
  const std::vector<float> after = grads.to_host<float>();
  const auto wte = static_cast<std::size_t>(store.index_of("wte"));
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto first = static_cast<std::size_t>(store.offset(i)), n = static_cast<std::size_t>(store.spec(i).numel());
    const std::vector<float> was(before.begin() + first, before.begin() + first + n);
    const std::vector<float> now(after.begin() + first, after.begin() + first + n);
    EXPECT_EQ(testing::same_bits(now, was), i != wte) << store.spec(i).name;
  }
  const int embedding = 0, lnf = static_cast<int>(model.param_units().size()) - 1;
  ASSERT_EQ(model.param_units()[static_cast<std::size_t>(lnf)].name, "lnf");
  const std::vector<std::pair<int, ParamUse>> head{{lnf, ParamUse::Forward},
                                                   {embedding, ParamUse::ForwardWithGradient}};
  ASSERT_GE(hooks.uses.size(), 2u);
  const std::vector<std::pair<int, ParamUse>> last(hooks.uses.end() - 2, hooks.uses.end());
  EXPECT_EQ(last, head);

  hooks.uses.clear();
  model.backward();
  ASSERT_FALSE(hooks.uses.empty());
  EXPECT_EQ(hooks.uses.front(), std::make_pair(lnf, ParamUse::Backward));  // the head's backward: lnf alone
  EXPECT_EQ(hooks.uses.back(), std::make_pair(embedding, ParamUse::BackwardWeights));  // the embedding layer's
  model.set_param_hooks(nullptr);
}

}  // namespace
}  // namespace mt
