// The memory options in the performance model, worked out by hand on the tiny model: what
// recomputation, sequence parallelism and ZeRO-2/3 take off (and add to) each part of a rank's
// memory, and the time each costs. The features' own runs check the estimate against the allocator
// in memory_bound_test once they are built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "models/param_use.h"
#include "perf/comm_model.h"
#include "perf/cost_model.h"
#include "runtime/error.h"

namespace mt::perf {
namespace {

ModelShape tiny() {
  ModelShape m = gpt_preset("tiny");  // 4 layers, 4 heads, 64 channels, context 64
  m.vocab_size = 256;                 // padded vocabulary 256
  return m;
}

TrainingShape fp32_shape(int global_batch) {
  TrainingShape t;
  t.seq_len = 32;
  t.global_batch = global_batch;
  t.precision = Precision::FP32;
  return t;
}

// The two-core CPU preset with a rank per core.
Cluster two_ranks() {
  Cluster c = cluster_preset("cpu-2core");
  c.devices_per_node = 2;
  return c;
}

constexpr double NC = 64 * 64 * 4.0;                  // [N, C] fp32 with N = 2 x 32 rows
constexpr double kAttention = 2 * 4 * 32 * 32 * 4.0;  // probabilities [B, H, T, T] fp32
constexpr double kGelu = 64 * 256 * 4.0;              // GELU output [N, 4C] fp32
// Per layer (tp 1): ln1, res2, ln2 3 [N,C]; qkv, atty, fch, fch_gelu 12 [N,C]; 4 [N] statistics; attention.
constexpr double kLayer = 3 * NC + 12 * NC + 4 * 256.0 + kAttention;

Prediction tiny_one_rank(Recompute recompute) {
  Layout l;
  l.micro_batch = 2;  // one micro-batch of N = 64 rows
  l.recompute = recompute;
  return predict_step(tiny(), fp32_shape(2), l, cluster_preset("cpu-2core"));
}

// Full: a slot keeps the residual stream (the layers' inputs) and the head, no layer's activations;
// the scratch rebuilds one layer. Selective: a slot keeps all but the attention probabilities and
// the GELU output of each layer; the scratch rebuilds one of each.
TEST(MemoryOptions, RecomputeKeepsLessPerLayerAndRebuildsOneInTheScratch) {
  const Prediction none = tiny_one_rank(Recompute::None);
  const Prediction selective = tiny_one_rank(Recompute::Selective);
  const Prediction full = tiny_one_rank(Recompute::Full);
  const double rest = 5 * NC + 256.0 + NC + 5 * 256.0 + NC;  // residuals, tokens, head, dres
  EXPECT_EQ(none.memory.activations, rest + 4 * kLayer);
  EXPECT_EQ(selective.memory.activations, rest + 4 * (kLayer - kAttention - kGelu));
  EXPECT_EQ(full.memory.activations, rest);
  // The scratch's 10 x [N, C], the step's token ids ([2, N] int32), and what recomputation rebuilds.
  const double ids = 2 * 64 * 4.0;
  EXPECT_EQ(none.memory.workspace, 10 * NC + ids);
  EXPECT_EQ(selective.memory.workspace, 10 * NC + ids + kAttention + kGelu);
  EXPECT_EQ(full.memory.workspace, 10 * NC + ids + kLayer);
  EXPECT_EQ(full.memory.parameters, none.memory.parameters);
  EXPECT_EQ(full.memory.transient, none.memory.transient);
}

// Full recomputation runs the layers' forward again in backward, selective the attention core.
TEST(MemoryOptions, RecomputeCostsAForwardOfTheLayersOrOfTheAttentionCore) {
  const ModelShape m = tiny();
  const TrainingShape t = fp32_shape(2);
  const Cluster c = cluster_preset("cpu-2core");
  const double rate = c.peak_flops * c.achieved_fraction;  // fp32 on an fp32-rated CPU
  const Prediction none = tiny_one_rank(Recompute::None);
  Layout l;
  l.micro_batch = 2;
  const ChunkWork w = chunk_work(m, t, l, 4, true, true);
  EXPECT_NEAR(tiny_one_rank(Recompute::Selective).time.compute - none.time.compute, w.attention_flops / rate, 1e-15);
  EXPECT_NEAR(tiny_one_rank(Recompute::Full).time.compute - none.time.compute, w.layer_flops / rate, 1e-15);
}

// tp 2, sequence parallel: ln1, res2, ln2, the residual stream and dres are [N/2, C]; lnf stays
// [N, C] (gathered for the LM head), its statistics [N/2] still fill a 256-byte block like the
// layers'. The scratch gains the gathered input and gradient [N, C], their rows [N/2, C] and a
// layernorm's parameter gradients [2C] fp32 (models/gpt.cpp Gpt::Scratch; until memory_bound_test
// ran sequence parallelism the estimate split lnf and counted the gathered input alone).
TEST(MemoryOptions, SequenceParallelSplitsTheLayernormAndResidualRowsOverTp) {
  Layout l;
  l.tp = 2;
  l.micro_batch = 2;
  const Cluster c = two_ranks();
  const Prediction plain = predict_step(tiny(), fp32_shape(2), l, c);
  l.sequence_parallel = true;
  const Prediction sp = predict_step(tiny(), fp32_shape(2), l, c);
  const double half = NC / 2;  // an [N, C] piece saves half of itself
  EXPECT_EQ(plain.memory.activations - sp.memory.activations, 5 * half + 4 * 3 * half + half);
  EXPECT_EQ(sp.memory.workspace - plain.memory.workspace, 2 * NC + 2 * half + 2 * 64 * 4.0);
  EXPECT_EQ(sp.memory.parameters, plain.memory.parameters);
  // The all-gather / reduce-scatter pairs move the allreduces' bytes: the same time.
  EXPECT_EQ(sp.time.tp_comm, plain.time.tp_comm);
  EXPECT_EQ(sp.layout.describe(), "dp=1 tp=2 pp=1 v=1 zero=0 micro=2 schedule=1f1b sp");
}

// With a pipeline, each message between stages is 1/tp of the activations.
TEST(MemoryOptions, SequenceParallelShrinksThePipelineMessagesByTp) {
  Layout l;
  l.tp = 2;
  l.pp = 2;
  l.dp = 2;
  l.micro_batch = 2;
  const Cluster c = cluster_preset("dgx-a100");
  const Prediction plain = predict_step(tiny(), fp32_shape(8), l, c);
  l.sequence_parallel = true;
  const Prediction sp = predict_step(tiny(), fp32_shape(8), l, c);
  const Link& link = plain.pp_crosses_nodes ? c.inter : c.intra;
  EXPECT_NEAR(sp.time.pp_comm / plain.time.pp_comm, p2p_s(NC / 2, link) / p2p_s(NC, link), 1e-12);
  EXPECT_LT(sp.memory.total(), plain.memory.total());
}

// dp 2, one stage: 220544 parameters in units embedding 20480, 4 layers of 49984 each cut into its
// attention (16768) and its MLP (33216), lnf 128. ZeRO-2 keeps half of the gradients plus the two
// largest units' in full, and the reduce-scatter outputs of the two being reduced (half an MLP
// each: 66432 bytes, 260 blocks; counted since memory_bound_test ran ZeRO-2, whose peak they
// pass); ZeRO-3 the owned shard of the parameters too and, gathered, the unit in use and the two
// prefetched (kPrefetchUnits): three MLPs (bf16: below); AdamW's moments
// as ZeRO-1's, ZeRO-3 with a piece more per unit (10).
TEST(MemoryOptions, ZeroTwoAndThreeKeepTheOwnedShardAndTwoUnitsInFull) {
  const double params = 220544, attention = 16768, mlp = 33216;
  ASSERT_EQ(params, 256 * 64 + 64 * 64 + 4 * (attention + mlp) + 2 * 64);
  Layout l;
  l.dp = 2;
  l.micro_batch = 2;
  const Cluster c = two_ranks();
  const auto at = [&](int zero, Precision precision, Recompute recompute = Recompute::None) {
    Layout z = l;
    z.zero = zero;
    z.recompute = recompute;
    TrainingShape t = fp32_shape(4);
    t.precision = precision;
    return predict_step(tiny(), t, z, c).memory;
  };
  const MemoryBreakdown z1 = at(1, Precision::FP32), z2 = at(2, Precision::FP32), z3 = at(3, Precision::FP32);
  EXPECT_EQ(z1.gradients, 4 * params);
  const double pieces = 2 * 260 * 256.0;
  EXPECT_EQ(z2.gradients, 4 * params / 2 + 2 * 4 * mlp + pieces);
  EXPECT_EQ(z2.parameters, 4 * params);
  EXPECT_EQ(z2.optimizer, z1.optimizer);
  EXPECT_EQ(z3.gradients, z2.gradients);
  static_assert(kPrefetchUnits == 2);
  EXPECT_EQ(z3.parameters, 4 * params / 2 + 3 * 4 * mlp);
  EXPECT_EQ(z3.optimizer, z1.optimizer + 2 * 256.0 * 10);
  EXPECT_EQ(z3.activations, z1.activations);
  // bf16: the GEMM weights' owned bf16 shards too; a gathered unit holds its GEMM weights' bf16
  // copy alone (no fp32) and its other parameters in fp32 and bf16, each buffer rounded up to whole
  // 256-byte blocks. An MLP: ln2 (fp32 512 + bf16 256), fc.weight (bf16 32768), fc.bias (1024 +
  // 512), mlp.proj.weight (32768), mlp.proj.bias (256 + 128 rounded to 256). The embedding (wte and
  // wpe, fp32 and bf16: the lookup reads fp32) is now the largest unit, beside two MLPs.
  const double gemm = 4 * (3 * 64 * 64 + 64 * 64 + 2 * 4 * 64 * 64);
  const double mlp_bf16 = 512 + 256 + 32768 + 1024 + 512 + 32768 + 256 + 256;
  const double embedding_bf16 = 6 * (256 * 64 + 64 * 64);
  const MemoryBreakdown z3_bf16 = at(3, Precision::BF16);
  EXPECT_EQ(z3_bf16.parameters, 4 * params / 2 + 2 * gemm / 2 + embedding_bf16 + 2 * mlp_bf16);
  EXPECT_LT(z3_bf16.parameters, 4 * params / 2 + 3 * 4 * mlp + 3 * 260 * 256.0) << "gathering fp32, then a cast";
  // A full recomputation holds a layer's two units through its backward, beside the prefetched two
  // and the one being reduced: counted as a whole layer and the largest others, MLPs; the
  // reductions in flight stay two.
  const MemoryBreakdown z3_full = at(3, Precision::FP32, Recompute::Full);
  EXPECT_EQ(z3_full.parameters, 4 * params / 2 + 4 * (attention + mlp + 2 * mlp));
  EXPECT_EQ(z3_full.gradients, 4 * params / 2 + 4 * (attention + mlp + mlp) + pieces);
}

// The head uses lnf and then its tied embedding, one after the other (the embedding's gradient is
// made in the forward, lnf's in the backward): two units in flight at most there too, the largest
// two here the embedding and an MLP (not lnf beside them). The embedding outweighs a layer:
// vocabulary 4096, wte 262144 elements (its own block), wpe 4096, layers 16768 + 33216, lnf 128
// (512 bytes); dp 2, every piece even. The reductions in flight stay two. ZeRO-3 cuts that
// embedding into 8 vocabulary pieces of 512 rows (32768 elements, the fewest within an MLP's
// 33216): its three largest units gathered at once are then the last piece, which wpe joins, and
// two MLPs.
TEST(MemoryOptions, ZeroCountsTwoUnitsInFlightAtTheHeadToo) {
  ModelShape m = tiny();
  m.vocab_size = 4096;
  const double wte = 4096 * 64, wpe = 64 * 64, mlp = 33216, lnf = 128;
  const double params = wte + wpe + 4 * (16768 + mlp) + lnf;
  Layout l;
  l.dp = 2;
  l.micro_batch = 2;
  const auto at = [&](int zero) {
    Layout z = l;
    z.zero = zero;
    return predict_step(m, fp32_shape(4), z, two_ranks()).memory;
  };
  const auto block = [](double bytes) { return std::ceil(bytes / 256) * 256; };
  const double embedding = 4 * wte + 4 * wpe, pieces = 2 * wte + 2 * wpe + block(2 * mlp);
  const MemoryBreakdown z2 = at(2), z3 = at(3);
  EXPECT_EQ(z2.gradients, 4 * params / 2 + embedding + 4 * mlp + pieces);
  EXPECT_EQ(z3.parameters, 4 * params / 2 + 4 * (wte / 8 + wpe) + 2 * 4 * mlp);
}

// Recomputation with the backward split (zero-bubble): B recomputes what W reads into a set of its
// own, held from B to W only. A slot keeps nothing more for the head (its dlnf is the slot's since
// the forward); the sets are as many as the
// schedule defers W's at once, each per layer the W gradients (4 [N, C] + dqkv [N, 3C]) and what
// the slot dropped that W reads: selective the GELU output, full all but qkv and the probabilities.
TEST(MemoryOptions, RecomputeWithASplitBackwardKeepsTheWInputsOfTheDeferredSlotsOnly) {
  Layout l;
  l.micro_batch = 2;
  l.pp = 2;
  l.schedule = ScheduleKind::ZeroBubbleH1;
  const TrainingShape t = fp32_shape(16);  // 8 micro-batches
  const Cluster c = cluster_preset("dgx-a100");
  const auto at = [&](Recompute r) {
    Layout x = l;
    x.recompute = r;
    return predict_step(tiny(), t, x, c);
  };
  const Prediction none = at(Recompute::None), full = at(Recompute::Full), selective = at(Recompute::Selective);
  const int stage = full.memory.stage;
  ASSERT_EQ(stage, 1);  // the head's stage, 2 layers
  ASSERT_EQ(full.chunk_layers.at(1), 2);
  const LayoutPlan plan(l, layout_dims(tiny(), t.seq_len), 2, t.global_batch);
  const int deferred = peak_deferred_weight(plan.train_schedule()).at(1);
  const int slots = full.memory.in_flight;
  ASSERT_GT(slots, deferred);  // the case where the two differ
  const double grads = 4 * NC + 3 * NC;
  EXPECT_EQ(none.memory.deferred_weight, slots * 2 * grads);
  // full: ln1, atty, res2, ln2 [N, C]; fch, fch_gelu [N, 4C]; 4 statistics [N].
  EXPECT_EQ(full.memory.deferred_weight, deferred * 2 * (grads + 4 * NC + 8 * NC + 4 * 256.0));
  EXPECT_EQ(selective.memory.deferred_weight, deferred * 2 * (grads + kGelu));
}

// ZeRO-2 reduce-scatters every micro-batch's gradients (M = 2 here) and all-gathers the parameters
// after the update as ZeRO-1 does: one reduce-scatter more than ZeRO-1 per step.
TEST(MemoryOptions, ZeroTwoReduceScattersEveryMicroBatch) {
  Layout l;
  l.dp = 2;
  l.micro_batch = 2;
  const Cluster c = two_ranks();
  l.zero = 1;
  const Prediction z1 = predict_step(tiny(), fp32_shape(8), l, c);
  l.zero = 2;
  const Prediction z2 = predict_step(tiny(), fp32_shape(8), l, c);
  ASSERT_EQ(z2.micro_batches, 2);
  EXPECT_NEAR(z2.time.dp_total - z1.time.dp_total, reduce_scatter_s(2, 4 * 220544.0, c.intra), 1e-15);
  EXPECT_EQ(z2.time.zero_gather, 0.0);
}

// ZeRO-3 gathers each unit before its use, two ahead (kPrefetchUnits): a unit's gather is launched
// when the unit two before it begins, after the gathers before it. Forward: the embedding (no
// compute), each layer's attention then MLP, lnf (none), then the head's tied embedding again (the
// tiny vocabulary is one piece). Backward: lnf, then the layers the other way, each its MLP then
// its attention, with twice their compute (the head's GEMMs all ran in its forward; the
// embedding's gradient reads no parameters). An attention computes its GEMMs' share of the layer's
// (by parameters) and the attention core. Two regimes worked by hand:
// - a fast link: every gather hides behind the computing units before it, but those after a unit
//   with none: the embedding's and the first attention's forward, lnf's and the last MLP's backward;
// - a link so slow that each unit waits for its gather: the gathers run back to back, so a pass
//   takes all its gathers and the last unit's compute, and the wait is that less all its compute.
TEST(MemoryOptions, ZeroThreeExposesTheGathersItsPrefetchDoesNotHide) {
  static_assert(kPrefetchUnits == 2);
  const ModelShape m = tiny();
  const TrainingShape t = fp32_shape(8);
  Layout l;
  l.dp = 2;
  l.micro_batch = 2;
  l.zero = 3;
  Cluster c = two_ranks();
  const double rate = c.peak_flops * c.achieved_fraction;
  const ChunkWork layer = chunk_work(m, t, l, 1, false, false);
  const double attention = 16768, mlp = 33216;
  const double af = ((layer.forward_flops - layer.attention_flops) * attention / (attention + mlp) + layer.attention_flops) / rate;
  const double lf = layer.forward_flops / rate;
  const auto predict = [&](const Link& link, double* ge, double* ga, double* gm, double* gn) {
    c.intra = link;
    const auto g = [&](double numel) { return allgather_s(2, 4 * numel, link); };
    *ge = g(20480), *ga = g(attention), *gm = g(mlp), *gn = g(128);
    return predict_step(m, t, l, c);
  };
  double ge, ga, gm, gn;
  const Prediction fast = predict(Link{1e15, 1e-12}, &ge, &ga, &gm, &gn);
  ASSERT_LT(ge, af);  // the case where the prefetch hides them
  EXPECT_NEAR(fast.time.zero_gather, fast.micro_batches * ((ge + ga) + (gn + gm)), 1e-15);
  const Prediction slow = predict(Link{1e4, 1e-6}, &ge, &ga, &gm, &gn);
  ASSERT_GT(gn, 2 * lf);  // the case where every unit waits
  const double forward = 2 * ge + 4 * (ga + gm) + gn - 4 * lf;  // the head's compute last: cancels
  const double backward = gn + 4 * (ga + gm) - 4 * 2 * lf + 2 * af;  // layer 0's attention last
  EXPECT_NEAR(slow.time.zero_gather, slow.micro_batches * (forward + backward), 1e-9);
  // All of it is data-parallel traffic: twice each unit per micro-batch, plus the reduce-scatters.
  EXPECT_NEAR(slow.time.dp_total,
              slow.micro_batches * (2 * (ge + 4 * (ga + gm) + gn) + reduce_scatter_s(2, 4 * 220544.0, c.intra)), 1e-9);
  // A full recomputation begins a layer's attention before its MLP and runs the layer's forward
  // again inside its backward: the same gathers, a third more compute in the backward.
  l.recompute = Recompute::Full;
  const double full_b = 2 * lf + layer.layer_flops / rate;  // the last unit, layer 0's MLP, computes it all
  const double full_backward = gn + 4 * (ga + gm) - 3 * full_b;
  const Prediction full = predict(Link{1e4, 1e-6}, &ge, &ga, &gm, &gn);
  EXPECT_NEAR(full.time.zero_gather, full.micro_batches * (forward + full_backward), 1e-9);
}

TEST(MemoryOptions, SequenceParallelNeedsTensorParallelism) {
  Layout l;
  l.sequence_parallel = true;
  EXPECT_THROW(predict_step(tiny(), fp32_shape(2), l, cluster_preset("cpu-2core")), Error);
}

}  // namespace
}  // namespace mt::perf
