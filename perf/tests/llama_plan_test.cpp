// The performance model of the llama family (models/gpt_config.h): its per-rank widths, parameters
// and memory counted by hand on llama-tiny, what differs from gpt2 (no tied copy of wte, lm_head
// a unit of its own after lnf's, no embedding sync, kv heads replicated where tp does not divide them), and
// plausibility of Llama 3 8B and 70B plans on DGX H100s (docs/PERFORMANCE.md quotes them).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "perf/cost_model.h"
#include "perf/layout_search.h"

namespace mt::perf {
namespace {

// 4 layers, 4 heads (2 kv heads, head size 16), 64 channels, SwiGLU 160 wide, context 64.
ModelShape llama_tiny(int vocab = 256) {
  ModelShape m = gpt_preset("llama-tiny");
  m.vocab_size = vocab;
  return m;
}

LayoutPlan plan_of(const ModelShape& m, int seq_len, const Layout& l) {
  return LayoutPlan(l, layout_dims(m, seq_len), l.world_size(), 8);
}

constexpr double kPerLayer = 2 * 64 + 128 * 64 + 64 * 64 + 320 * 64 + 64 * 160;  // norms, q|kv, o, gate|up, down
constexpr double kParams = 256 * 64 + 4 * kPerLayer + 64 + 256 * 64;             // wte, layers, lnf, lm_head

TEST(LlamaShape, WidthsPerRankSplitOrReplicateTheKvHeads) {
  const ModelShape m = llama_tiny();
  // One rank: q 64 + k 32 + v 32; [gate | up] 320, SwiGLU's output 160; RMSNorm keeps one statistic.
  LayerWidths w = layer_widths(m, 1);
  EXPECT_EQ(w.qkv, 128);
  EXPECT_EQ(w.attention, 64);
  EXPECT_EQ(w.mlp_up, 320);
  EXPECT_EQ(w.mlp_out, 160);
  EXPECT_EQ(w.norm_stats, 1);
  // tp 2 divides the 2 kv heads: all of qkv is split.
  EXPECT_EQ(replicated_kv_rows(m, 2), 0);
  EXPECT_EQ(layer_widths(m, 2).qkv, 64);
  // tp 4 does not: q is split (16), k and v stay whole on every rank (2 x 32).
  EXPECT_EQ(replicated_kv_rows(m, 4), 64);
  w = layer_widths(m, 4);
  EXPECT_EQ(w.qkv, 16 + 64);
  EXPECT_EQ(w.mlp_up, 80);
  EXPECT_EQ(w.mlp_out, 40);
  // gpt2 keeps its own: 3C, 4C twice, LayerNorm's two statistics; never replicated.
  const LayerWidths g = layer_widths(gpt_preset("tiny"), 2);
  EXPECT_EQ(g.qkv, 96);
  EXPECT_EQ(g.mlp_up, 128);
  EXPECT_EQ(g.mlp_out, 128);
  EXPECT_EQ(g.norm_stats, 2);
  EXPECT_EQ(replicated_kv_rows(gpt_preset("tiny"), 4), 0);
}

TEST(LlamaShape, StageParametersHoldAnUntiedHeadAndReplicatedKvHeads) {
  ModelShape gpt = gpt_preset("tiny");
  gpt.vocab_size = 256;
  const ModelShape m = llama_tiny();
  ASSERT_EQ(static_cast<double>(m.parameter_count()), kParams);
  Layout l;
  // Asked first for gpt2 of the same layers, heads, channels and vocabulary: the sizes kept for it
  // must not answer for llama.
  (void)stage_parameters(gpt, plan_of(gpt, 64, l), 0);
  EXPECT_EQ(stage_parameters(m, plan_of(m, 64, l), 0), m.parameter_count());
  // Two stages: wte on the first, lm_head on the last, no tied copy: they add up to the model.
  l.pp = 2;
  const LayoutPlan two = plan_of(m, 64, l);
  EXPECT_EQ(stage_parameters(m, two, 0) + stage_parameters(m, two, 1), m.parameter_count());
  // The last stage's units: its two layers, each its attention (ln1, q, kv, proj) and its MLP (ln2,
  // [gate | up], down), lnf, lm_head (as models/gpt_sharding.cpp's gpt_param_units cut them).
  const std::int64_t attention = 64 + 3 * 64 * 64, mlp = 64 + 3 * 160 * 64;
  ASSERT_EQ(attention + mlp, 43136);
  EXPECT_EQ(stage_parameter_units(m, two, 1), (std::vector<std::int64_t>{attention, mlp, attention, mlp, 64, 256 * 64}));
  EXPECT_EQ(stage_parameter_units(m, two, 0), (std::vector<std::int64_t>{256 * 64, attention, mlp, attention, mlp}));
  // tp 2 splits every matrix; the norms (2 per layer, lnf) are on every rank.
  l.pp = 1;
  l.tp = 2;
  const double norms = 4 * 2 * 64 + 64, kv = 4 * 64 * 64;
  EXPECT_EQ(stage_parameters(m, plan_of(m, 64, l), 0), (kParams - norms) / 2 + norms);
  // tp 4 cannot split the 2 kv heads: every rank holds attn.kv whole.
  l.tp = 4;
  EXPECT_EQ(stage_parameters(m, plan_of(m, 64, l), 0), (kParams - norms - kv) / 4 + norms + kv);
}

TEST(LlamaShape, ReplicatedKvHeadsAreComputedOnEveryRank) {
  const ModelShape m = llama_tiny();
  TrainingShape t;
  t.seq_len = 32;
  Layout l;
  l.micro_batch = 2;  // N = 64
  l.tp = 4;
  // Per token and layer on one of 4 ranks: q 64x16, kv 64x64 whole, o 16x64, SwiGLU 3 x 40 x 64
  // weights, 2 FLOPs each; attention 4 T C / tp.
  const double per_token = 2.0 * (1024 + 4096 + 1024 + 7680) + 4.0 * 32 * 64 / 4;
  const ChunkWork w = chunk_work(m, t, l, 4, false, false);
  EXPECT_EQ(w.layer_flops, 64 * 4 * per_token);
  // Split kv heads (tp 2): exactly the model's layer FLOPs over tp.
  l.tp = 2;
  EXPECT_EQ(chunk_work(m, t, l, 4, false, false).layer_flops, 64 * 4 * m.forward_flops_by_part(32).layer / 2);
}

TEST(LlamaMemory, TinyModelByHand) {
  const ModelShape m = llama_tiny();
  TrainingShape t;
  t.seq_len = 32;
  t.global_batch = 2;
  t.precision = Precision::FP32;
  Layout l;
  l.micro_batch = 2;  // one micro-batch: N = 64 rows
  const Prediction p = predict_step(m, t, l, cluster_preset("cpu-2core"));
  EXPECT_EQ(p.memory.parameters, 4 * kParams);
  EXPECT_EQ(p.memory.gradients, 4 * kParams);
  // One slot: residuals 5 x [64, 64]; per layer ln1, res2, ln2 [64, 64], qkv [64, 128], atty [64, 64],
  // [gate | up] [64, 320], SwiGLU's output [64, 160], 2 x [64] RMSNorm statistics, attention
  // [2, 4, 32, 32]; the int32 tokens [64]; head dlnf [64, 64] + 1 x [64] statistic + 3 x [64] and the
  // targets; dres [64, 64]. No wpe anywhere.
  const double NC = 64 * 64 * 4.0, row = 64 * 4.0, probs = 2 * 4 * 32 * 32 * 4.0;
  const double per_layer = 3 * NC + 2 * NC + NC + 5 * NC + 2.5 * NC + 2 * row + probs;
  EXPECT_EQ(p.memory.activations, 5 * NC + 4 * per_layer + row + NC + 4 * row + NC);
  // Scratch: branch, dln, datty, dqkv [64, 128], d[gate | up] [64, 320], dSwiGLU [64, 160]; the
  // step's token ids (inputs and targets, [2, 64] int32).
  EXPECT_EQ(p.memory.workspace, (2 + 1 + 2 + 5 + 2.5) * NC + 2 * row);
  EXPECT_EQ(p.memory.logits, 64 * 256 * 4.0);
  // Selective recomputation drops the probabilities and SwiGLU's output [N, F/tp], and rebuilds them.
  l.recompute = Recompute::Selective;
  EXPECT_EQ(layer_bytes(m, t, l), per_layer - probs - 2.5 * NC);
  EXPECT_EQ(recompute_scratch_bytes(m, t, l), probs + 2.5 * NC);
}

TEST(LlamaCost, NoEmbeddingSyncBetweenStages) {
  // gpt2's tied wte is summed between the first and last stage; llama's head is its own.
  TrainingShape t;
  t.seq_len = 32;
  t.global_batch = 8;
  Layout l;
  l.pp = 2;
  ModelShape gpt = gpt_preset("tiny");
  gpt.vocab_size = 256;
  const Cluster c = cluster_preset("dgx-a100");
  EXPECT_GT(predict_step(gpt, t, l, c).time.embedding_sync, 0.0);
  EXPECT_EQ(predict_step(llama_tiny(), t, l, c).time.embedding_sync, 0.0);
  // ZeRO-3 over 2 stages: the head stage gathers its layers, lnf and lm_head, no tied wte.
  l.dp = 2;
  l.zero = 3;
  const Prediction p = predict_step(llama_tiny(), t, l, c);
  EXPECT_GT(p.time.zero_gather, 0.0);
  EXPECT_GT(p.step_s, 0.0);
}

// Llama 3 8B on one DGX H100, bf16, sequence 8192, global batch 16: every memory option searched.
class Llama3On8H100s : public ::testing::Test {
 protected:
  ModelShape m = gpt_preset("llama3-8b");
  TrainingShape t;
  Cluster c = cluster_preset("dgx-h100");
  SearchResult r;
  Llama3On8H100s() {
    t.seq_len = 8192;
    t.global_batch = 16;
    t.precision = Precision::BF16;
    SearchOptions o;
    o.memory_options = true;
    r = search_layouts(m, t, c, o);
  }
};

// The model predicts an ideal step (docs/PERFORMANCE.md compares it with torchtitan's measured figures).
TEST_F(Llama3On8H100s, FitsAtPlausibleRates) {
  ASSERT_FALSE(r.plans.empty());
  const Prediction& best = r.plans.front();
  EXPECT_TRUE(best.fits);
  EXPECT_GT(best.mfu, 0.2);
  EXPECT_LT(best.mfu, 0.7);
  const double per_gpu = best.tokens_per_s / 8;
  EXPECT_GT(per_gpu, 3000);
  EXPECT_LT(per_gpu, 15000);
  // FSDP-like: ZeRO-3 over the 8 GPUs, full recomputation.
  Layout fsdp;
  fsdp.dp = 8;
  fsdp.zero = 3;
  fsdp.recompute = Recompute::Full;
  const Prediction p = predict_step(m, t, fsdp, c);
  EXPECT_TRUE(p.fits);
  EXPECT_GT(p.mfu, 0.2);
  EXPECT_LT(p.mfu, best.mfu);
}

// No ZeRO stage is skipped for a lower one that fits: a higher stage can be the faster (ZeRO-3's
// gathers hide under compute, ZeRO-1/2's after the update do not; in bf16 ZeRO-2 and 3 gather half of
// ZeRO-1's bytes). For every listed layout, each other stage of it that fits is listed too, or is
// beaten by one listed with less recomputation at that stage. Llama 3 8B on one DGX H100 is a case
// where ZeRO-2 beats ZeRO-1 and ZeRO-3 beats ZeRO-2 on the same structure.
TEST_F(Llama3On8H100s, MemoryOptionsPredictEveryZeroStage) {
  ASSERT_FALSE(r.plans.empty());
  std::map<std::string, double> listed;  // describe(layout) -> step s
  for (const Prediction& p : r.plans) listed[describe(p.layout)] = p.step_s;
  int higher_stage_faster = 0;
  for (const Prediction& p : r.plans) {
    const Layout& l = p.layout;
    for (int zero = 0; zero <= 3; ++zero) {
      if (zero == l.zero || (zero > 0 && l.dp * l.cp == 1)) continue;
      Layout other = l;
      other.zero = zero;
      const Prediction q = predict_step(m, t, other, c);
      if (!q.fits) continue;
      bool found = listed.count(describe(other)) > 0;
      for (Recompute less : {Recompute::None, Recompute::Selective}) {
        Layout cheaper = other;
        cheaper.recompute = less;
        if (less < l.recompute && listed.count(describe(cheaper)) > 0) found = true;
      }
      EXPECT_TRUE(found) << describe(other) << " fits (" << q.step_s << " s) but is not listed beside " << describe(l)
                         << " (" << p.step_s << " s)";
      if (zero > l.zero && q.step_s < p.step_s) ++higher_stage_faster;
    }
  }
  EXPECT_GT(higher_stage_faster, 0) << "no case where a higher ZeRO stage is the faster: the test no longer tests it";
}

TEST(LlamaPlans, Llama3_70BOn32DgxH100sFitsWithTpInsideANode) {
  const ModelShape m = gpt_preset("llama3-70b");
  TrainingShape t;
  t.seq_len = 8192;
  t.global_batch = 128;
  t.precision = Precision::BF16;
  Cluster c = cluster_preset("dgx-h100");
  c.nodes = 32;
  SearchOptions o;
  o.memory_options = true;
  const SearchResult r = search_layouts(m, t, c, o);
  ASSERT_FALSE(r.plans.empty());
  const Prediction& best = r.plans.front();
  EXPECT_TRUE(best.fits);
  EXPECT_LE(best.layout.tp, 8);
  EXPECT_GT(best.mfu, 0.2);
  EXPECT_LT(best.mfu, 0.7);
  const double per_gpu = best.tokens_per_s / 256;
  EXPECT_GT(per_gpu, 300);
  EXPECT_LT(per_gpu, 2000);
}

}  // namespace
}  // namespace mt::perf

namespace mt::perf {
namespace {

// Llama 3 8B at a 128K context on 8 DGX H100s (64 GPUs), bf16, every memory option: the fastest
// layout splits each sequence over cp ranks (meshtrain plan prints why: docs/PERFORMANCE.md).
TEST(LlamaPlans, Llama3_8BAt128KOn64H100sSplitsTheSequence) {
  ModelShape m = gpt_preset("llama3-8b");
  m.max_seq_len = 131072;
  TrainingShape t;
  t.seq_len = 131072;
  t.global_batch = 8;
  t.precision = Precision::BF16;
  Cluster c = cluster_preset("dgx-h100");
  c.nodes = 8;
  SearchOptions o;
  o.memory_options = true;
  const SearchResult r = search_layouts(m, t, c, o);
  ASSERT_FALSE(r.plans.empty());
  const Prediction& best = r.plans.front();
  EXPECT_GT(best.layout.cp, 1) << describe(best);
  EXPECT_TRUE(best.fits);
  EXPECT_EQ(best.layout.world_size(), 64);
  EXPECT_LE(best.layout.tp, 8);
  EXPECT_GT(best.mfu, 0.2);
  EXPECT_LT(best.mfu, 0.8);
  // Without cp a layout fits only by paying for it (or none fits).
  const auto without = std::find_if(r.plans.begin(), r.plans.end(), [](const Prediction& p) { return p.layout.cp == 1; });
  if (without != r.plans.end()) {
    EXPECT_GT(without->step_s, best.step_s);
  }
}

}  // namespace
}  // namespace mt::perf
