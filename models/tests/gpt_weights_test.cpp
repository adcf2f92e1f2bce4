// load_llmc_weights: the same bits as the full parameters cut by load_full_parameters, for every
// kind of shard (whole, tensor-parallel parts, a pipeline stage with the tied head), and without
// holding the file whole: the heap it takes over the model's own is at most one tensor, one
// shard of it and one I/O chunk (issue 16: before, the per-tensor vectors and a concatenated copy,
// twice the model, peaked 0.86 GB above the steady state on the 124M model).
#include <gtest/gtest.h>

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "models/gpt.h"                 // defines: Gpt
#include "models/gpt_weights.h"         // defines: load_llmc_weights, load_full_parameters, save_llmc_weights
#include "models/llmc/llmc_weights.h"   // defines: read_llmc_weights
#include "tests/scratch_dir.h"          // defines: ScratchDir

// The heap in use and its high-water mark, over every operator new of the process.
namespace {
std::atomic<std::size_t> g_live{0}, g_peak{0};

void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const std::size_t now = g_live.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
  std::size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void counted_free(void* p) {
  if (p == nullptr) return;
  g_live.fetch_sub(malloc_usable_size(p));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

namespace mt {
namespace {

using testing::ScratchDir;

// Only its rank and size: the loader runs no collective.
class ShapeOnlyGroup final : public Communicator {
 public:
  ShapeOnlyGroup(int rank, int size) : Communicator(rank, size, CommOptions{}) {}
  std::string backend_name() const override { return "shape-only"; }
  CommCapabilities capabilities() const override { return {}; }  // it moves no data
  std::vector<int> world_ranks() const override { return {}; }

 protected:
  WorkPtr launch(CollectiveDesc) override { MT_FAIL("no collective expected"); }
  std::unique_ptr<Communicator> split_by_color(int, int, const std::vector<int>&) override {
    MT_FAIL("no split expected");
  }
  void allgather_host_bytes(const void*, void*, std::size_t) override { MT_FAIL("no allgather expected"); }
};

// Large enough that the whole model (about 21 MB) stands out against one tensor (wte, 8 MiB)
// plus one 8 MiB I/O chunk.
GptConfig config() {
  GptConfig c;
  c.layers = 4;
  c.heads = 4;
  c.channels = 256;
  c.max_seq_len = 64;
  c.vocab_size = 8192;
  c.padded_vocab = 8192;
  return c;
}

std::vector<float> flat(const Gpt& model) { return model.parameters().flat_params().to_host<float>(); }

class LoadLlmcWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    Gpt source(ctx_, config());
    source.init(7);
    save_llmc_weights(source, file_, DType::F32);
    whole_ = flat(source);
  }
  DeviceContext ctx_{DeviceOptions{Device::cpu(), 0, 1}};
  ScratchDir dir_{"gpt_weights"};
  std::filesystem::path file_ = dir_.path() / "w.bin";
  std::vector<float> whole_;
};

TEST_F(LoadLlmcWeights, EveryShardGetsTheSameBitsAsTheFullParametersGive) {
  std::vector<float> full;
  for (const std::vector<float>& v : read_llmc_weights(file_).values) full.insert(full.end(), v.begin(), v.end());
  GptPartition stage;  // the last of two stages: layers 2-3, the tied head's wte copy, no wpe
  stage.chunks = {{2, 4}};
  stage.embedding = false;
  for (int tp : {1, 2}) {
    for (int rank = 0; rank < tp; ++rank) {
      for (const bool last_stage : {false, true}) {
        GptPartition p = last_stage ? stage : GptPartition::whole(config());
        p.tp_size = tp;
        p.tp_rank = rank;
        ShapeOnlyGroup group(rank, tp);
        const TensorParallel tensor_parallel = tp > 1 ? TensorParallel(&group) : TensorParallel();
        Gpt streamed(ctx_, config(), DType::F32, p, tensor_parallel), reference(ctx_, config(), DType::F32, p, tensor_parallel);
        load_llmc_weights(streamed, ctx_, file_);
        load_full_parameters(reference, ctx_, full);
        EXPECT_EQ(flat(streamed), flat(reference)) << p.describe();
        if (tp == 1 && !last_stage) {
          EXPECT_EQ(flat(streamed), whole_);
        }
      }
    }
  }
}

TEST_F(LoadLlmcWeights, HoldsOneTensorNotTheModel) {
  for (int tp : {1, 2}) {
    GptPartition p = GptPartition::whole(config());
    p.tp_size = tp;
    ShapeOnlyGroup group(0, tp);
    Gpt model(ctx_, config(), DType::F32, p, tp > 1 ? TensorParallel(&group) : TensorParallel());
    std::size_t largest = 0, largest_shard = 0;
    for (const ParamShard& s : model.shards()) {
      largest = std::max(largest, static_cast<std::size_t>(s.full.numel()) * sizeof(float));
      if (!s.replicated()) largest_shard = std::max(largest_shard, static_cast<std::size_t>(s.local.numel()) * sizeof(float));
    }
    const std::size_t chunk = std::size_t{8} << 20, slack = std::size_t{1} << 20;
    const std::size_t before = g_live.load();
    g_peak.store(before);
    load_llmc_weights(model, ctx_, file_);
    const std::size_t extra = g_peak.load() - before;
    const std::size_t model_bytes = whole_.size() * sizeof(float);
    const std::size_t bound = largest + largest_shard + chunk + slack;
    EXPECT_LE(extra, bound) << "tp " << tp << ": the load took " << extra << " bytes over the model's " << model_bytes
                            << "; one tensor is " << largest << ", its largest shard " << largest_shard;
    // A loader holding the file whole twice over (per-tensor vectors and a concatenated copy, as
    // before) takes at least 2 x the model: the bound tells it apart.
    EXPECT_GT(2 * model_bytes, bound);
    std::printf("tp %d: the load took %zu bytes of heap over the model's %zu (bound %zu)\n", tp, extra, model_bytes, bound);
  }
}

}  // namespace
}  // namespace mt
