// The MPI backend's paths for device tensors (comm/mpi_device_comm.h). On any machine: the switch
// is read once when the world communicator is made (splits keep it), a bad value or cuda-aware on
// an MPI without CUDA support is one error on every rank, and host tensors never touch staging.
// On a GPU (the MpiDeviceGpu cases; they skip on every rank unless every rank has one, several
// ranks may share it): every collective, point-to-point alone and in a batch, on device tensors,
// give the async path the sync path's bits; the async path waits on the producer's stream rather
// than the device, and after a warm-up its steady state allocates no staging buffer.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"    // defines: MpiCommunicator
#include "comm/mpi_device_comm.h"     // defines: kMpiDeviceCommEnv, mpi_cuda_aware
#include "comm/mpi_device_staging.h"  // defines: MpiDeviceStaging
#include "runtime/context.h"          // defines: DeviceContext
#include "runtime/cuda_api.h"         // defines: cuda::device_count
#include "runtime/device_counters.h"  // defines: device_counters
#include "runtime/kernels.h"          // defines: kernels::scale
#include "runtime/tensor.h"           // defines: Tensor
#include "tests/test_helpers.h"       // defines: error_of

namespace mt {
namespace {

using i64 = std::int64_t;
const CommOptions kOptions{.timeout = std::chrono::seconds(120)};

// Sets the switch for one scope, then puts back what was there.
class SwitchScope {
 public:
  explicit SwitchScope(const char* value) {
    const char* was = std::getenv(kMpiDeviceCommEnv);
    had_ = was != nullptr;
    if (had_) saved_ = was;
    if (value != nullptr) {
      setenv(kMpiDeviceCommEnv, value, 1);
    } else {
      unsetenv(kMpiDeviceCommEnv);
    }
  }
  ~SwitchScope() {
    if (had_) {
      setenv(kMpiDeviceCommEnv, saved_.c_str(), 1);
    } else {
      unsetenv(kMpiDeviceCommEnv);
    }
  }

 private:
  bool had_ = false;
  std::string saved_;
};

TEST(MpiDeviceCommWorld, TheSwitchIsReadWhenTheWorldIsMadeAndSplitsKeepIt) {
  std::unique_ptr<MpiCommunicator> world;
  {
    SwitchScope scope("async");
    world = MpiCommunicator::world(kOptions);
  }
  EXPECT_EQ(world->device_comm(), MpiDeviceComm::Async) << "read once, at construction";
  std::vector<int> all(static_cast<std::size_t>(world->size()));
  for (int r = 0; r < world->size(); ++r) all[static_cast<std::size_t>(r)] = r;
  std::unique_ptr<Communicator> group = world->split(all, "all");
  auto* mpi_group = dynamic_cast<MpiCommunicator*>(group.get());
  ASSERT_NE(mpi_group, nullptr);
  EXPECT_EQ(mpi_group->device_comm(), MpiDeviceComm::Async);
  SwitchScope unset(nullptr);
  EXPECT_EQ(MpiCommunicator::world(kOptions)->device_comm(), MpiDeviceComm::Sync);
}

TEST(MpiDeviceCommWorld, ABadValueIsOneErrorOnEveryRank) {
  SwitchScope scope("asynchronous");
  const std::string what = testing::error_of<EnvironmentError>([] { MpiCommunicator::world(kOptions); });
  EXPECT_NE(what.find("MESHTRAIN_MPI_DEVICE_COMM=asynchronous"), std::string::npos) << what;
}

TEST(MpiDeviceCommWorld, CudaAwareNeedsAnMpiThatSaysSo) {
  std::string why;
  const bool aware = mpi_cuda_aware(&why);
  SwitchScope scope("cuda-aware");
  if (aware) {
    EXPECT_EQ(MpiCommunicator::world(kOptions)->device_comm(), MpiDeviceComm::CudaAware);
    return;
  }
  EXPECT_FALSE(why.empty());
  const std::string what = testing::error_of<EnvironmentError>([] { MpiCommunicator::world(kOptions); });
  EXPECT_NE(what.find("MESHTRAIN_MPI_DEVICE_COMM=cuda-aware, but"), std::string::npos) << what;
  EXPECT_NE(what.find(why), std::string::npos) << what;
}

// The CPU path is the same under every mode: the tensors' own memory, no staging, no counted work.
TEST(MpiDeviceCommWorld, HostTensorsAreNeverStaged) {
  std::unique_ptr<MpiCommunicator> world;
  {
    SwitchScope scope("async");
    world = MpiCommunicator::world(kOptions);
  }
  DeviceContext ctx(DeviceOptions{});
  const i64 n = 1000;
  std::vector<float> mine(static_cast<std::size_t>(n));
  for (i64 i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = static_cast<float>(world->rank() + i);
  Tensor t = Tensor::from_host(mine, {n}, ctx);
  Tensor gathered = Tensor::empty({n * world->size()}, DType::F32, ctx);
  const DeviceCounters before = device_counters();
  world->allreduce(t);
  world->allgather_async(t, gathered)->wait_on(ctx.stream());
  EXPECT_EQ(device_counters() - before, DeviceCounters{});
  const int s = world->size();
  std::vector<float> got = t.to_host<float>();
  for (i64 i = 0; i < n; ++i) {
    ASSERT_EQ(got[static_cast<std::size_t>(i)], static_cast<float>(s * (s - 1) / 2 + s * i)) << i;
  }
  EXPECT_EQ(world->staging_pool(Device::cpu()).stats().allocations, 0u);
}

// ---- On a GPU ----

struct GpuSetup {
  bool usable = false;
  std::string reason;
  int gpu = 0;
};

// Collective over MPI_COMM_WORLD, so that all ranks skip or run together.
GpuSetup probe() {
  GpuSetup setup;
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_rank = 0;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);
  std::string no_gpu;
  const int gpus = cuda::device_count(&no_gpu);
  if (gpus > 0) setup.gpu = local_rank % gpus;  // ranks may share a GPU: MPI does not mind
  int ok = gpus > 0 ? 1 : 0;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  setup.usable = all_ok == 1;
  setup.reason = gpus == 0 ? "no usable GPU: " + no_gpu : "another rank has no GPU";
  return setup;
}

// One context on this rank's GPU and two communicators on one engine: the sync path and the async
// one, whatever the environment says (it is read only by MpiCommunicator::world).
class MpiDeviceGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setup_ = std::make_unique<GpuSetup>(probe());
    if (!setup_->usable) return;
    ctx_ = std::make_unique<DeviceContext>(DeviceOptions{Device::cuda(setup_->gpu), 0, 1});
    auto engine = std::make_shared<MpiEngine>(kOptions.timeout);
    sync_ = std::make_unique<MpiCommunicator>(MpiComm::world().dup(), engine, kOptions);
    auto staging = std::make_shared<MpiDeviceStaging>(MpiDeviceComm::Async, &ctx_->stream());
    async_ = std::make_unique<MpiCommunicator>(MpiComm::world().dup(), engine, kOptions, std::move(staging));
  }
  static void TearDownTestSuite() {
    async_.reset();
    sync_.reset();
    ctx_.reset();
    setup_.reset();
  }
  void SetUp() override {
    if (!setup_->usable) GTEST_SKIP() << setup_->reason;
    if (async_ == nullptr) FAIL() << "no communicators";
  }
  static DeviceContext& ctx() { return *ctx_; }
  static Device gpu() { return Device::cuda(setup_->gpu); }

  static inline std::unique_ptr<GpuSetup> setup_;
  static inline std::unique_ptr<DeviceContext> ctx_;
  static inline std::unique_ptr<MpiCommunicator> sync_;
  static inline std::unique_ptr<MpiCommunicator> async_;
};

// Values that are not small integers, so that sums round: equal bits mean the same reduction.
std::vector<float> values(i64 n, int rank, int salt) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (i64 i = 0; i < n; ++i) {
    const float x = 0.37f * static_cast<float>(i + 1) + 1.3f * static_cast<float>(rank + salt);
    v[static_cast<std::size_t>(i)] = std::sin(x);
  }
  return v;
}

std::vector<char> bytes_of(const Tensor& t) {
  std::vector<char> out(t.nbytes());
  if (t.dtype() == DType::F32) {
    std::vector<float> v = t.to_host<float>();
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    std::vector<bf16> v = t.to_host<bf16>();
    std::memcpy(out.data(), v.data(), out.size());
  }
  return out;
}

// Every op's tensors, allocated once so that a step allocates nothing of its own.
struct StepTensors {
  i64 n;
  int size;
  int rank;
  std::map<std::string, Tensor> t;

  StepTensors(DeviceContext& ctx, i64 n_, int size_, int rank_) : n(n_), size(size_), rank(rank_) {
    auto make = [&](const std::string& name, i64 count, DType dtype = DType::F32) {
      t[name] = Tensor::empty({count}, dtype, ctx);
    };
    const i64 all = n * size;
    for (const char* name : {"ar_in", "ar_out", "ar_avg", "bc", "ag_in", "rs_out", "p2p_out", "batch_out", "p2p_in"}) {
      make(name, n);
    }
    make("ar_bf16", n, DType::BF16);
    for (const char* name : {"ag_out", "ag_inplace", "rs_in", "rs_inplace", "a2a_in", "a2a_out"}) make(name, all);
  }

  // Fresh inputs: a synchronous upload (no allocation, the data ready on the device).
  void fill(DeviceContext& ctx) {
    int salt = 0;
    for (auto& [name, tensor] : t) {
      std::vector<float> v = values(tensor.numel(), rank, ++salt);
      if (tensor.dtype() == DType::F32) {
        tensor.copy_from_host(v.data(), tensor.nbytes(), ctx.stream());
      } else {
        std::vector<bf16> b(v.begin(), v.end());
        tensor.copy_from_host(b.data(), tensor.nbytes(), ctx.stream());
      }
    }
  }

  // Every op, waited for together (on the compute stream or by the host), or each by the host before
  // the next starts (a send and its receive together).
  enum class Waiting { TogetherOnStream, TogetherOnHost, EachOnHost };
  void run(Communicator& comm, DeviceContext& ctx, Waiting how) {
    std::vector<WorkPtr> pending;
    auto wait_all = [&] {
      for (const WorkPtr& w : pending) {
        if (how == Waiting::TogetherOnStream) {
          w->wait_on(ctx.stream());
        } else {
          w->wait();
        }
      }
      pending.clear();
    };
    auto issued = [&] {
      if (how == Waiting::EachOnHost) wait_all();
    };
    pending.push_back(comm.allreduce_async(t["ar_in"], t["ar_out"]));
    issued();
    pending.push_back(comm.allreduce_async(t["ar_avg"], t["ar_avg"], {.op = ReduceOp::Avg}));
    issued();
    pending.push_back(comm.allreduce_async(t["ar_bf16"], t["ar_bf16"]));
    issued();
    pending.push_back(comm.broadcast_async(t["bc"], {.root = size - 1}));
    issued();
    pending.push_back(comm.allgather_async(t["ag_in"], t["ag_out"]));
    issued();
    pending.push_back(comm.allgather_async(t["ag_inplace"].flat_slice(rank * n, n), t["ag_inplace"]));
    issued();
    pending.push_back(comm.reduce_scatter_async(t["rs_in"], t["rs_out"]));
    issued();
    pending.push_back(comm.reduce_scatter_async(t["rs_inplace"], t["rs_inplace"].flat_slice(rank * n, n)));
    issued();
    pending.push_back(comm.alltoall_async(t["a2a_in"], t["a2a_out"]));
    issued();
    if (size > 1) {
      const int next = (rank + 1) % size;
      const int prev = (rank + size - 1) % size;
      pending.push_back(comm.recv_async(t["p2p_out"], prev, {.tag = 3}));
      pending.push_back(comm.send_async(t["p2p_in"], next, {.tag = 3}));
      issued();
      pending.push_back(
          comm.batch_async({PointToPoint::send(t["p2p_in"], next, 5), PointToPoint::recv(t["batch_out"], prev, 5)}));
      issued();
    }
    wait_all();
    ctx.synchronize();
  }
  // Staging buffers a step holds at most at once: one per op, one per batch message.
  int staged_buffers() const { return 9 + (size > 1 ? 4 : 0); }

  std::map<std::string, std::vector<char>> results() {
    std::map<std::string, std::vector<char>> out;
    for (auto& [name, tensor] : t) out[name] = bytes_of(tensor);
    // After an in-place reduce_scatter only this rank's block is defined.
    out["rs_inplace"] = bytes_of(t["rs_inplace"].flat_slice(rank * n, n));
    return out;
  }
};

void expect_same_bits(const std::map<std::string, std::vector<char>>& want,
                      const std::map<std::string, std::vector<char>>& got, const char* how) {
  for (const auto& [name, bytes] : want) {
    EXPECT_TRUE(got.at(name) == bytes) << name << " differs from the sync path's (" << how << ")";
  }
}

using Waiting = StepTensors::Waiting;
const char* waiting_name(Waiting how) {
  switch (how) {
    case Waiting::TogetherOnStream: return "all issued, then wait_on";
    case Waiting::TogetherOnHost: return "all issued, then wait";
    case Waiting::EachOnHost: return "each waited before the next";
  }
  return "?";
}

// How many buffers a step needs depends on how many of its ops are in flight at once, which depends
// on timing; but never more than one per op, and once each was waited for before the next, one
// per size class: then a steady state allocates nothing, neither staging nor anything else.
void expect_steady_state(MpiCommunicator& comm, DeviceContext& ctx, Device device) {
  StepTensors step(ctx, 3000, comm.size(), comm.rank());
  const std::uint64_t first = comm.staging_pool(device).stats().allocations;
  for (int i = 0; i < 6; ++i) {
    step.fill(ctx);
    step.run(comm, ctx, i % 2 == 0 ? Waiting::TogetherOnStream : Waiting::TogetherOnHost);
  }
  EXPECT_LE(comm.staging_pool(device).stats().allocations - first, static_cast<std::uint64_t>(step.staged_buffers()))
      << "six steps' buffers are reused, not made again";
  step.fill(ctx);
  step.run(comm, ctx, Waiting::EachOnHost);
  const std::uint64_t warm = comm.staging_pool(device).stats().allocations;
  const DeviceCounters before = device_counters();
  for (int i = 0; i < 3; ++i) {
    step.fill(ctx);
    step.run(comm, ctx, Waiting::EachOnHost);
  }
  EXPECT_EQ(comm.staging_pool(device).stats().allocations, warm);
  EXPECT_EQ((device_counters() - before).allocations, 0u) << "no staging buffer, no tensor";
  EXPECT_EQ(comm.staging_pool(device).stats().in_use, 0u);
}

TEST_F(MpiDeviceGpu, AsyncGivesTheSyncPathsBits) {
  for (i64 n : {1, 1000, 300000}) {
    StepTensors sync_step(ctx(), n, sync_->size(), sync_->rank());
    sync_step.fill(ctx());
    sync_step.run(*sync_, ctx(), Waiting::TogetherOnHost);
    const auto want = sync_step.results();
    for (Waiting how : {Waiting::TogetherOnStream, Waiting::TogetherOnHost, Waiting::EachOnHost}) {
      StepTensors step(ctx(), n, async_->size(), async_->rank());
      step.fill(ctx());
      step.run(*async_, ctx(), how);
      expect_same_bits(want, step.results(), waiting_name(how));
    }
  }
}

TEST_F(MpiDeviceGpu, AsyncSteadyStateAllocatesNoStaging) {
  expect_steady_state(*async_, ctx(), gpu());
  const i64 n = 4096;
  // The sync path, for contrast: a pinned buffer per op on device tensors.
  StepTensors sync_step(ctx(), n, sync_->size(), sync_->rank());
  sync_step.fill(ctx());
  const DeviceCounters sync_before = device_counters();
  sync_step.run(*sync_, ctx(), Waiting::TogetherOnStream);
  EXPECT_GE((device_counters() - sync_before).allocations, 9u);
}

// Where this MPI passes device pointers (Open MPI built with CUDA): the same bits as the sync path.
TEST_F(MpiDeviceGpu, CudaAwareGivesTheSyncPathsBits) {
  std::string why;
  if (!mpi_cuda_aware(&why)) GTEST_SKIP() << why;  // the same library, the same answer on every rank
  auto engine = std::make_shared<MpiEngine>(kOptions.timeout);
  auto staging = std::make_shared<MpiDeviceStaging>(MpiDeviceComm::CudaAware, &ctx().stream());
  MpiCommunicator aware(MpiComm::world().dup(), engine, kOptions, std::move(staging));
  for (i64 n : {1, 1000, 300000}) {
    StepTensors sync_step(ctx(), n, sync_->size(), sync_->rank());
    sync_step.fill(ctx());
    sync_step.run(*sync_, ctx(), Waiting::TogetherOnHost);
    StepTensors step(ctx(), n, aware.size(), aware.rank());
    step.fill(ctx());
    step.run(aware, ctx(), Waiting::TogetherOnStream);
    expect_same_bits(sync_step.results(), step.results(), "cuda-aware");
  }
}

// The producer runs on the compute stream with no host wait before the op; the consumer too, after
// wait_on: the async path orders both by events.
TEST_F(MpiDeviceGpu, AsyncOrdersAfterTheProducerAndBeforeTheConsumer) {
  const i64 n = 1 << 20;
  const int s = async_->size();
  for (int round = 0; round < 3; ++round) {
    Tensor t = Tensor::from_host(std::vector<float>(static_cast<std::size_t>(n), 1.0f), {n}, ctx());
    kernels::scale(ctx(), t, async_->rank() + 1);  // queued, not waited for
    async_->allreduce_async(t, t)->wait_on(ctx().stream());
    kernels::scale(ctx(), t, 2.0);  // queued after the result's copy
    const std::vector<float> got = t.to_host<float>();
    const float want = static_cast<float>(s * (s + 1));
    for (i64 i = 0; i < n; i += 4097) {
      ASSERT_EQ(got[static_cast<std::size_t>(i)], want) << "round " << round << " i " << i;
    }
    ASSERT_EQ(got.back(), want);
  }
}

// The async staging on any machine, through its test seam: host tensors staged like device ones
// (windows, offsets, in-place layouts, copies back, fenced returns) give the bits of the direct
// path, and the pool stops allocating after a warm-up.
// The cuda-aware routing likewise: tensors' own addresses to MPI after the producer's event, the
// ops that need host memory (averages, bf16 sums, in-place reduce_scatter) staged as by async.
TEST(MpiDeviceCommWorld, CudaAwareRoutingOfHostTensorsGivesTheDirectPathsBits) {
  DeviceContext ctx(DeviceOptions{});
  auto engine = std::make_shared<MpiEngine>(kOptions.timeout);
  MpiCommunicator direct(MpiComm::world().dup(), engine, kOptions);
  MpiCommunicator aware(MpiComm::world().dup(), engine, kOptions,
                        std::make_shared<MpiDeviceStaging>(MpiDeviceComm::CudaAware, &ctx.stream(), true));
  StepTensors want(ctx, 999, direct.size(), direct.rank());
  want.fill(ctx);
  want.run(direct, ctx, Waiting::TogetherOnHost);
  for (Waiting how : {Waiting::TogetherOnStream, Waiting::EachOnHost}) {
    StepTensors got(ctx, 999, aware.size(), aware.rank());
    got.fill(ctx);
    got.run(aware, ctx, how);
    expect_same_bits(want.results(), got.results(), waiting_name(how));
  }
  const std::size_t staged_ops = aware.size() > 1 ? 3 : 2;  // avg, bf16, in-place reduce_scatter off rank 0
  EXPECT_LE(aware.staging_pool(Device::cpu()).stats().allocations, 2 * staged_ops);
}

TEST(MpiDeviceCommWorld, AsyncStagingOfHostTensorsGivesTheDirectPathsBits) {
  DeviceContext ctx(DeviceOptions{});
  auto engine = std::make_shared<MpiEngine>(kOptions.timeout);
  MpiCommunicator direct(MpiComm::world().dup(), engine, kOptions);
  MpiCommunicator staged(MpiComm::world().dup(), engine, kOptions,
                         std::make_shared<MpiDeviceStaging>(MpiDeviceComm::Async, &ctx.stream(), true));
  for (i64 n : {1, 777, 20000}) {
    StepTensors want(ctx, n, direct.size(), direct.rank());
    want.fill(ctx);
    want.run(direct, ctx, Waiting::TogetherOnHost);
    for (Waiting how : {Waiting::TogetherOnStream, Waiting::TogetherOnHost, Waiting::EachOnHost}) {
      StepTensors got(ctx, n, staged.size(), staged.rank());
      got.fill(ctx);
      got.run(staged, ctx, how);
      expect_same_bits(want.results(), got.results(), waiting_name(how));
    }
  }
  expect_steady_state(staged, ctx, Device::cpu());
  EXPECT_GT(staged.staging_pool(Device::cpu()).stats().allocations, 0u) << "the seam staged the host tensors";
}

}  // namespace
}  // namespace mt
