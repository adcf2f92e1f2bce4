// Gpt with sequence parallelism against Gpt with tensor parallelism alone, on a world that is one
// tp group (2 and 4 ranks). Proves that
//  - the losses and every parameter gradient agree (fp32 within 1e-5 relative per tensor: the
//    layernorms' gradients are now sums of per-rank row blocks, and reduce-scatter sums in another
//    order than allreduce; a missing tp sum or a wrong row block is off by far more), whole model
//    and a two-stage pipeline that hands [N/tp, C] activations between its chunks;
//  - the tensors between the tp regions (residual stream, layernorm inputs and outputs and their
//    statistics, the gradient flowing back) are held as [N/tp, C]: activation_bytes() falls by
//    exactly their (tp-1)/tp, less the gathered buffers the scratch adds;
//  - a micro-batch whose positions tp does not divide is refused before anything is sent.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "models/gpt.h"
#include "parallel/tensor_parallel.h"
#include "tests/test_env.h"

namespace mt {
namespace {

constexpr int kB = 2, kT = 16;

GptConfig config() {
  GptConfig c = gpt_preset("tiny");
  c.layers = 2;
  c.vocab_size = 256;
  c.max_seq_len = 32;
  return c;
}

GptPartition tp_partition(const GptConfig& c, int tp, int rank, std::vector<LayerRange> chunks, bool embedding,
                          bool head) {
  GptPartition p = GptPartition::whole(c);
  p.tp_size = tp;
  p.tp_rank = rank;
  p.chunks = std::move(chunks);
  p.embedding = embedding;
  p.head = head;
  return p;
}

std::vector<std::int32_t> tokens(unsigned seed) {
  std::vector<std::int32_t> t(kB * kT);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((seed * 131 + i * 37) % 256);
  return t;
}

struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;  // per stage, the flat gradients
  std::int64_t activation_bytes = 0;      // of the whole model after a forward
};

// Two micro-batches through the whole model, or through two pipeline stages run on this rank
// (layers 0 and 1, the activation handed over by copy), accumulating gradients.
Outcome run(bool sequence_parallel, bool pipeline) {
  Communicator& world = testing::test_world();
  DeviceContext& ctx = testing::test_context();
  const GptConfig c = config();
  const TensorParallel tp(&world);
  const GptOptions options{Recompute::None, sequence_parallel};
  std::vector<std::unique_ptr<Gpt>> stages;
  if (!pipeline) {
    stages.push_back(std::make_unique<Gpt>(ctx, c, DType::F32, tp_partition(c, tp.size(), tp.rank(), {{0, 2}}, true, true),
                                           tp, 1, options));
  } else {
    stages.push_back(std::make_unique<Gpt>(ctx, c, DType::F32, tp_partition(c, tp.size(), tp.rank(), {{0, 1}}, true, false),
                                           tp, 1, options));
    stages.push_back(std::make_unique<Gpt>(ctx, c, DType::F32, tp_partition(c, tp.size(), tp.rank(), {{1, 2}}, false, true),
                                           tp, 1, options));
  }
  for (auto& s : stages) s->init(99);
  Outcome out;
  for (int micro = 0; micro < 2; ++micro) {
    const auto in = tokens(static_cast<unsigned>(micro)), target = tokens(static_cast<unsigned>(micro) + 7);
    if (!pipeline) {
      out.losses.push_back(stages[0]->forward(in, target, kB, kT, 0.5f));
      if (micro == 0) out.activation_bytes = stages[0]->activation_bytes();
      stages[0]->backward();
      continue;
    }
    stages[0]->forward_chunk(0, micro, kB, kT, in, {}, 0.5f);
    Tensor handed = stages[1]->input_buffer(0, micro, kB, kT);
    handed.copy_from(stages[0]->output(0, micro), ctx.stream());
    out.losses.push_back(stages[1]->forward_chunk(0, micro, kB, kT, {}, target, 0.5f));
    stages[1]->backward_chunk(0, micro);
    stages[0]->output_grad_buffer(0, micro).copy_from(stages[1]->input_grad(0, micro), ctx.stream());
    stages[0]->backward_chunk(0, micro);
    for (auto& s : stages) s->release(0, micro);
  }
  for (auto& s : stages) out.grads.push_back(s->parameters().flat_grads().to_host<float>());
  return out;
}

TEST(SequenceParallel, TrainsTheGradientsOfTensorParallelismAlone) {
  for (bool pipeline : {false, true}) {
    SCOPED_TRACE(pipeline ? "two stages" : "whole model");
    const Outcome plain = run(false, pipeline), split = run(true, pipeline);
    ASSERT_EQ(plain.losses.size(), split.losses.size());
    for (std::size_t i = 0; i < plain.losses.size(); ++i)
      EXPECT_NEAR(split.losses[i], plain.losses[i], 1e-6 * plain.losses[i]) << "micro-batch " << i;
    for (std::size_t s = 0; s < plain.grads.size(); ++s) {
      double diff = 0, norm = 0;
      for (std::size_t i = 0; i < plain.grads[s].size(); ++i) {
        const double d = double(split.grads[s][i]) - plain.grads[s][i];
        diff += d * d;
        norm += double(plain.grads[s][i]) * plain.grads[s][i];
      }
      EXPECT_LE(std::sqrt(diff / norm), 1e-5) << "stage " << s;
    }
  }
}

TEST(SequenceParallel, TheSplitRegionsHoldOneTpthOfTheirRows) {
  const int tp = testing::test_world().size();
  const Outcome plain = run(false, false), split = run(true, false);
  const std::int64_t L = config().layers, C = config().channels, N = kB * kT, R = N / tp;
  // Per slot: L + 1 residual tensors, per layer ln1, res2, ln2 (each [rows, C]) and four statistics
  // [rows]; the head's two statistics; dres [rows, C]. fp32 throughout.
  const auto split_regions = [&](std::int64_t rows) { return 4 * ((L + 1 + 3 * L + 1) * rows * C + (4 * L + 2) * rows); };
  // The scratch gains the gathered [N, C] input and gradient, two [R, C] buffers, [2C] layernorm sums.
  const std::int64_t scratch_added = 4 * (2 * N * C + 2 * R * C + 2 * C);
  EXPECT_EQ(plain.activation_bytes - split.activation_bytes, split_regions(N) - split_regions(R) - scratch_added);
  EXPECT_LT(split.activation_bytes, plain.activation_bytes);
}

TEST(SequenceParallel, PositionsNotDividedByTpAreRefused) {
  Communicator& world = testing::test_world();
  if (world.size() < 4) GTEST_SKIP() << "2 divides 2 x 15 = 30 positions; 4 does not";
  const GptConfig c = config();
  const TensorParallel tp(&world);
  Gpt model(testing::test_context(), c, DType::F32, tp_partition(c, tp.size(), tp.rank(), {{0, 2}}, true, true), tp, 1,
            GptOptions{Recompute::None, true});
  model.init(1);
  const std::uint64_t issued = world.collectives_issued();
  std::vector<std::int32_t> in(2 * 15, 1);
  EXPECT_THROW(model.forward(in, in, 2, 15, 1.0f), Error);
  EXPECT_EQ(world.collectives_issued(), issued);
  world.barrier();
}

}  // namespace
}  // namespace mt
