// bf16 compute in ParallelTrainer: the optimizer's update writes the GEMMs' bf16 copy (ZeRO 0/1:
// in the AdamW pass, ZeRO-1's buckets read in fp32 cast after their gathers; the tied embedding's
// last-stage copy recast after it takes the first stage's bits), so the model no longer casts its
// master at each step. Against a trainer whose model casts the copy itself at micro-batch 0: the same losses and
// norms bit for bit, on every layout of the world and ZeRO 0-3, the copy is the master rounded after
// every step, and with ZeRO 0/1 a step launches less. ZeRO-1 over dp > 1 gathers its GEMM weights'
// bf16 copy alone (zero_flat_regions): the master is gathered after each step, so that the cast
// run's model casts the whole of it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/loader.h"
#include "models/gpt.h"
#include "parallel/groups.h"
#include "runtime/device_counters.h"
#include "tests/test_env.h"
#include "train/parallel_trainer.h"
#include "train/tests/tiny_corpus.h"

namespace mt {
namespace {

using testing::corpus;
using testing::test_context;
using testing::test_world;

constexpr std::uint64_t kSeed = 5;
constexpr int kSteps = 3;

struct Bf16Run {
  std::vector<double> losses, norms;
  std::uint64_t launches = 0;  // of the last step
  std::size_t stale = 0;       // bf16 copy elements that are not the rounded master, over all steps
};

Bf16Run train(const Mesh& mesh, int zero, bool optimizer_writes_copy) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  GptConfig config = gpt_preset("tiny");
  config.vocab_size = 256;
  config.max_seq_len = 32;
  TrainSettings s;
  s.seq_len = 32;
  s.steps = kSteps;
  s.schedule.max_lr = 1e-3f;
  LayoutRequest request;
  request.dp = mesh.shape().dp;
  request.tp = mesh.shape().tp;
  request.pp = mesh.shape().pp;
  request.zero = zero;
  request.micro_batch = 2;
  request.bucket_mb = 0.05;
  const LayoutPlan plan(request, layout_dims(config, s.seq_len), request.world_size(), /*global_batch=*/8);
  ParallelGroups groups = build_groups(world, mesh);
  data::DataLoader data = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
  ParallelTrainer trainer(ctx, world, groups, config, DType::BF16, data, nullptr, s, plan);
  trainer.init(kSeed);
  if (!optimizer_writes_copy) trainer.model().set_compute_copy_kept(false);
  Bf16Run run;
  const ParameterStore& store = trainer.model().parameters();
  for (int i = 0; i < kSteps; ++i) {
    const DeviceCounters before = device_counters();
    const StepRecord r = trainer.step();
    run.launches = (device_counters() - before).launches;
    run.losses.push_back(r.loss);
    run.norms.push_back(r.grad_norm);
    if (store.placed()) continue;  // ZeRO 2/3: the copy lives per unit (zero/unit_shards.h)
    // The master as gathered (collective): ZeRO-1 over dp > 1 gathers its GEMM weights' copy alone
    // in a step, the master current in the owned blocks only; the cast run's next forward reads it.
    const std::vector<float> master = trainer.local_parameters();
    const std::vector<bf16> copy = store.flat_compute_params().to_host<bf16>();
    for (std::size_t j = 0; j < master.size(); ++j) run.stale += copy[j].bits != bf16::from_float(master[j]).bits;
  }
  return run;
}

TEST(TrainerBf16, TheUpdateKeepsTheBf16CopyWithTheSameBits) {
  const int n = test_world().size();
  std::vector<Mesh> meshes{Mesh({n, 1, 1})};
  if (n % 2 == 0) meshes.push_back(Mesh({n / 2, 1, 2}));  // the tied embedding on two stages
  for (const Mesh& mesh : meshes) {
    for (int zero = 0; zero <= 3; ++zero) {
      SCOPED_TRACE(mesh.shape().describe() + " zero " + std::to_string(zero));
      const Bf16Run kept = train(mesh, zero, true);
      const Bf16Run cast = train(mesh, zero, false);
      for (int i = 0; i < kSteps; ++i) {
        EXPECT_EQ(kept.losses[i], cast.losses[i]) << "step " << i + 1;
        EXPECT_EQ(kept.norms[i], cast.norms[i]) << "step " << i + 1;
      }
      EXPECT_EQ(kept.stale, 0u) << "the bf16 copy is not the rounded master after an update";
      if (zero <= 1) {
        EXPECT_LT(kept.launches, cast.launches) << "the model still casts its master every step";
      }
    }
  }
}

}  // namespace
}  // namespace mt
