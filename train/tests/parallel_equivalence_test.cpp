// The heart of meshtrain's correctness: one set of training options gives the same model on every
// layout. Each rank first trains the reference in-process (the single-rank Trainer, no
// communication), then the world trains the same steps as dp x tp x pp layouts whose product is the
// world size, with ZeRO 0 and 1, with and without gradient accumulation, and compares:
//   - per-step losses and gradient norms within 1e-5 relative of the reference;
//   - final parameters (gathered from the shards) within 1e-5 in relative norm per tensor,
//     |p - ref| / |ref|, after 5 AdamW steps in fp32 (but for the key bias, see check_layout);
//   - every rank's own shard equal to the gathered model: the replicas (data-parallel copies,
//     layernorms and row-parallel biases on every tp rank, the tied embedding on first and last
//     stage) have not drifted apart.
// Why 1e-5 and not bitwise: the layouts add the same numbers in other orders (partial sums over tp
// ranks, gradients summed over dp ranks and micro-batches, the norm over ranks), a few ulps per
// step (fp32 epsilon 1.2e-7); five Adam steps at lr 3e-3 keep that near 1e-6. A wrong gradient
// (a missing 1/dp, a head's copy not summed, a shard mapped wrong) is off by far more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "data/loader.h"
#include "models/gpt.h"
#include "parallel/groups.h"
#include "tests/test_env.h"
#include "train/parallel_trainer.h"
#include "train/tests/tiny_corpus.h"
#include "train/tests/trainer.h"
#include "zero/flat_zero_engine.h"
#include "zero/unit_zero_engine.h"

namespace mt {
namespace {

using testing::corpus;
using testing::test_context;
using testing::test_world;

constexpr int kSteps = 5;
constexpr std::uint64_t kSeed = 1234;
constexpr int kGlobalBatch = 8;
constexpr double kLossTolerance = 1e-5;
constexpr double kParamTolerance = 1e-5;
// bf16 compute against the fp32 reference: the activations and GEMM operands rounded to 8 bits of
// mantissa. One rank measured (gpt2, llama): losses within 1.0e-4 relative, gradient norms 2.2e-3,
// parameters after five AdamW steps 4.2e-2 (AdamW's normalized steps turn rounding into steps of
// about lr).
constexpr double kBf16LossTolerance = 5e-4;
constexpr double kBf16NormTolerance = 1e-2;
constexpr double kBf16ParamTolerance = 6e-2;

// gpt2: 4 layers, 4 heads, 64 channels. llama: the same with 2 kv heads (tp 2 splits them, tp 4
// replicates them) and a SwiGLU of 160.
// vocab: 2048 makes the token embedding 2.6x a layer, which ZeRO-3 cuts into vocabulary pieces.
GptConfig tiny_config(ModelFamily family = ModelFamily::Gpt2, int vocab = 256) {
  GptConfig c = gpt_preset(family == ModelFamily::Llama ? "llama-tiny" : "tiny");
  c.vocab_size = vocab;
  c.max_seq_len = 32;
  return c;
}

TrainSettings settings() {
  TrainSettings s;
  s.seq_len = 32;
  s.steps = kSteps;
  s.schedule.kind = LrScheduleKind::Cosine;
  s.schedule.max_lr = 3e-3f;
  s.schedule.warmup_steps = 2;
  s.schedule.total_steps = kSteps;
  s.eval_batches = 2;
  return s;
}

struct Reference {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // before clipping
  double val_loss = 0;
  std::vector<float> params;  // gpt_parameter_specs order (the single-rank store's order)
};

// The single-rank Trainer's run; the same on every rank, so each rank makes its own.
const Reference& reference(int micro_batch, ModelFamily family = ModelFamily::Gpt2, int vocab = 256) {
  static std::map<std::tuple<int, ModelFamily, int>, Reference> cache;
  auto it = cache.find({micro_batch, family, vocab});
  if (it != cache.end()) return it->second;
  DeviceContext& ctx = test_context();
  Gpt model(ctx, tiny_config(family, vocab));
  model.init(kSeed);
  const TrainSettings s = settings();
  data::DataLoader train = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
  data::DataLoader val = data::DataLoader::for_split(corpus().path(), "val", s.seq_len, kSeed, 256);
  Trainer trainer(ctx, model, train, &val, s, kGlobalBatch, micro_batch);
  Reference r;
  for (int i = 0; i < kSteps; ++i) {
    StepRecord rec = trainer.step();
    r.losses.push_back(rec.loss);
    r.grad_norms.push_back(rec.grad_norm);
    if (rec.val_loss) r.val_loss = *rec.val_loss;
  }
  r.params = model.parameters().flat_params().to_host<float>();
  return cache.emplace(std::make_tuple(micro_batch, family, vocab), std::move(r)).first->second;
}

struct Layout {
  int dp, tp, pp;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int virtual_stages = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::None;
  int cp = 1;
  int world_size() const { return dp * tp * pp * cp; }
  MeshShape mesh() const { return {dp, tp, pp, cp}; }
  std::string name() const {
    return "dp" + std::to_string(dp) + " tp" + std::to_string(tp) + (cp > 1 ? " cp" + std::to_string(cp) : "") +
           " pp" + std::to_string(pp) + " " +
           schedule_kind_name(schedule) + (virtual_stages > 1 ? " v" + std::to_string(virtual_stages) : "") +
           (sequence_parallel ? " sp" : "") +
           (recompute != Recompute::None ? std::string(" recompute ") + recompute_name(recompute) : "");
  }
};

// `layout` as the trainer gets it, with buckets of 0.05 MiB: several even for the tiny model
// (about 200K parameters).
LayoutPlan plan_of(const Layout& layout, int zero, bool overlap, int micro_batch,
                   const GptConfig& config = tiny_config()) {
  LayoutRequest request;
  request.dp = layout.dp;
  request.tp = layout.tp;
  request.pp = layout.pp;
  request.cp = layout.cp;
  request.schedule = layout.schedule;
  request.virtual_stages = layout.virtual_stages;
  request.sequence_parallel = layout.sequence_parallel;
  request.recompute = layout.recompute;
  request.zero = zero;
  request.micro_batch = micro_batch;
  request.bucket_mb = 0.05;
  request.overlap = overlap;
  return LayoutPlan(request, layout_dims(config, settings().seq_len), request.world_size(), kGlobalBatch);
}

// Trains `layout` and checks it against the reference; returns the worst relative parameter error.
// bf16 compute (`compute`) is held to the bf16 tolerances against the fp32 reference.
double check_layout(const Layout& layout, int zero, int micro_batch, ModelFamily family = ModelFamily::Gpt2,
                    int vocab = 256, double param_tolerance = kParamTolerance, DType compute = DType::F32) {
  const bool bf16 = compute == DType::BF16;
  const double loss_tolerance = bf16 ? kBf16LossTolerance : kLossTolerance;
  const double norm_tolerance = bf16 ? kBf16NormTolerance : kLossTolerance;
  if (bf16) param_tolerance = kBf16ParamTolerance;
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const GptConfig config = tiny_config(family, vocab);
  const std::string what = std::string(model_family_name(family)) + " " + layout.name() + " zero " +
                           std::to_string(zero) + " micro-batch " + std::to_string(micro_batch) +
                           (vocab != 256 ? " vocab " + std::to_string(vocab) : "") +
                           (compute != DType::F32 ? std::string(" ") + dtype_name(compute) : "");
  SCOPED_TRACE(what);
  const Reference& ref = reference(micro_batch, family, vocab);
  ParallelGroups groups = build_groups(world, Mesh(layout.mesh()));
  const TrainSettings s = settings();
  const LayoutPlan plan = plan_of(layout, zero, /*overlap=*/true, micro_batch, config);
  data::DataLoader train = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
  data::DataLoader val = data::DataLoader::for_split(corpus().path(), "val", s.seq_len, kSeed, 256);
  ParallelTrainer trainer(ctx, world, groups, config, compute, train, &val, s, plan);
  trainer.init(kSeed);
  double val_loss = 0;
  double worst_loss = 0;
  for (int i = 0; i < kSteps; ++i) {
    const StepRecord rec = trainer.step();
    const double ref_loss = ref.losses[static_cast<std::size_t>(i)];
    EXPECT_NEAR(rec.loss, ref_loss, loss_tolerance * ref_loss) << "step " << i + 1;
    worst_loss = std::max(worst_loss, std::abs(rec.loss - ref_loss) / ref_loss);
    // The global norm counts every parameter once: replicas (tp-replicated layernorms and biases,
    // the tied embedding's second copy, dp copies) are left out of all but one rank's sum.
    const double norm = ref.grad_norms[static_cast<std::size_t>(i)];
    EXPECT_NEAR(rec.grad_norm, norm, norm_tolerance * norm) << "gradient norm, step " << i + 1;
    if (rec.val_loss) val_loss = *rec.val_loss;
  }
  EXPECT_NEAR(val_loss, ref.val_loss, loss_tolerance * ref.val_loss) << "validation loss";

  const std::vector<float> full = trainer.gather_parameters();
  EXPECT_EQ(full.size(), ref.params.size());
  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  double worst = 0;
  std::int64_t at = 0;
  for (const ParamSpec& spec : specs) {
    // The key block of attn.qkv.bias has a zero gradient in exact arithmetic (a constant added to
    // every key of a query's row cancels in the softmax), so what it gets is rounding noise, which
    // AdamW turns into steps of about +-lr whatever the noise's size: that block differs between
    // layouts by up to 2 lr per step and is checked against that bound; the q and v blocks are
    // held to the tolerance like every other tensor.
    const bool qkv_bias = spec.kind == ParamKind::QkvBias;
    const std::int64_t C = config.channels;
    double diff = 0, norm = 0, key_block = 0;
    for (std::int64_t i = 0; i < spec.numel(); ++i) {
      const double r = ref.params[static_cast<std::size_t>(at + i)];
      const double d = static_cast<double>(full[static_cast<std::size_t>(at + i)]) - r;
      if (qkv_bias && i >= C && i < 2 * C) {
        key_block = std::max(key_block, std::abs(d));
        continue;
      }
      diff += d * d;
      norm += r * r;
    }
    const double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    EXPECT_LE(rel, param_tolerance) << spec.name;
    if (qkv_bias) {
      EXPECT_LE(key_block, 2.0 * kSteps * s.schedule.max_lr) << spec.name << " key block";
    }
    worst = std::max(worst, rel);
    at += spec.numel();
  }
  // This rank's shard, replicas included, is exactly the gathered model's.
  const ParameterStore& store = trainer.model().parameters();
  const std::vector<float> mine = trainer.local_parameters();
  const std::vector<std::int64_t> offsets = spec_offsets(specs);
  std::map<std::string, std::int64_t> full_offset;
  for (std::size_t i = 0; i < specs.size(); ++i) full_offset[specs[i].name] = offsets[i];
  for (std::size_t i = 0; i < store.size(); ++i) {
    const ParamShard& shard = trainer.model().shards()[i];
    const float* p = mine.data() + store.offset(i);
    std::int64_t mismatches = 0;
    for (const auto& [begin, count] : shard.full_runs()) {
      mismatches += std::memcmp(p, full.data() + full_offset[shard.full.name] + begin,
                                static_cast<std::size_t>(count) * sizeof(float)) != 0;
      p += count;
    }
    EXPECT_EQ(mismatches, 0) << "rank " << world.rank() << "'s copy of " << shard.full.name << " drifted";
  }
  if (world.rank() == 0)
    std::printf("[ equivalence ] %-34s worst parameter error %.2e, loss error %.2e\n", what.c_str(), worst, worst_loss);
  return worst;
}

std::vector<Layout> layouts_for(int world_size) {
  constexpr ScheduleKind ZBH1 = ScheduleKind::ZeroBubbleH1, ZBV = ScheduleKind::ZeroBubbleV;
  switch (world_size) {
    // Interleaved and zb-v on one stage send to themselves; zb-v's V turns there too.
    case 1: return {{1, 1, 1}, {1, 1, 1, ScheduleKind::Interleaved, 2}, {1, 1, 1, ZBV, 2}};
    case 2:
      return {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {1, 1, 2, ScheduleKind::GPipe}, {1, 1, 2, ScheduleKind::Interleaved, 2},
              {1, 1, 2, ZBH1}, {1, 1, 2, ZBV, 2}};
    case 4:
      return {{1, 1, 4}, {1, 1, 4, ScheduleKind::GPipe}, {2, 2, 1}, {1, 2, 2}, {2, 1, 2, ScheduleKind::Interleaved, 2},
              {1, 1, 4, ZBH1}, {1, 2, 2, ZBV, 2}};
    // dp 4 x pp 2: the tied embedding's two copies see gradients summed in different orders.
    case 8: return {{2, 2, 2}, {2, 2, 2, ScheduleKind::GPipe}, {4, 1, 2, ScheduleKind::GPipe}, {2, 2, 2, ZBV, 2}};
    default: return {};
  }
}

TEST(ParallelEquivalence, EveryLayoutTrainsTheSameModel) {
  const int n = test_world().size();
  const std::vector<Layout> layouts = layouts_for(n);
  if (layouts.empty()) GTEST_SKIP() << "no layouts listed for " << n << " ranks";
  for (const Layout& layout : layouts) {
    for (int zero : {0, 1}) {
      // Accumulation: micro-batches of 2 (several per dp rank); none: one micro-batch per dp rank,
      // which 1F1B allows only without a pipeline (it needs at least pp micro-batches).
      check_layout(layout, zero, 2);
      const int whole = 8 / layout.dp;
      if (whole != 2 && (layout.pp == 1 || layout.schedule == ScheduleKind::GPipe)) check_layout(layout, zero, whole);
    }
  }
}

// Sequence parallelism splits the residual stream's rows over the tp ranks and sums the
// layernorms' gradients over them: the same model within the same tolerance, on every layout kind
// with tp (pure tp, with dp, with a pipeline, interleaved, all three, tp 4).
TEST(ParallelEquivalence, SequenceParallelTrainsTheSameModel) {
  const int n = test_world().size();
  std::vector<Layout> layouts;
  if (n == 2) layouts = {{1, 2, 1}};
  if (n == 4)
    layouts = {{2, 2, 1}, {1, 2, 2}, {1, 2, 2, ScheduleKind::Interleaved, 2}, {1, 4, 1},
               {1, 2, 2, ScheduleKind::ZeroBubbleV, 2}};
  if (n == 8) layouts = {{2, 2, 2}, {1, 4, 2, ScheduleKind::GPipe}};
  if (layouts.empty()) GTEST_SKIP() << "no sequence-parallel layouts for " << n << " ranks";
  for (Layout layout : layouts) {
    layout.sequence_parallel = true;
    for (int zero : {0, 1}) check_layout(layout, zero, 2);
  }
  // With full recomputation the rerun forward makes the sequence-parallel collectives again; with
  // ZeRO-3 it runs inside the layer's backward use, while its parameters are gathered.
  Layout recomputed = layouts.front();
  recomputed.sequence_parallel = true;
  recomputed.recompute = Recompute::Full;
  for (int zero : {1, 3}) check_layout(recomputed, zero, 2);
}

// ZeRO-2 and 3 (per-unit reduce-scatter, per-unit gathers with prefetch) train the single rank's
// model within the same tolerances: dp alone, with tp, with pp (the tied embedding's two copies
// reduce into identically cut shards), with accumulation and without.
TEST(ParallelEquivalence, ZeroTwoAndThreeTrainTheSameModel) {
  const int n = test_world().size();
  std::vector<Layout> layouts;
  switch (n) {
    case 1: layouts = {{1, 1, 1}}; break;
    case 2: layouts = {{2, 1, 1}}; break;
    case 4: layouts = {{4, 1, 1}, {2, 2, 1}, {2, 1, 2}, {2, 1, 2, ScheduleKind::Interleaved, 2}, {2, 1, 2, ScheduleKind::ZeroBubbleV, 2}}; break;
    case 8: layouts = {{2, 2, 2}}; break;
    default: GTEST_SKIP() << "no layouts listed for " << n << " ranks";
  }
  for (const Layout& layout : layouts) {
    for (int zero : {2, 3}) {
      check_layout(layout, zero, 2);
      if (layout.pp == 1 && 8 / layout.dp != 2) check_layout(layout, zero, 8 / layout.dp);
    }
  }
}

// ZeRO-3 with a token embedding larger than a layer: cut into vocabulary pieces (4 at tp 1 and 2,
// models/gpt_sharding.h), each gathered, reduced and updated as a unit of its own, the tied copies'
// pieces summed between the first and last stage; llama's untied lm_head too. The parameters are
// held to 5e-5 here, not 1e-5: with 2048 rows, most never a target, AdamW turns the rounding of any
// change in GEMM order into visible steps (measured: tp 2 at ZeRO-1, with no pieces, 1.8e-5 on
// mlp.proj and ln2.bias; ZeRO-3 with pieces 1.9e-5). Losses and norms keep 1e-5.
TEST(ParallelEquivalence, ZeroThreeWithVocabularyPiecesTrainsTheSameModel) {
  const int n = test_world().size();
  ASSERT_EQ(gpt_vocab_pieces(tiny_config(ModelFamily::Gpt2, 2048), 1, 3), 4);
  ASSERT_EQ(gpt_vocab_pieces(tiny_config(ModelFamily::Gpt2, 2048), 2, 3), 4);
  std::vector<Layout> layouts;
  switch (n) {
    case 1: layouts = {{1, 1, 1}}; break;
    case 2: layouts = {{2, 1, 1}}; break;
    case 4: layouts = {{2, 2, 1}, {2, 1, 2}}; break;
    case 8: layouts = {{2, 2, 2}}; break;
    default: GTEST_SKIP() << "no layouts listed for " << n << " ranks";
  }
  for (const Layout& layout : layouts) check_layout(layout, 3, 2, ModelFamily::Gpt2, 2048, 5e-5);
  check_layout(layouts.back(), 3, 2, ModelFamily::Llama, 2048, 5e-5);
}

// llama (RMSNorm, RoPE, grouped-query attention, SwiGLU, an untied head) trains the single rank's
// model on every layout kind: dp, tp splitting its 2 kv heads (tp 2) and replicating them (tp 4:
// each rank's kv gradient is a partial sum over its q heads, summed over the group), pp with the
// untied head on the last stage (no embedding sum between stages), interleaved and zero-bubble
// schedules, sequence parallelism, recomputation and ZeRO 0-3.
TEST(ParallelEquivalence, LlamaTrainsTheSameModelOnEveryLayoutKind) {
  const int n = test_world().size();
  constexpr ScheduleKind I = ScheduleKind::Interleaved, ZBV = ScheduleKind::ZeroBubbleV;
  struct Case {
    Layout layout;
    int zero;
  };
  std::vector<Case> cases;
  Layout recomputed{1, 1, 1};
  recomputed.recompute = Recompute::Full;
  Layout sp2{1, 2, 1}, sp4{1, 4, 1}, sp222{2, 2, 2};
  sp2.sequence_parallel = sp4.sequence_parallel = sp222.sequence_parallel = true;
  Layout selective{1, 2, 2};
  selective.recompute = Recompute::Selective;
  switch (n) {
    case 1: cases = {{{1, 1, 1}, 0}, {{1, 1, 1, I, 2}, 1}, {recomputed, 0}, {{1, 1, 1}, 3}}; break;
    case 2: cases = {{{2, 1, 1}, 1}, {{1, 2, 1}, 0}, {{1, 1, 2}, 1}, {{1, 1, 2, ZBV, 2}, 0}, {sp2, 1}, {{2, 1, 1}, 3}}; break;
    case 4:
      cases = {{{1, 4, 1}, 0}, {{2, 2, 1}, 2}, {{1, 2, 2, I, 2}, 1}, {sp4, 1}, {selective, 0}, {{2, 1, 2}, 3}};
      break;
    case 8: cases = {{{2, 2, 2}, 1}, {sp222, 3}, {{1, 4, 2, ZBV, 2}, 0}}; break;
    default: GTEST_SKIP() << "no layouts listed for " << n << " ranks";
  }
  for (const Case& c : cases) check_layout(c.layout, c.zero, 2, ModelFamily::Llama);
}

// Context parallelism: each sequence cut into 2 x cp chunks, rank r holding chunks r and 2cp-1-r
// (their global positions into wpe and RoPE), attention as ring attention over the cp group, each
// head's loss the mean over its rows and the gradients summed over dp x cp. The single rank's model
// within the same tolerances on both families: cp alone, with dp, with tp and sequence parallelism,
// with a zero-bubble pipeline, with ZeRO-3 and full recomputation (the ring runs again inside the
// layer's backward use), with selective recomputation (ring attention keeps its log-sum-exp).
TEST(ParallelEquivalence, ContextParallelTrainsTheSameModel) {
  const int n = test_world().size();
  constexpr ScheduleKind ZBH1 = ScheduleKind::ZeroBubbleH1;
  struct Case {
    Layout layout;
    int zero = 0;
  };
  const auto with_cp = [](Layout l, int cp) {
    l.cp = cp;
    return l;
  };
  Layout sp{1, 2, 1}, full{1, 1, 1}, selective{1, 1, 1}, sp_pp{1, 2, 2};
  sp.sequence_parallel = sp_pp.sequence_parallel = true;
  full.recompute = Recompute::Full;
  selective.recompute = Recompute::Selective;
  std::vector<Case> cases;
  switch (n) {
    case 2: cases = {{with_cp({1, 1, 1}, 2), 0}, {with_cp({1, 1, 1}, 2), 1}, {with_cp(full, 2), 3},
                     {with_cp(selective, 2), 2}}; break;
    case 4:
      cases = {{with_cp({1, 1, 1}, 4), 1}, {with_cp({2, 1, 1}, 2), 1}, {with_cp(sp, 2), 0}, {with_cp({1, 2, 1}, 2), 2},
               {with_cp({1, 1, 2, ZBH1}, 2), 0}, {with_cp({1, 1, 2, ScheduleKind::ZeroBubbleV, 2}, 2), 1},
               {with_cp({1, 1, 2, ScheduleKind::Interleaved, 2}, 2), 0}, {with_cp({1, 1, 2, ScheduleKind::GPipe}, 2), 3},
               {with_cp({2, 1, 1}, 2), 3}};
      break;
    case 8:
      cases = {{with_cp({2, 1, 2}, 2), 1}, {with_cp(sp_pp, 2), 3}, {with_cp({1, 1, 1}, 8), 0}};
      break;
    default: GTEST_SKIP() << "context parallelism runs on 2, 4 and 8 ranks";
  }
  for (const ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama})
    for (const Case& c : cases) check_layout(c.layout, c.zero, 2, family);
  // bf16: ring attention on bf16 qkv (fp32 accumulators and log-sum-exps), held to what bf16 costs
  // one rank (Bf16TrainsTheFp32ModelWithinItsRounding).
  if (n == 2)
    for (const ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama})
      check_layout(with_cp({1, 1, 1}, 2), 1, 2, family, 256, kParamTolerance, DType::BF16);
}

// The bf16 noise floor the cp case is held to: one rank in bf16 against the fp32 reference.
TEST(ParallelEquivalence, Bf16TrainsTheFp32ModelWithinItsRounding) {
  if (test_world().size() != 1) GTEST_SKIP() << "one rank";
  for (const ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama})
    check_layout({1, 1, 1}, 1, 2, family, 256, kParamTolerance, DType::BF16);
}

// ZeRO 1-3 in bf16 gather the GEMM weights' copy from owned bf16 shards AdamW writes (ZeRO-1/2
// after the step, 3 at each use), and gather_parameters brings their fp32 master: held to what bf16
// costs one rank. Two ranks only: the asan run takes the 4-rank instance, where bf16 is slow (over
// two stages, with the tied embedding's two copies, zero_checkpoint_cli_test trains ZeRO-2 in bf16).
TEST(ParallelEquivalence, ZeroInBf16TrainsTheFp32ModelWithinItsRounding) {
  if (test_world().size() != 2) GTEST_SKIP() << "2 ranks";
  for (const ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama})
    for (const int zero : {1, 2, 3}) check_layout({2, 1, 1}, zero, 2, family, 256, kParamTolerance, DType::BF16);
}

// Trains `layout` for kSteps steps: every step's loss and norm, then the gathered parameters.
std::vector<double> train_bits(const Layout& layout, int micro_batch, int zero = 1) {
  Communicator& world = test_world();
  ParallelGroups groups = build_groups(world, Mesh(layout.mesh()));
  const TrainSettings s = settings();
  const LayoutPlan plan = plan_of(layout, zero, /*overlap=*/true, micro_batch);
  data::DataLoader train = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
  ParallelTrainer trainer(test_context(), world, groups, tiny_config(), DType::F32, train, nullptr, s, plan);
  trainer.init(kSeed);
  std::vector<double> bits;
  for (int i = 0; i < kSteps; ++i) {
    const StepRecord rec = trainer.step();
    bits.push_back(rec.loss);
    bits.push_back(rec.grad_norm);
  }
  for (float p : trainer.gather_parameters()) bits.push_back(p);
  return bits;
}

// ZB-H1 runs each chunk's B and W in micro-batch order, as 1F1B runs its fused backwards, and B then
// W adds exactly the fused backward's bits: on the same layout the two schedules train the same
// bits (not merely within a tolerance).
TEST(ParallelEquivalence, ZeroBubbleH1TrainsTheBitsOfOneFOneB) {
  const int n = test_world().size();
  std::vector<Layout> layouts{{1, 1, std::min(n, 4)}};
  if (n >= 4) layouts.push_back({n / 2, 1, 2});  // with data parallelism
  for (Layout layout : layouts) {
    if (layout.world_size() != n) continue;
    const std::vector<double> one_f_one_b = train_bits(layout, 1);
    layout.schedule = ScheduleKind::ZeroBubbleH1;
    SCOPED_TRACE(layout.name());
    const std::vector<double> zero_bubble = train_bits(layout, 1);
    ASSERT_EQ(one_f_one_b.size(), zero_bubble.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < one_f_one_b.size(); ++i) differ += one_f_one_b[i] != zero_bubble[i];
    EXPECT_EQ(differ, 0u) << "of " << one_f_one_b.size() << " losses, norms and parameters";
  }
}

// With sequence parallelism B makes the fused backward's collectives and W sums the layernorms'
// gradients over tp as the fused backward does: zb-h1 trains the bits of 1f1b, tp 2 x pp 2.
TEST(ParallelEquivalence, ZeroBubbleH1WithSequenceParallelismTrainsTheBitsOfOneFOneB) {
  if (test_world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  Layout layout{1, 2, 2};
  layout.sequence_parallel = true;
  const std::vector<double> one_f_one_b = train_bits(layout, 1);
  layout.schedule = ScheduleKind::ZeroBubbleH1;
  const std::vector<double> zero_bubble = train_bits(layout, 1);
  ASSERT_EQ(one_f_one_b.size(), zero_bubble.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < one_f_one_b.size(); ++i) differ += one_f_one_b[i] != zero_bubble[i];
  EXPECT_EQ(differ, 0u) << "of " << one_f_one_b.size() << " losses, norms and parameters";
}

// Recomputation runs the forward's kernels again on the same inputs: training with --recompute
// selective or full gives the bits of training without, with the fused backward and with B and W
// split (ZB-H1), on one rank and on dp 2 x tp 2 x pp 2; and under ZeRO-3 on dp 2 x pp 2, where a
// full recomputation holds a layer's two units through its backward (its attention's use spans the
// MLP's) and the other ways use them one after the other.
TEST(ParallelEquivalence, RecomputationTrainsTheBitsOfKeepingTheActivations) {
  const int n = test_world().size();
  std::vector<Layout> layouts;
  int zero = 1;
  if (n == 1) layouts = {{1, 1, 1}, {1, 1, 1, ScheduleKind::ZeroBubbleV, 2}};
  if (n == 4) layouts = {{2, 1, 2}, {2, 1, 2, ScheduleKind::ZeroBubbleH1}}, zero = 3;
  if (n == 8) layouts = {{2, 2, 2}, {2, 2, 2, ScheduleKind::ZeroBubbleH1}};
  if (layouts.empty()) GTEST_SKIP() << "runs on 1, 4 and 8 ranks";
  for (Layout layout : layouts) {
    const std::vector<double> kept = train_bits(layout, 2, zero);
    for (Recompute recompute : {Recompute::Selective, Recompute::Full}) {
      layout.recompute = recompute;
      SCOPED_TRACE(layout.name());
      const std::vector<double> recomputed = train_bits(layout, 2, zero);
      ASSERT_EQ(kept.size(), recomputed.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < kept.size(); ++i) differ += kept[i] != recomputed[i];
      EXPECT_EQ(differ, 0u) << "of " << kept.size() << " losses, norms and parameters";
    }
  }
}

// With one micro-batch per step and dp alone, ZeRO-2 and 3 reduce what ZeRO-1 reduces, unit by unit
// instead of bucket by bucket: the same sums per element, so the same bits (the tied embedding's two
// contributions, head and embedding layer, are summed before its reduction only in ZeRO-1, so with
// one rank holding both they add in another order: that tensor alone may differ in the last bits).
TEST(ParallelEquivalence, ZeroTwoAndThreeWithOneMicroBatch) {
  const int n = test_world().size();
  if (n > 4) GTEST_SKIP() << "dp alone up to 4";
  const Layout layout{n, 1, 1};
  const std::vector<double> one = train_bits(layout, 8 / n, 1);
  for (int zero : {2, 3}) {
    const std::vector<double> bits = train_bits(layout, 8 / n, zero);
    ASSERT_EQ(bits.size(), one.size());
    // Losses and norms within the tolerance (check_layout holds the parameters to theirs).
    std::size_t differ = 0;
    double worst = 0;
    for (std::size_t i = 0; i < bits.size(); ++i) {
      differ += bits[i] != one[i];
      if (i < 2 * kSteps) worst = std::max(worst, std::abs(bits[i] - one[i]) / std::abs(one[i]));
    }
    if (test_world().rank() == 0)
      std::printf("[ zero %d vs 1 ] dp %d, one micro-batch: %zu of %zu losses, norms and parameters differ in "
                  "bits (worst loss/norm relative %.2e)\n", zero, n, differ, bits.size(), worst);
    EXPECT_LE(worst, kLossTolerance);
  }
}

// The target: at dp 4, --zero 3 holds at most 0.3x the parameters + gradients + optimizer
// state per rank of --zero 0, as the allocator counts them (what a trainer holds after init, before
// the first step allocates activations). A step adds the transient full units (bounded by
// UnitShards: at most 3 units' parameters (the one in use, two prefetched) and 2 units' gradients
// at once; the head uses lnf and its tied embedding one after the other, making the embedding's
// gradient in the forward).
TEST(ParallelTrainer, ZeroThreeCutsPerRankStateAtDp4) {
  Communicator& world = test_world();
  if (world.size() != 4) GTEST_SKIP() << "dp 4";
  DeviceContext& ctx = test_context();
  const TrainSettings s = settings();
  std::size_t held[4] = {};
  for (int zero : {0, 3}) {
    ParallelGroups groups = build_groups(world, Mesh({4, 1, 1}));
    data::DataLoader train = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
    world.barrier();
    const std::size_t before = ctx.allocator().stats().in_use;
    ParallelTrainer trainer(ctx, world, groups, tiny_config(), DType::F32, train, nullptr, s,
                            plan_of({4, 1, 1}, zero, true, /*micro_batch=*/2));
    trainer.init(kSeed);
    held[zero] = ctx.allocator().stats().in_use - before;
    trainer.step();
    trainer.step();  // the second follows the order the first learned: prefetched
    if (zero == 3) {
      const UnitShardStats& st = dynamic_cast<const UnitZeroEngine&>(trainer.zero()).shards().stats();
      EXPECT_LE(st.max_full_param_units, 1 + kPrefetchUnits);
      EXPECT_LE(st.max_full_grad_units, 2);
      if (world.rank() == 0)
        std::printf("[ memory ] dp 4: zero 0 holds %zu bytes, zero 3 %zu (%.3fx); zero 3 in a step: at most %d units' "
                    "parameters and %d units' gradients at once, %d of %d gathers prefetched\n",
                    held[0], held[3], static_cast<double>(held[3]) / static_cast<double>(held[0]),
                    st.max_full_param_units, st.max_full_grad_units, st.prefetched, st.gathers);
    }
  }
  EXPECT_LE(static_cast<double>(held[3]), 0.3 * static_cast<double>(held[0]));
}

// ZeRO-3 never holds the whole stage, from the trainer's construction on: through init() and two
// steps the allocator's peak stays within the owned shards (parameters, gradients, m, v), the three
// largest units' parameters and gradients, and what a step adds for activations and scratch
// (measured as a ZeRO-0 run's step peak over its state after init). A model whose parameters
// outweigh its activations (C = 192, T = 32, B = 1), so a full stage's buffers would not fit.
TEST(ParallelTrainer, ZeroThreePeakNeverHoldsTheWholeStageAtDp4) {
  Communicator& world = test_world();
  if (world.size() != 4) GTEST_SKIP() << "dp 4";
  GptConfig config = tiny_config();
  config.channels = 192;
  const TrainSettings s = settings();
  const auto run = [&](int zero, std::size_t* after_init, std::size_t* bound) {
    DeviceContext ctx(DeviceOptions{});  // its own allocator: the peak is this run's
    ParallelGroups groups = build_groups(world, Mesh({4, 1, 1}));
    data::DataLoader train = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
    ParallelTrainer trainer(ctx, world, groups, config, DType::F32, train, nullptr, s,
                            plan_of({4, 1, 1}, zero, true, /*micro_batch=*/1, config));
    trainer.init(kSeed);
    *after_init = ctx.allocator().stats().in_use;
    if (const auto* engine = dynamic_cast<const UnitZeroEngine*>(&trainer.zero())) {
      const UnitShards* units = &engine->shards();
      std::vector<std::int64_t> unit_numel(units->units().size(), 0);
      for (const ShardBlock& b : units->blocks()) unit_numel[static_cast<std::size_t>(b.unit)] += b.padded;
      std::sort(unit_numel.begin(), unit_numel.end(), std::greater<>());
      std::int64_t largest = 0;
      for (std::size_t u = 0; u < 3 && u < unit_numel.size(); ++u) largest += unit_numel[u];
      *bound = static_cast<std::size_t>(trainer.zero().state_bytes() + 4 * 2 * units->owned_numel() +
                                        4 * 2 * largest);
    }
    trainer.step();
    trainer.step();
    return ctx.allocator().stats().peak;
  };
  std::size_t zero0_state = 0, zero3_state = 0, owned_and_units = 0, unused = 0;
  const std::size_t step_extra = run(0, &zero0_state, &unused) - zero0_state;  // activations, scratch
  const std::size_t peak = run(3, &zero3_state, &owned_and_units);
  EXPECT_LE(peak, owned_and_units + step_extra)
      << "owned shards + 3 units " << owned_and_units << " bytes, activations and scratch " << step_extra
      << "; a full stage's parameters are " << 4 * config.parameter_count() << " bytes";
  if (world.rank() == 0)
    std::printf("[ memory ] zero 3 at dp 4: peak %zu bytes <= owned shards + 3 largest units %zu + a step's "
                "activations and scratch %zu (stage parameters alone: %lld)\n",
                peak, owned_and_units, step_extra, static_cast<long long>(4 * config.parameter_count()));
}

// Overlap in the trainer: with overlap on, the first gradient bucket's reduction is launched while
// backward still has parameters to produce (before its last gradient), and pipeline receives are
// posted a computation early; with --no-overlap neither happens. ZeRO-1 holds 1/dp of the state.
TEST(ParallelTrainer, OverlapsReductionAndTransfersWithBackwardAndShardsTheState) {
  Communicator& world = test_world();
  const int n = world.size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  DeviceContext& ctx = test_context();
  const TrainSettings s = settings();
  for (const bool overlap : {true, false}) {
    for (const Layout layout : {Layout{n, 1, 1}, Layout{n / 2, 1, 2}}) {
      SCOPED_TRACE(layout.name() + (overlap ? " overlap" : " no overlap"));
      ParallelGroups groups = build_groups(world, Mesh(layout.mesh()));
      // Micro-batches of one: enough of them for 1F1B on every layout.
      const LayoutPlan plan = plan_of(layout, /*zero=*/1, overlap, /*micro_batch=*/1);
      data::DataLoader train = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
      ParallelTrainer trainer(ctx, world, groups, tiny_config(), DType::F32, train, nullptr, s, plan);
      trainer.init(kSeed);
      trainer.step();
      const GradReducer& reducer = dynamic_cast<const FlatZeroEngine&>(trainer.zero()).reducer();
      const int params = static_cast<int>(reducer.params().size());
      ASSERT_GE(reducer.layout().size(), 3);
      if (overlap) {
        // Launched after fewer marks than there are parameters: backward was still going.
        EXPECT_GE(reducer.launched_after_marks(0), 1);
        EXPECT_LT(reducer.launched_after_marks(0), params - 1);
        EXPECT_GE(reducer.buckets_launched_before_finish(), 2);
      } else {
        EXPECT_EQ(reducer.buckets_launched_before_finish(), 0);
      }
      if (layout.pp > 1) {
        EXPECT_EQ(trainer.last_pipeline_stats().receives_posted_early > 0, overlap);
      }
      // The optimizer's m and v: this stage's parameters over dp, plus at most the padding (fewer
      // than dp elements over the whole buffer).
      const std::int64_t stage_params = trainer.model().parameters().param_numel();
      const std::int64_t state = trainer.zero().state_bytes();
      EXPECT_LE(state, 8 * (stage_params / layout.dp + layout.dp));
      EXPECT_GE(state, 8 * (stage_params / layout.dp - layout.dp));
    }
  }
}

}  // namespace
}  // namespace mt
