// The performance model's arithmetic: memory counted as meshtrain allocates it, ZeRO-1's sharding,
// the pipeline bubble from the schedule simulation, link choice by node, and a regression guard on
// the GPT-3 175B prediction against the MFU Megatron-LM published.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "perf/comm_model.h"
#include "perf/cost_model.h"

namespace mt::perf {
namespace {

ModelShape tiny() {
  ModelShape m = gpt_preset("tiny");  // 4 layers, 4 heads, 64 channels, context 64
  m.vocab_size = 256;                 // padded vocabulary 256
  return m;
}

// The plan meshtrain makes of a layout (parallel/layout_plan.h), with a batch every layout here takes.
LayoutPlan plan_of(const ModelShape& m, int seq_len, const Layout& l) {
  return LayoutPlan(l, layout_dims(m, seq_len), l.world_size(), 8);
}

TEST(StageParameters, WholeModelOnOneRankIsTheParameterCount) {
  const ModelShape m = gpt_preset("gpt2");
  Layout l;
  EXPECT_EQ(stage_parameters(m, plan_of(m, 1024, l), 0), m.parameter_count());
  // Two stages: the tied embedding is on both, so the stages hold its rows twice.
  l.pp = 2;
  const LayoutPlan plan = plan_of(m, 1024, l);
  EXPECT_EQ(stage_parameters(m, plan, 0) + stage_parameters(m, plan, 1),
            m.parameter_count() + static_cast<std::int64_t>(m.vocab_rows()) * m.channels);
}

TEST(Memory, TinyModelByHand) {
  const ModelShape m = tiny();
  TrainingShape t;
  t.seq_len = 32;
  t.global_batch = 2;
  t.precision = Precision::FP32;
  Layout l;
  l.micro_batch = 2;  // one micro-batch: N = 64 rows
  const Prediction p = predict_step(m, t, l, cluster_preset("cpu-2core"));
  // Parameters: wte 256x64 + wpe 64x64 + 4 layers x (12 C^2 + 13 C) + lnf 2C = 220544.
  const double params = 256 * 64 + 64 * 64 + 4 * (12 * 64 * 64 + 13 * 64) + 2 * 64;
  ASSERT_EQ(params, 220544.0);
  EXPECT_EQ(p.memory.parameters, 4 * params);
  EXPECT_EQ(p.memory.gradients, 4 * params);
  EXPECT_EQ(p.memory.optimizer, 8 * params);
  // One slot: residuals 5 x [64, 64]; per layer ln1, res2, ln2 [64,64], qkv + atty + fch + fch_gelu
  // 12 x [64, 64], 4 x [64] statistics, attention [2, 4, 32, 32]; the int32 tokens [64]; head dlnf
  // [64,64] + 4 x [64] statistics and the int32 targets [64]; dres [64, 64]. All fp32, and every
  // tensor a whole number of the allocator's 256-byte blocks. The logits: one chunk of the 64 rows.
  const double NC = 64 * 64 * 4.0;
  const double per_layer = 3 * NC + 12 * NC + 4 * 64 * 4.0 + 2 * 4 * 32 * 32 * 4.0;
  EXPECT_EQ(p.memory.in_flight, 1);
  EXPECT_EQ(p.memory.activations, 5 * NC + 4 * per_layer + 64 * 4.0 + NC + 5 * 64 * 4.0 + NC);
  EXPECT_EQ(p.memory.logits, 64 * 256 * 4.0);
  // Scratch: 10 x [64, 64], and the step's token ids (inputs and targets, [2, 64] int32); attention
  // backward's fp32 score gradients [2, 4, 32, 32] while it runs, counted twice (a caching allocator
  // may hand out a block twice the request).
  EXPECT_EQ(p.memory.workspace, 10 * NC + 2 * 64 * 4.0);
  EXPECT_EQ(p.memory.transient, 2 * (2 * 4 * 32 * 32 * 4.0));
  EXPECT_EQ(p.memory.reserved, cluster_preset("cpu-2core").memory_reserved);
  EXPECT_TRUE(p.fits);
}

TEST(Memory, BF16AddsTheComputeCopyAndHalvesActivations) {
  const ModelShape m = tiny();
  TrainingShape t;
  t.seq_len = 32;
  t.global_batch = 2;
  Layout l;
  l.micro_batch = 2;
  t.precision = Precision::FP32;
  const Prediction fp32 = predict_step(m, t, l, cluster_preset("dgx-a100"));
  t.precision = Precision::BF16;
  const Prediction bf16 = predict_step(m, t, l, cluster_preset("dgx-a100"));
  EXPECT_EQ(bf16.memory.parameters, fp32.memory.parameters * 1.5);
  EXPECT_EQ(bf16.memory.gradients, fp32.memory.gradients);  // fp32 gradients either way
  EXPECT_LT(bf16.memory.activations, fp32.memory.activations);
  EXPECT_EQ(bf16.memory.logits * 2, fp32.memory.logits);
}

TEST(Memory, Zero1ShardsTheMomentsOverDp) {
  const ModelShape m = gpt_preset("gpt2");
  TrainingShape t;
  t.seq_len = 1024;
  t.global_batch = 32;
  t.precision = Precision::BF16;
  Layout l;
  l.dp = 8;
  l.micro_batch = 4;
  const Cluster c = cluster_preset("dgx-a100");
  const Prediction replicated = predict_step(m, t, l, c);
  l.zero = 1;
  const Prediction sharded = predict_step(m, t, l, c);
  // 1/8 of the moments, plus at most a 256-byte block per piece (a tensor's part in a bucket).
  EXPECT_NEAR(sharded.memory.optimizer * 8, replicated.memory.optimizer, 0.01 * replicated.memory.optimizer);
  EXPECT_GE(sharded.memory.optimizer * 8, replicated.memory.optimizer * 0.99);
  EXPECT_EQ(sharded.memory.parameters, replicated.memory.parameters);
  EXPECT_EQ(sharded.memory.gradients, replicated.memory.gradients);
  EXPECT_EQ(sharded.memory.activations, replicated.memory.activations);
  // Reduce-scatter + allgather move what the allreduce moved; the optimizer updates 1/8.
  EXPECT_LT(sharded.time.optimizer, replicated.time.optimizer);
}

TEST(Pipeline, OneFOneBBubbleIsPMinusOneOverMPlusPMinusOne) {
  const ModelShape m = gpt_preset("gpt2");
  TrainingShape t;
  t.seq_len = 128;
  t.precision = Precision::FP32;  // no bf16 casts
  t.validation = false;           // its forward-only schedule may hold more (held_slots)
  for (int P : {2, 4}) {
    for (int M : {4, 8, 12}) {
      t.global_batch = M;
      Layout l;
      l.pp = P;
      l.dp = 1;
      Cluster c = cluster_preset("dgx-a100");
      c.devices_per_node = P;
      const Prediction p = predict_step(m, t, l, c);
      ASSERT_EQ(p.micro_batches, M);
      const double pipeline = p.time.compute + p.time.bubble;  // tp = 1: no tensor-parallel time
      // The schedule is simulated at backward costs rounded to sixteenths of a forward: exact while
      // backward was twice forward, but the head's stage (the slowest) runs its gradient GEMMs in
      // its forward now, so the rounding moves each of the M + P - 1 f + b by up to f / 32: the
      // fraction by less than 1/32 (0.005 here).
      EXPECT_NEAR(p.time.bubble / pipeline, (P - 1.0) / (M + P - 1.0), 1.0 / 32) << "P=" << P << " M=" << M;
      EXPECT_EQ(p.memory.in_flight, std::min(P, M));  // stage 0 holds min(P, M) micro-batches
    }
  }
}

TEST(Pipeline, InterleavingShrinksTheBubble) {
  const ModelShape m = gpt_preset("gpt2");
  TrainingShape t;
  t.seq_len = 128;
  t.global_batch = 8;
  t.precision = Precision::FP32;
  Cluster c = cluster_preset("dgx-a100");
  c.devices_per_node = 4;
  Layout l;
  l.pp = 4;
  const Prediction plain = predict_step(m, t, l, c);
  l.virtual_stages = 3;
  l.schedule = ScheduleKind::Interleaved;
  const Prediction interleaved = predict_step(m, t, l, c);
  EXPECT_NEAR(interleaved.time.bubble / interleaved.time.compute, 3.0 / (3 * 8), 0.02);
  EXPECT_NEAR(plain.time.bubble / plain.time.compute, 3.0 / 8, 0.02);
}

// Zero-bubble H1 fills the bubble with the deferred W: at the same p and m it idles less than 1F1B
// (a third as much at F = B = W) and computes the same. GPT-2's layers are near F = B = W; its LM
// head (50k vocabulary: as many FLOPs as 5 layers) runs all its GEMMs in the forward, which
// makes the head's stage's F outweigh its B and W: a 1024-token vocabulary (a head of 1% of a
// stage's FLOPs) keeps the test at F = B = W.
TEST(Pipeline, ZeroBubbleH1BubbleIsBelowOneFOneBs) {
  ModelShape m = gpt_preset("gpt2");
  m.vocab_size = 1024;
  m.padded_vocab = 1024;
  TrainingShape t;
  t.seq_len = 128;
  t.precision = Precision::FP32;
  Cluster c = cluster_preset("dgx-a100");
  for (int P : {2, 4}) {
    for (int M : {4, 8, 12}) {
      t.global_batch = M;
      c.devices_per_node = P;
      Layout l;
      l.pp = P;
      const Prediction one = predict_step(m, t, l, c);
      l.schedule = ScheduleKind::ZeroBubbleH1;
      const Prediction zb = predict_step(m, t, l, c);
      SCOPED_TRACE("P=" + std::to_string(P) + " M=" + std::to_string(M));
      EXPECT_EQ(zb.time.compute, one.time.compute);
      EXPECT_GT(zb.time.bubble, 0.0);
      EXPECT_LT(zb.time.bubble, 0.6 * one.time.bubble);
      EXPECT_LT(zb.step_s, one.step_s);
    }
  }
}

// The zero-bubble schedules are simulated with the backward split: W the weight-gradient GEMMs (as
// many FLOPs as the forward's GEMMs), B the input-gradient GEMMs, attention's backward (twice its
// forward, no weights) and recomputation's extra forward. Checked against the schedule simulated
// with those costs by hand (each rounded to 1/16 of the forward, as the model does).
TEST(Pipeline, ZeroBubbleSimulatesTheBackwardSplitIntoInputAndWeight) {
  const ModelShape m = gpt_preset("gpt2");
  TrainingShape t;
  t.seq_len = 1024;  // attention is a fifth of a layer's FLOPs: B and W differ
  t.global_batch = 4;
  t.precision = Precision::FP32;
  Cluster c = cluster_preset("dgx-a100");
  c.devices_per_node = 2;
  for (ScheduleKind kind : {ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleV}) {
    for (bool recompute : {false, true}) {
      Layout l;
      l.recompute = recompute ? Recompute::Full : Recompute::None;
      l.pp = 2;
      l.schedule = kind;
      const Prediction p = predict_step(m, t, l, c);
      LayoutRequest request = l;
      request.order = "tp-dp-pp";
      const LayoutPlan plan(request, layout_dims(m, t.seq_len), 2, t.global_batch);
      const int P = 2, v = plan.layout().virtual_stages;
      // FLOPs per micro-batch of each stage: forward, input part (B), weight part (W).
      double slow_f = 0, slow_b = 0, slow_w = 0;
      for (int s = 0; s < P; ++s) {
        double f = 0, b = 0, w = 0;
        for (int k = 0; k < v; ++k) {
          const int g = global_chunk_of(plan.placement(), P, s, k);
          const ChunkWork work = chunk_work(m, t, plan.layout(), plan.chunk_layers()[static_cast<std::size_t>(g)],
                                            g == 0, g == P * v - 1);
          // The head's gradient GEMMs run in its forward (models/gpt.h).
          f += work.forward_flops + 2 * work.head_flops;
          w += work.forward_flops - work.head_flops - work.attention_flops;
          b += work.forward_flops - work.head_flops + work.attention_flops + (recompute ? work.layer_flops : 0.0);
        }
        if (f + b + w > slow_f + slow_b + slow_w) slow_f = f, slow_b = b, slow_w = w;
      }
      // The schedule simulated on a grid of sixteenths of a forward, interpolated between the four
      // grid points around B and W.
      const double bq = slow_b / slow_f * 16.0, wq = slow_w / slow_f * 16.0;
      const double b0 = std::floor(bq), w0 = std::floor(wq), tb = bq - b0, tw = wq - w0;
      const auto at = [&](double b, double w) {
        return simulate(plan.train_schedule(), ComputeCosts{1.0, b / 16.0, w / 16.0}).makespan;
      };
      const double units = (1 - tb) * (1 - tw) * at(b0, w0) + tb * (1 - tw) * at(b0 + 1, w0) +
                           (1 - tb) * tw * at(b0, w0 + 1) + tb * tw * at(b0 + 1, w0 + 1);
      const double work = t.global_batch * (slow_f + slow_b + slow_w);
      SCOPED_TRACE(std::string(schedule_kind_name(kind)) + (recompute ? " recompute" : ""));
      EXPECT_NEAR(p.time.bubble / p.time.compute, (units * slow_f / v - work) / work, 1e-9);
    }
  }
}

// zb-v's stage 0 holds the embedding and the head: no tied-embedding sync between stages, and its
// turn at the last stage is no message; interleaved v = 2 crosses all 2P-1 chunk boundaries.
TEST(Pipeline, ZeroBubbleVKeepsTheTiedEmbeddingOnOneStage) {
  const ModelShape m = gpt_preset("gpt2");  // 12 layers
  TrainingShape t;
  t.seq_len = 128;
  t.global_batch = 12;
  Cluster c = cluster_preset("dgx-a100");
  c.devices_per_node = 3;
  Layout l;
  l.pp = 3;
  l.schedule = ScheduleKind::OneFOneB;
  const Prediction one = predict_step(m, t, l, c);
  l.schedule = ScheduleKind::Interleaved;
  l.virtual_stages = 2;
  const Prediction interleaved = predict_step(m, t, l, c);
  l.schedule = ScheduleKind::ZeroBubbleV;
  const Prediction zb_v = predict_step(m, t, l, c);
  EXPECT_GT(one.time.embedding_sync, 0.0);
  EXPECT_GT(interleaved.time.embedding_sync, 0.0);
  EXPECT_EQ(zb_v.time.embedding_sync, 0.0);
  EXPECT_NEAR(zb_v.time.pp_comm / interleaved.time.pp_comm, 4.0 / 5.0, 1e-12);
  EXPECT_EQ(zb_v.memory.stage, 0);  // embedding, head and logits
  EXPECT_GT(zb_v.memory.logits, 0.0);
  EXPECT_GT(zb_v.memory.deferred_weight, 0.0);
}

TEST(Links, TensorParallelAcrossNodesCostsMore) {
  const ModelShape m = gpt_preset("gpt2-medium");  // 16 heads
  TrainingShape t;
  t.seq_len = 1024;
  t.global_batch = 16;
  t.precision = Precision::BF16;
  Layout l;
  l.dp = 2;
  l.tp = 8;
  l.micro_batch = 2;
  Cluster inside = cluster_preset("dgx-a100");
  inside.nodes = 2;  // 2 x 8: each tp group is one node
  Cluster across = inside;
  across.nodes = 4;
  across.devices_per_node = 4;  // 4 x 4: each tp group spans two nodes
  const Prediction a = predict_step(m, t, l, inside), b = predict_step(m, t, l, across);
  EXPECT_FALSE(a.tp_crosses_nodes);
  EXPECT_TRUE(b.tp_crosses_nodes);
  EXPECT_TRUE(a.dp_crosses_nodes);
  EXPECT_GT(b.time.tp_comm, 5 * a.time.tp_comm);
  EXPECT_EQ(a.time.compute, b.time.compute);
  EXPECT_GT(b.step_s, a.step_s);
}

TEST(Comm, RingAndTree) {
  const Link link{10e9, 5e-6};
  // 8 ranks, 80 MB: ring 14 steps + 2 x 7/8 x 80 MB.
  EXPECT_DOUBLE_EQ(ring_allreduce_s(8, 80e6, link), 14 * 5e-6 + 2.0 * 7 / 8 * 80e6 / 10e9);
  EXPECT_DOUBLE_EQ(allreduce_s(8, 80e6, link), ring_allreduce_s(8, 80e6, link));
  // 8 bytes on 64 ranks: the tree's 2 x 6 steps beat the ring's 126.
  EXPECT_DOUBLE_EQ(allreduce_s(64, 8, link), tree_allreduce_s(64, 8, link));
  EXPECT_EQ(allreduce_s(1, 1e9, link), 0.0);
}

// GPT-3 175B on 1024 A100s as Megatron-LM trained it (Narayanan et al., SC'21: tensor 8 x pipeline
// 16, global batch 1536, micro-batch 1): 140 TFLOP/s per GPU, counted with activation
// recomputation (an extra forward: 96 instead of 72 B s l h^2 per step), i.e. 140 x 0.751 = 105
// model TFLOP/s, an MFU of 0.337. Predicted with recomputation, as they ran it, the model must stay
// within 25% of that; without it (as meshtrain runs) the step is shorter by about the extra forward.
TEST(Gpt3, PredictionStaysNearPublishedMfu) {
  const ModelShape m = gpt_preset("gpt3-175b");
  TrainingShape t;
  t.seq_len = 2048;
  t.global_batch = 1536;
  t.precision = Precision::BF16;
  Layout l;
  l.recompute = Recompute::Full;
  l.dp = 8;
  l.tp = 8;
  l.pp = 16;
  l.micro_batch = 1;
  Cluster c = cluster_preset("dgx-a100");
  c.nodes = 128;
  const Prediction megatron = predict_step(m, t, l, c);
  const double published_mfu = 0.337;
  EXPECT_GT(megatron.mfu, 0.75 * published_mfu) << describe(megatron);
  EXPECT_LT(megatron.mfu, 1.25 * published_mfu) << describe(megatron);
  EXPECT_FALSE(megatron.tp_crosses_nodes);
  EXPECT_TRUE(megatron.pp_crosses_nodes);
  EXPECT_TRUE(megatron.dp_crosses_nodes);
  l.recompute = Recompute::None;
  const Prediction meshtrain = predict_step(m, t, l, c);
  EXPECT_GT(meshtrain.mfu, megatron.mfu * 1.15);
  EXPECT_LT(meshtrain.mfu, megatron.mfu * 1.40);
  EXPECT_GT(meshtrain.memory.activations, 5 * megatron.memory.activations);  // 7 of 6 layers x 428 MB kept
}

}  // namespace
}  // namespace mt::perf

namespace mt::perf {
namespace {

// Context parallelism: cp ranks split each sequence's rows, so a rank computes what a rank of dp
// twice as large computes (half the rows or half the sequences), and pays the ring on top: per
// layer cp-1 kv blocks forward and backward (the backward's with their fp32 dK/dV), exposed only
// beyond the block attention each overlaps. The gradients reduce over dp x cp.
TEST(ContextParallel, ChargesTheRingBeyondTheBlockAttention) {
  const ModelShape m = gpt_preset("llama3-8b");
  TrainingShape t;
  t.seq_len = 8192;
  t.global_batch = 2;
  t.precision = Precision::BF16;
  Cluster c = cluster_preset("dgx-h100");
  Layout dp;
  dp.dp = 2;
  dp.tp = 4;
  Layout cp = dp;
  cp.dp = 1;
  cp.cp = 2;
  cp.micro_batch = 2;  // one micro-batch per step, as dp's: the same rows per rank, 2 x 4096
  const Prediction by_dp = predict_step(m, t, dp, c), by_cp = predict_step(m, t, cp, c);
  ASSERT_EQ(by_cp.micro_batches, 1);
  // Each rank computes the same FLOPs; the ring moves (cp-1) blocks [2, 4096, 2 x 8 kv heads x 128 / 4
  // tp] of bf16 per layer forward, and the same plus fp32 accumulators backward.
  EXPECT_NEAR(by_cp.time.compute, by_dp.time.compute, 1e-9 * by_dp.time.compute);
  EXPECT_EQ(by_dp.time.cp_comm, 0.0);
  EXPECT_EQ(by_dp.time.cp_total, 0.0);
  const double kv = 2 * 4096.0 * 2 * 8 * 128 / 4;
  const Link& link = c.intra;
  const double per_layer = p2p_s(kv * 2, link) + p2p_s(kv * 6, link) + p2p_s(kv * 4, link);
  EXPECT_NEAR(by_cp.time.cp_total, 32 * per_layer, 1e-9 * by_cp.time.cp_total);
  // Over NVLink the block attention hides the kv blocks: only each layer's last accumulator trip shows.
  EXPECT_NEAR(by_cp.time.cp_comm, 32 * p2p_s(kv * 4, link), 1e-9 * by_cp.time.cp_comm);
  // A slow link exposes the blocks too.
  Cluster slow = c;
  slow.intra.bandwidth = 1e9;
  const Prediction on_slow = predict_step(m, t, cp, slow);
  EXPECT_GT(on_slow.time.cp_comm, 32 * p2p_s(kv * 4, slow.intra) * 1.5);
  EXPECT_GT(on_slow.step_s, by_cp.step_s);
  // The parts add up to the step; the breakdown says so.
  EXPECT_NEAR(by_cp.time.sum(), by_cp.step_s, 1e-9 * by_cp.step_s);
  EXPECT_NEAR(on_slow.time.sum(), on_slow.step_s, 1e-9 * on_slow.step_s);
  EXPECT_NE(describe(by_cp).find("cp comm"), std::string::npos) << describe(by_cp);
  EXPECT_EQ(describe(by_dp).find("cp comm"), std::string::npos);
}

TEST(ContextParallel, GradientsReduceOverDpTimesCp) {
  const ModelShape m = tiny();
  TrainingShape t;
  t.seq_len = 64;
  t.global_batch = 8;
  const Cluster c = cluster_preset("dgx-a100");
  Layout dp;
  dp.dp = 4;
  dp.zero = 1;
  Layout cp = dp;
  cp.dp = 2;
  cp.cp = 2;
  const Prediction a = predict_step(m, t, dp, c), b = predict_step(m, t, cp, c);
  // The same bytes reduced over 4 ranks, and ZeRO-1's moments sharded over 4.
  EXPECT_EQ(a.time.dp_total, b.time.dp_total);
  EXPECT_EQ(a.memory.optimizer, b.memory.optimizer);
  // ZeRO-3 gathers over dp x cp too, even where dp is 1.
  Layout only_cp;
  only_cp.cp = 2;
  only_cp.zero = 3;
  Layout no_split = only_cp;
  no_split.cp = 1;
  EXPECT_GT(predict_step(m, t, only_cp, c).time.dp_total, 0.0);
  EXPECT_EQ(predict_step(m, t, no_split, c).time.dp_total, 0.0);
}

}  // namespace
}  // namespace mt::perf
