// ZeRO-2 and 3 with bf16 compute (zero/unit_shards.h): the GEMM weights' owned bf16 shards,
// written by UnitShardedAdamW's step, are all-gathered straight into the compute copy (ZeRO-3 at
// each use, ZeRO-2 after the step), and their full fp32 parameters are never resident in a step. On
// a tiny gpt2 and llama over the world as the data-parallel group: every compute copy is the fp32
// master rounded; a step gathers fewer bytes than the same step in fp32 compute (what bf16 gathered
// before: fp32, then a cast); ZeRO-3's losses are ZeRO-2's bit for bit (same cut); and a
// continuation from the parameters and moments after step 2 (a checkpoint's same-layout resume)
// gives the same bits.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "runtime/dtype.h"
#include "tests/test_env.h"
#include "zero/unit_sharded_adamw.h"
#include "zero/unit_shards.h"
#include "zero/zero_engine.h"

namespace mt {
namespace {

using testing::test_context;
using testing::test_world;

constexpr int kB = 2, kT = 16;
constexpr std::uint64_t kSeed = 3;

GptConfig config_of(const std::string& preset) {
  GptConfig config = gpt_preset(preset);
  config.vocab_size = 128;
  config.max_seq_len = kT;
  return config;
}

// A whole tiny GPT sharded over the world at `stage`, as the trainer's UnitZeroEngine shards it.
class Sharded {
 public:
  Sharded(const GptConfig& config, DType compute, int stage)
      // The trainer's cut: under bf16 the GEMM weights in blocks apart, at both stages alike.
      : cut_(*zero_unit_cut(stage, gpt_parameter_specs(config), test_world().size(), compute)),
        model_(test_context(), config, compute, GptPartition::whole(config), TensorParallel{}, test_world().size(),
               GptOptions{Recompute::None, false, cut_.store_blocks(), cut_.units}),
        shards_(test_context(), test_world(), model_.parameters(), cut_, stage) {
    model_.set_param_hooks(&shards_);
    for (int u = 0; u < units(); ++u) {
      shards_.materialize(u, /*gather=*/false);
      model_.init_unit(kSeed, u);
      shards_.keep_owned(u);
    }
    std::vector<FlatParam> params;
    const ParameterStore& store = model_.parameters();
    for (std::size_t i = 0; i < store.size(); ++i)
      params.push_back({store.spec(i).name, 0, store.spec(i).numel(), store.spec(i).decay, 1.0});
    adam_ = std::make_unique<UnitShardedAdamW>(test_context(), shards_, params);
  }
  Sharded(const Sharded&) = delete;
  Sharded& operator=(const Sharded&) = delete;
  ~Sharded() { model_.set_param_hooks(nullptr); }

  // One step on this rank's tokens: the loss of its forward.
  float step(int k) {
    std::vector<std::int32_t> tokens(kB * kT + 1);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<std::int32_t>((i * 7 + static_cast<std::size_t>(k) * 13 + static_cast<std::size_t>(test_world().rank()) * 29) % 128);
    const std::span<const std::int32_t> all(tokens);
    shards_.zero_owned_grads();
    shards_.start_round(0);
    const float loss = model_.forward(all.first(kB * kT), all.subspan(1), kB, kT, 1.0f / test_world().size());
    model_.backward();
    shards_.finish_round();
    adam_->step(1e-2f);
    shards_.gather_after_step();
    return loss;
  }

  // The fp32 master, unit by unit (an fp32 gather, as checkpoints and local_parameters take it).
  std::vector<std::vector<float>> master() {
    std::vector<std::vector<float>> out;
    const ParameterStore& store = model_.parameters();
    for (int u = 0; u < units(); ++u) {
      shards_.materialize(u, /*gather=*/true);
      const ParamUnit& unit = model_.param_units()[static_cast<std::size_t>(u)];
      for (std::size_t i = unit.first; i < unit.first + unit.count; ++i) out.push_back(store.param(i).to_host<float>());
      shards_.keep_owned(u);
    }
    return out;
  }

  // Another's parameters (through the fp32 path that init and checkpoint loads take) and moments.
  void take_state(Sharded& from) {
    const std::vector<std::vector<float>> values = from.master();
    ParameterStore& store = model_.parameters();
    for (int u = 0; u < units(); ++u) {
      shards_.materialize(u, /*gather=*/false);
      const ParamUnit& unit = model_.param_units()[static_cast<std::size_t>(u)];
      for (std::size_t i = unit.first; i < unit.first + unit.count; ++i)
        store.param(i).copy_from_host(values[i].data(), values[i].size() * sizeof(float), test_context().stream());
      shards_.keep_owned(u);
    }
    for (const UnitShardedAdamW::Piece& p : adam_->owned_pieces())
      for (const AdamMoment which : {AdamMoment::First, AdamMoment::Second}) {
        Tensor to = adam_->moment(which, p.param, p.first, p.numel);
        to.copy_from(from.adam_->moment(which, p.param, p.first, p.numel), test_context().stream());
      }
    adam_->set_step_count(from.adam_->step_count());
  }

  int units() const { return static_cast<int>(model_.param_units().size()); }
  Gpt& model() { return model_; }
  UnitShards& shards() { return shards_; }

 private:
  UnitCut cut_;
  Gpt model_;
  UnitShards shards_;
  std::unique_ptr<UnitShardedAdamW> adam_;
};

struct Case {
  std::string preset;
  int stage;
};

class ZeroBf16 : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroBf16, GathersTheGemmWeightsAsTheRoundedMaster) {
  const GptConfig config = config_of(GetParam().preset);
  const int stage = GetParam().stage;
  Sharded z(config, DType::BF16, stage);
  for (int k = 0; k < 2; ++k) z.step(k);
  const std::vector<std::vector<float>> master = z.master();
  const ParameterStore& store = z.model().parameters();
  UnitShards& shards = z.shards();
  // The GEMM weights (and only they) are blocks of their own that gather the compute copy.
  for (std::size_t b = 0; b < shards.blocks().size(); ++b) {
    const ShardBlock& block = shards.blocks()[b];
    for (std::size_t i = block.first; i < block.first + block.count; ++i)
      EXPECT_EQ(block.compute_only, read_only_as_compute_copy(store.spec(i).kind)) << store.spec(i).name;
    EXPECT_EQ(shards.gathers_compute(static_cast<int>(b)), block.compute_only);
  }
  std::int64_t fp32_bytes = 0, expect_bytes = 0;
  for (const ShardBlock& block : shards.blocks()) {
    fp32_bytes += 4 * block.padded;
    expect_bytes += (block.compute_only ? 2 : 4) * block.padded;
  }
  // Each unit's compute copy as a use reads it: ZeRO-3 gathers it (one round that uses each unit
  // once, the first of its kind: no prefetch); ZeRO-2 holds it (gathered after the last step).
  // ZeRO-2's blocks read in fp32 get their copy cast by the next forward (the store's refresh, which
  // leaves the GEMM weights' copy to the step's gather): as that forward would.
  if (stage == 2) z.model().parameters().refresh_compute_params(test_context());
  const std::int64_t before = shards.stats().gathered_bytes;
  std::size_t checked = 0, gemm = 0;
  shards.start_round(5);
  for (int u = 0; u < z.units(); ++u) {
    shards.begin(u, ParamUse::Forward);
    const ParamUnit& unit = z.model().param_units()[static_cast<std::size_t>(u)];
    for (std::size_t i = unit.first; i < unit.first + unit.count; ++i) {
      const std::vector<bf16> copy = store.compute_param(i).to_host<bf16>();
      ASSERT_EQ(copy.size(), master[i].size());
      for (std::size_t e = 0; e < copy.size(); ++e)
        ASSERT_EQ(copy[e].bits, bf16::from_float(master[i][e]).bits) << store.spec(i).name << " element " << e;
      checked += copy.size();
      // A GEMM weight's fp32 parameters are never allocated for a use; the others' are.
      EXPECT_EQ(store.param(i).resident(), !read_only_as_compute_copy(store.spec(i).kind)) << store.spec(i).name;
      gemm += read_only_as_compute_copy(store.spec(i).kind) ? copy.size() : 0;
    }
    shards.end(u, ParamUse::Forward);
  }
  shards.finish_round();
  EXPECT_GT(gemm, checked / 2) << "the GEMM weights are most of a model";
  EXPECT_EQ(shards.stats().gathered_bytes - before, stage == 3 ? expect_bytes : 0);
  if (stage == 2 && test_world().size() > 1) {
    // ZeRO-2 gathers every block once per step, after the update.
    const std::int64_t step_before = shards.stats().gathered_bytes;
    z.step(2);
    EXPECT_EQ(shards.stats().gathered_bytes - step_before, expect_bytes);
  }
  EXPECT_LT(expect_bytes, fp32_bytes);
  if (test_world().rank() == 0)
    std::printf("[ gather ] %s ZeRO-%d, every unit once: %lld bytes (all fp32: %lld, %.3fx)\n",
                GetParam().preset.c_str(), stage, static_cast<long long>(expect_bytes),
                static_cast<long long>(fp32_bytes), static_cast<double>(expect_bytes) / static_cast<double>(fp32_bytes));
}

TEST_P(ZeroBf16, AStepGathersLessThanInFp32) {
  const GptConfig config = config_of(GetParam().preset);
  const int stage = GetParam().stage;
  if (stage == 2 && test_world().size() == 1) GTEST_SKIP() << "ZeRO-2 on one rank gathers nothing after its step";
  Sharded bf(config, DType::BF16, stage), fp(config, DType::F32, stage);
  bf.step(0);
  fp.step(0);  // the first step learns the order; the second prefetches
  const std::int64_t bf_before = bf.shards().stats().gathered_bytes, fp_before = fp.shards().stats().gathered_bytes;
  bf.step(1);
  fp.step(1);
  const std::int64_t bf_step = bf.shards().stats().gathered_bytes - bf_before;
  const std::int64_t fp_step = fp.shards().stats().gathered_bytes - fp_before;
  EXPECT_EQ(bf.shards().stats().gathers, fp.shards().stats().gathers) << "the same uses gathered";
  EXPECT_LT(bf_step, fp_step * 3 / 4);
  if (test_world().rank() == 0)
    std::printf("[ gather ] %s ZeRO-%d, one step at dp %d: bf16 %lld bytes, fp32 (bf16's before) %lld (%.3fx)\n",
                GetParam().preset.c_str(), stage, test_world().size(), static_cast<long long>(bf_step),
                static_cast<long long>(fp_step), static_cast<double>(bf_step) / static_cast<double>(fp_step));
}

TEST_P(ZeroBf16, LossesAreTheSameAtBothStagesAndAContinuationKeepsTheBits) {
  const GptConfig config = config_of(GetParam().preset);
  constexpr int kSteps = 4;
  std::vector<float> z3_losses, z2_losses;
  Sharded z3(config, DType::BF16, 3), z2(config, DType::BF16, 2);
  Sharded& mine = GetParam().stage == 3 ? z3 : z2;
  const std::vector<float>& my_losses = GetParam().stage == 3 ? z3_losses : z2_losses;
  Sharded resumed(config, DType::BF16, GetParam().stage);
  for (int k = 0; k < kSteps; ++k) {
    z3_losses.push_back(z3.step(k));
    z2_losses.push_back(z2.step(k));
    if (k == 1) resumed.take_state(mine);
  }
  for (int k = 0; k < kSteps; ++k) EXPECT_EQ(z3_losses[k], z2_losses[k]) << "step " << k + 1;
  EXPECT_NE(z3_losses[0], z3_losses[kSteps - 1]) << "training moved";
  for (int k = 2; k < kSteps; ++k) EXPECT_EQ(resumed.step(k), my_losses[k]) << "resumed step " << k + 1;
}

INSTANTIATE_TEST_SUITE_P(Cases, ZeroBf16,
                         ::testing::Values(Case{"tiny", 3}, Case{"llama-tiny", 3}, Case{"tiny", 2},
                                           Case{"llama-tiny", 2}),
                         [](const auto& p) {
                           return std::string(p.param.preset == "tiny" ? "Gpt2" : "Llama") + "Zero" +
                                  std::to_string(p.param.stage);
                         });

}  // namespace
}  // namespace mt
