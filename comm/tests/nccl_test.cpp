// The NCCL backend on GPUs, one GPU per rank: every collective in and out of place, several dtypes
// and reduce ops, point-to-point alone and in batches, barrier, Work::wait_on ordering a compute
// stream, and splits.
// Expected values are exact (small integers, exact in fp32 and bf16), except fp32 averages, which
// NCCL pre-scales by 1/size. All ranks decide together whether to run: the suite skips on every
// rank unless NCCL is built in and each rank of a node has a GPU of its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"       // defines: Communicator, Work, CommOptions
#include "comm/mpi_runtime.h"        // defines: MpiComm
#include "comm/nccl_communicator.h"  // defines: nccl_compiled, nccl_version, make_nccl_communicator
#include "runtime/context.h"         // defines: DeviceContext, DeviceOptions
#include "runtime/cuda_api.h"        // defines: cuda::device_count
#include "runtime/kernels.h"         // defines: kernels::scale
#include "runtime/tensor.h"          // defines: Tensor

namespace mt {
namespace {

using i64 = std::int64_t;

TEST(NcclBuild, VersionIsReportedWhenBuiltIn) {
  const std::string version = nccl_version();
  if (!nccl_compiled()) {
    EXPECT_EQ(version, "");
    return;
  }
  EXPECT_EQ(std::count(version.begin(), version.end(), '.'), 2) << version;
  EXPECT_EQ(version.rfind("2.", 0), 0u) << version;
}

struct NcclSetup {
  bool usable = false;
  std::string reason;  // why not, when not usable
  int local_rank = 0;  // index among the ranks of this node
  int gpu = 0;         // this rank's GPU
};

// Collective over MPI_COMM_WORLD, so that all ranks skip or run together.
NcclSetup probe() {
  NcclSetup setup;
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_size = 1;
  MPI_Comm_rank(node, &setup.local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);

  std::string why;
  if (!nccl_compiled()) {
    why = "meshtrain was built without NCCL";
  } else {
    std::string no_gpu;
    const int gpus = cuda::device_count(&no_gpu);
    if (gpus == 0) {
      why = "no usable GPU: " + no_gpu;
    } else if (gpus < local_size && std::getenv("NCCL_HOSTID") == nullptr) {
      why = std::to_string(local_size) + " ranks on this node share " + std::to_string(gpus) +
            " GPU(s); NCCL needs one per rank (or a different NCCL_HOSTID per rank)";
    }
    // With a different NCCL_HOSTID per rank, NCCL takes ranks sharing a GPU for separate hosts and
    // joins them over its socket transport: how one lent GPU runs these tests at several ranks.
    if (gpus > 0) setup.gpu = setup.local_rank % gpus;
  }
  int ok = why.empty() ? 1 : 0;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  setup.usable = all_ok == 1;
  setup.reason = !why.empty() ? why : "another rank cannot run NCCL";
  return setup;
}

// One NCCL world communicator and one context on this rank's GPU for the whole suite (creating a
// communicator takes a while); both are gone before MPI finalizes.
class Nccl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setup_ = std::make_unique<NcclSetup>(probe());
    if (!setup_->usable) return;
    const Device gpu = Device::cuda(setup_->gpu);
    ctx_ = std::make_unique<DeviceContext>(DeviceOptions{gpu, 0, 1});
    comm_ = make_nccl_communicator(MpiComm::world().dup(), gpu, ctx_->stream().handle(),
                                   CommOptions{.timeout = std::chrono::seconds(120)});
  }
  static void TearDownTestSuite() {
    comm_.reset();
    ctx_.reset();
    setup_.reset();
  }
  void SetUp() override {
    if (!setup_->usable) GTEST_SKIP() << setup_->reason;
    // SetUpTestSuite threw (its failure is reported): the test body must not run.
    if (comm_ == nullptr) FAIL() << "no NCCL communicator";
  }

  static Communicator& comm() { return *comm_; }
  static DeviceContext& ctx() { return *ctx_; }
  static int rank() { return comm_->rank(); }
  static int size() { return comm_->size(); }

  // Device tensors from host values. The copy is synchronous, so the data is ready before any
  // op is submitted: the input-side rule of the NCCL backend.
  template <class T>
  static Tensor on_gpu(const std::vector<T>& values) {
    return Tensor::from_host(values, {static_cast<i64>(values.size())}, ctx());
  }

  static inline std::unique_ptr<NcclSetup> setup_;
  static inline std::unique_ptr<DeviceContext> ctx_;
  static inline std::unique_ptr<Communicator> comm_;
};

std::vector<float> floats(i64 n, auto&& value) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (i64 i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(value(i));
  return v;
}

TEST_F(Nccl, BackendIsNccl) {
  EXPECT_EQ(comm().backend_name(), "nccl");
  std::vector<int> all(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) all[static_cast<std::size_t>(r)] = r;
  EXPECT_EQ(comm().world_ranks(), all);
}

// What the pipeline asks (comm/comm_capabilities.h): one stream in issue order, device memory only;
// single sends and receives keep their order, batches group them.
TEST_F(Nccl, CapabilitiesOfOneStreamInIssueOrder) {
  const CommCapabilities caps = comm().capabilities();
  EXPECT_FALSE(caps.early_receives);
  EXPECT_FALSE(caps.unordered_point_to_point);
  EXPECT_TRUE(caps.grouped_point_to_point);
  EXPECT_EQ(caps.host_memory, MemoryAccess::None);
  EXPECT_EQ(caps.device_memory, MemoryAccess::Direct);
}

TEST_F(Nccl, AllreduceSumOutOfPlaceAndInPlace) {
  const i64 s = size(), r = rank();
  for (i64 n : {i64{1}, i64{1000}, (i64{1} << 20) + 3}) {
    const auto mine = floats(n, [&](i64 i) { return r + i % 97; });
    const auto expected = floats(n, [&](i64 i) { return s * (i % 97) + s * (s - 1) / 2; });
    Tensor in = on_gpu(mine);
    Tensor out = Tensor::empty({n}, DType::F32, ctx());
    comm().allreduce_async(in, out)->wait();
    EXPECT_EQ(out.to_host<float>(), expected) << "out of place, n=" << n;
    EXPECT_EQ(in.to_host<float>(), mine) << "the input is left alone";
    comm().allreduce(in);  // in place
    EXPECT_EQ(in.to_host<float>(), expected) << "in place, n=" << n;
  }
}

TEST_F(Nccl, AllreduceOtherOpsAndDTypes) {
  const i64 s = size(), r = rank(), n = 4099;
  {  // max and min, fp32
    Tensor t = on_gpu(floats(n, [&](i64 i) { return r * (i % 5) - i % 3; }));
    comm().allreduce(t, {ReduceOp::Max});
    EXPECT_EQ(t.to_host<float>(), floats(n, [&](i64 i) { return (s - 1) * (i % 5) - i % 3; }));
    Tensor u = on_gpu(floats(n, [&](i64 i) { return r * (i % 5) - i % 3; }));
    comm().allreduce(u, {ReduceOp::Min});
    EXPECT_EQ(u.to_host<float>(), floats(n, [&](i64 i) { return -(i % 3); }));
  }
  {  // bf16 sum: integers up to 256 are exact in bf16
    std::vector<bf16> mine;
    for (i64 i = 0; i < n; ++i) mine.push_back(bf16::from_float(static_cast<float>(r + i % 7)));
    Tensor t = on_gpu(mine);
    comm().allreduce(t);
    const auto got = t.to_host<bf16>();
    for (i64 i = 0; i < n; ++i) {
      ASSERT_EQ(got[static_cast<std::size_t>(i)].to_float(), static_cast<float>(s * (i % 7) + s * (s - 1) / 2))
          << "element " << i;
    }
  }
  {  // int32 sum and average (NCCL sums, then divides, truncating)
    std::vector<std::int32_t> mine;
    for (i64 i = 0; i < n; ++i) mine.push_back(static_cast<std::int32_t>(s * (i % 100) + r));
    Tensor sum = on_gpu(mine), avg = on_gpu(mine);
    comm().allreduce(sum);
    comm().allreduce(avg, {ReduceOp::Avg});
    const auto got_sum = sum.to_host<std::int32_t>();
    const auto got_avg = avg.to_host<std::int32_t>();
    for (i64 i = 0; i < n; ++i) {
      const i64 total = s * s * (i % 100) + s * (s - 1) / 2;
      ASSERT_EQ(got_sum[static_cast<std::size_t>(i)], total) << "element " << i;
      ASSERT_EQ(got_avg[static_cast<std::size_t>(i)], total / s) << "element " << i;
    }
  }
  {  // fp32 average: NCCL multiplies by 1/size before summing, so allow a few ulps
    Tensor t = on_gpu(floats(n, [&](i64 i) { return s * (r + i % 9); }));
    comm().allreduce(t, {ReduceOp::Avg});
    const auto got = t.to_host<float>();
    for (i64 i = 0; i < n; ++i) {
      const double expected = static_cast<double>(s * (i % 9) + s * (s - 1) / 2);
      ASSERT_NEAR(got[static_cast<std::size_t>(i)], expected, 1e-5 * std::max(1.0, expected)) << "element " << i;
    }
  }
}

TEST_F(Nccl, ReduceScatterOutOfPlaceAndInPlace) {
  const i64 s = size(), r = rank(), n = 1031;
  const auto mine = floats(n * s, [&](i64 j) { return r + j % 101; });
  // Block r of the sum: element i is sum over ranks q of (q + (r * n + i) % 101).
  const auto expected = floats(n, [&](i64 i) { return s * ((r * n + i) % 101) + s * (s - 1) / 2; });
  Tensor in = on_gpu(mine);
  Tensor out = Tensor::empty({n}, DType::F32, ctx());
  comm().reduce_scatter(in, out);
  EXPECT_EQ(out.to_host<float>(), expected);

  Tensor buffer = on_gpu(mine);
  Tensor own_block = buffer.flat_slice(r * n, n);  // in place: the output is this rank's block of the input
  comm().reduce_scatter(buffer, own_block);
  EXPECT_EQ(own_block.to_host<float>(), expected);
}

TEST_F(Nccl, AllgatherOutOfPlaceAndInPlace) {
  const i64 s = size(), r = rank(), n = 517;
  const auto expected = floats(n * s, [&](i64 j) { return (j / n) * 1000 + j % n; });
  Tensor in = on_gpu(floats(n, [&](i64 i) { return r * 1000 + i; }));
  Tensor out = Tensor::empty({n * s}, DType::F32, ctx());
  comm().allgather(in, out);
  EXPECT_EQ(out.to_host<float>(), expected);

  // In place: the input is this rank's block of the output, already holding this rank's values.
  Tensor buffer = on_gpu(floats(n * s, [&](i64 j) { return j / n == r ? r * 1000 + j % n : -1; }));
  comm().allgather(buffer.flat_slice(r * n, n), buffer);
  EXPECT_EQ(buffer.to_host<float>(), expected);
}

TEST_F(Nccl, BroadcastFromTheLastRank) {
  const int root = size() - 1;
  const i64 n = 3001;
  Tensor t = on_gpu(floats(n, [&](i64 i) { return rank() == root ? 7 * i + 3 : -1; }));
  comm().broadcast(t, {root});
  EXPECT_EQ(t.to_host<float>(), floats(n, [](i64 i) { return 7 * i + 3; }));
}

TEST_F(Nccl, AlltoallExchangesBlocks) {
  const i64 s = size(), r = rank(), n = 33;  // elements per block
  // Block p of my input goes to rank p; block p of my output comes from rank p.
  Tensor in = on_gpu(floats(n * s, [&](i64 j) { return r * 1000 + (j / n) * 10 + j % n; }));
  Tensor out = Tensor::empty({n * s}, DType::F32, ctx());
  comm().alltoall(in, out);
  EXPECT_EQ(out.to_host<float>(), floats(n * s, [&](i64 j) { return (j / n) * 1000 + r * 10 + j % n; }));
}

TEST_F(Nccl, SendRecvBetweenPairs) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks";
  const int partner = rank() ^ 1;
  if (partner >= size()) return;  // the last rank of an odd count has no partner
  const i64 n = (i64{1} << 18) + 5;  // large enough to need the receiver (no eager completion)
  Tensor mine = on_gpu(floats(n, [&](i64 i) { return rank() * 100 + i % 1000; }));
  Tensor theirs = Tensor::empty({n}, DType::F32, ctx());
  // NCCL matches sends and receives in issue order and a send holds the stream until the peer
  // receives: even ranks send first, odd ranks receive first.
  WorkPtr first, second;
  if (rank() % 2 == 0) {
    first = comm().send_async(mine, partner);
    second = comm().recv_async(theirs, partner);
  } else {
    first = comm().recv_async(theirs, partner);
    second = comm().send_async(mine, partner);
  }
  first->wait();
  second->wait();
  EXPECT_EQ(theirs.to_host<float>(), floats(n, [&](i64 i) { return partner * 100 + i % 1000; }));
}

// Every rank sends to the next and receives from the previous in one batch, the send listed first:
// as single ops every rank's send would hold its stream until the next rank received, and none
// would. Large enough to need the receiver.
TEST_F(Nccl, BatchRingSendsBeforeReceiving) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks";
  const int next = (rank() + 1) % size(), prev = (rank() + size() - 1) % size();
  const i64 n = (i64{1} << 20) + 7;
  Tensor mine = on_gpu(floats(n, [&](i64 i) { return rank() * 1000 + i % 999; }));
  Tensor theirs = on_gpu(floats(n, [](i64) { return -1; }));
  WorkPtr work = comm().batch_async({PointToPoint::send(mine, next), PointToPoint::recv(theirs, prev)});
  work->wait();
  EXPECT_EQ(theirs.to_host<float>(), floats(n, [&](i64 i) { return prev * 1000 + i % 999; }));
  EXPECT_EQ(mine.to_host<float>(), floats(n, [&](i64 i) { return rank() * 1000 + i % 999; }));
}

// Pairs exchange both ways, both listing the send first, over a few rounds.
TEST_F(Nccl, BatchPairExchangesBothWays) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks";
  const int partner = rank() ^ 1;
  if (partner >= size()) return;  // the last rank of an odd count has no partner
  for (int round = 0; round < 3; ++round) {
    const i64 n = (i64{1} << 18) + round;
    Tensor mine = on_gpu(floats(n, [&](i64 i) { return rank() * 100 + round * 10 + i % 7; }));
    Tensor theirs = on_gpu(floats(n, [](i64) { return -1; }));
    comm().batch({PointToPoint::send(mine, partner), PointToPoint::recv(theirs, partner)});
    EXPECT_EQ(theirs.to_host<float>(), floats(n, [&](i64 i) { return partner * 100 + round * 10 + i % 7; }))
        << "round " << round;
  }
}

// Several messages to one peer, of mixed sizes and dtypes, matched in issue order (NCCL has no
// tags): each rank lists its sends, then its receives, in the same order as its partner.
TEST_F(Nccl, BatchSeveralMessagesToOnePeerInOrder) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks";
  const int partner = rank() ^ 1;
  if (partner >= size()) return;
  const std::vector<i64> sizes{3, (i64{1} << 19) + 1, 1, 70001};
  auto value = [](int from, std::size_t k, i64 i) { return from * 64 + static_cast<i64>(k) * 8 + i % 8; };
  std::vector<PointToPoint> batch;
  std::vector<Tensor> in;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    if (k == 2) {  // one bf16 message among the fp32 ones
      std::vector<bf16> v;
      for (i64 i = 0; i < sizes[k]; ++i) v.push_back(bf16::from_float(static_cast<float>(value(rank(), k, i))));
      batch.push_back(PointToPoint::send(on_gpu(v), partner));
      in.push_back(on_gpu(std::vector<bf16>(static_cast<std::size_t>(sizes[k]), bf16::from_float(-1))));
    } else {
      batch.push_back(PointToPoint::send(on_gpu(floats(sizes[k], [&](i64 i) { return value(rank(), k, i); })), partner));
      in.push_back(on_gpu(floats(sizes[k], [](i64) { return -1; })));
    }
  }
  for (const Tensor& t : in) batch.push_back(PointToPoint::recv(t, partner));
  comm().batch(std::move(batch));
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    std::vector<float> got;
    if (k == 2) {
      for (bf16 x : in[k].to_host<bf16>()) got.push_back(x.to_float());
    } else {
      got = in[k].to_host<float>();
    }
    EXPECT_EQ(got, floats(sizes[k], [&](i64 i) { return value(partner, k, i); })) << "message " << k;
  }
}

// wait_on orders later compute after the batch's receives, without blocking the host.
TEST_F(Nccl, BatchWaitOnOrdersTheComputeStream) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks";
  const int next = (rank() + 1) % size(), prev = (rank() + size() - 1) % size();
  const i64 n = i64{1} << 22;
  Tensor mine = on_gpu(floats(n, [&](i64 i) { return rank() + i % 13; }));
  Tensor theirs = on_gpu(floats(n, [](i64) { return -1; }));
  WorkPtr work = comm().batch_async({PointToPoint::recv(theirs, prev), PointToPoint::send(mine, next)});
  work->wait_on(ctx().stream());
  kernels::scale(ctx(), theirs, 2.0);  // queued on the compute stream, after the receive
  ctx().synchronize();
  EXPECT_EQ(theirs.to_host<float>(), floats(n, [&](i64 i) { return 2 * (prev + i % 13); }));
  EXPECT_NO_THROW(work->wait());
}

TEST_F(Nccl, BarrierCompletes) {
  comm().barrier();
  WorkPtr work = comm().barrier_async();
  work->wait();
  EXPECT_TRUE(work->test());
  EXPECT_EQ(work->error(), nullptr);
}

TEST_F(Nccl, WaitOnOrdersTheComputeStreamAfterTheOp) {
  const i64 s = size(), r = rank(), n = i64{1} << 22;
  Tensor t = on_gpu(floats(n, [&](i64 i) { return r + i % 13; }));
  WorkPtr work = comm().allreduce_async(t, t);
  work->wait_on(ctx().stream());  // the host does not block here
  kernels::scale(ctx(), t, 2.0);  // queued on the compute stream, after the allreduce
  ctx().synchronize();
  EXPECT_EQ(t.to_host<float>(), floats(n, [&](i64 i) { return 2 * (s * (i % 13) + s * (s - 1) / 2); }));
  EXPECT_TRUE(work->test());
  EXPECT_NO_THROW(work->wait());
}

TEST_F(Nccl, SplitIntoEvenAndOddRanks) {
  std::vector<int> members;
  for (int q = rank() % 2; q < size(); q += 2) members.push_back(q);
  std::unique_ptr<Communicator> group = comm().split(members);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->backend_name(), "nccl");
  EXPECT_EQ(group->size(), static_cast<int>(members.size()));
  EXPECT_EQ(group->world_ranks(), members);
  Tensor t = on_gpu(std::vector<float>(100, static_cast<float>(rank())));
  group->allreduce(t);
  float expected = 0;
  for (int q : members) expected += static_cast<float>(q);
  EXPECT_EQ(t.to_host<float>(), std::vector<float>(100, expected));
}

TEST_F(Nccl, SplitWithARankLeftOut) {
  // The last rank joins no group and gets nullptr; the others form one group.
  std::vector<int> members;
  if (rank() != size() - 1) {
    for (int q = 0; q < size() - 1; ++q) members.push_back(q);
  }
  std::unique_ptr<Communicator> group = comm().split(members);
  if (rank() == size() - 1) {
    EXPECT_EQ(group, nullptr);
    return;
  }
  ASSERT_NE(group, nullptr);
  Tensor t = on_gpu(std::vector<float>(10, 1.0f));
  group->allreduce(t);
  EXPECT_EQ(t.to_host<float>(), std::vector<float>(10, static_cast<float>(size() - 1)));
}

}  // namespace
}  // namespace mt
