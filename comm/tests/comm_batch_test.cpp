// Batches of point-to-point messages (Communicator::batch_async) on the MPI backend: neighbours that
// each send before receiving in one batch, several messages to one peer matched in order, mixed
// sizes and dtypes, device tensors staged, the checks that refuse a bad batch before anything
// starts, the description reports give, and a timed-out wait naming the batch.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "runtime/error.h"
#include "tests/gpu_skip.h"
#include "tests/test_env.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::test_context;
using testing::test_world;
using i64 = std::int64_t;

// n values f(i) as a tensor of `dtype` (all values exact in every dtype), on the CPU by default.
template <class F>
Tensor filled(i64 n, DType dtype, F&& f, DeviceContext& ctx = test_context()) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (i64 i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(f(i));
  if (dtype == DType::I32) return Tensor::from_host(std::vector<std::int32_t>(v.begin(), v.end()), {n}, ctx);
  if (dtype == DType::BF16) {
    std::vector<bf16> b;
    for (float x : v) b.push_back(bf16::from_float(x));
    return Tensor::from_host(b, {n}, ctx);
  }
  return Tensor::from_host(v, {n}, ctx);
}

std::vector<float> values_of(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.to_host<float>();
  std::vector<float> out;
  if (t.dtype() == DType::I32) {
    for (std::int32_t x : t.to_host<std::int32_t>()) out.push_back(static_cast<float>(x));
  } else {
    for (bf16 x : t.to_host<bf16>()) out.push_back(x.to_float());
  }
  return out;
}

template <class F>
std::vector<float> expected(i64 n, F&& f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (i64 i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(f(i));
  return v;
}

// Every rank sends to the next and receives from the previous in one batch, the send listed first:
// with blocking sends every rank would wait in its send. 1 MiB, past MPI's eager limit.
TEST(Batch, RingSendsBeforeReceivingInOneBatch) {
  Communicator& world = test_world();
  const int n = world.size(), r = world.rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const i64 count = i64{1} << 18;
  Tensor out = filled(count, DType::F32, [&](i64 i) { return r * 1000 + i % 999; });
  Tensor in = filled(count, DType::F32, [](i64) { return -1; });
  WorkPtr work = world.batch_async({PointToPoint::send(out, next, 3), PointToPoint::recv(in, prev, 3)});
  work->wait();
  EXPECT_TRUE(work->test());
  EXPECT_EQ(values_of(in), expected(count, [&](i64 i) { return prev * 1000 + i % 999; }));
}

// Pairs (0,1), (2,3), ... exchange both ways, each listing its send first; several rounds, so
// the batches of one pair follow each other in order.
TEST(Batch, APairExchangesBothWays) {
  Communicator& world = test_world();
  const int r = world.rank(), partner = r ^ 1;
  if (partner >= world.size()) GTEST_SKIP() << "no partner for the last rank of an odd count";
  for (int round = 0; round < 3; ++round) {
    const i64 count = (i64{1} << 16) + round;
    Tensor out = filled(count, DType::F32, [&](i64 i) { return r * 100 + round * 10 + i % 7; });
    Tensor in = filled(count, DType::F32, [](i64) { return -1; });
    world.batch({PointToPoint::send(out, partner), PointToPoint::recv(in, partner)});
    EXPECT_EQ(values_of(in), expected(count, [&](i64 i) { return partner * 100 + round * 10 + i % 7; }))
        << "round " << round;
  }
}

// Several messages to one peer, of mixed sizes and dtypes: with distinct tags, and with one tag
// shared by all (then matched by issue order alone).
TEST(Batch, SeveralMessagesToOnePeerMatchInOrder) {
  Communicator& world = test_world();
  const int r = world.rank(), partner = r ^ 1;
  if (partner >= world.size()) GTEST_SKIP() << "no partner for the last rank of an odd count";
  const std::vector<i64> sizes{5, (i64{1} << 17) + 3, 1, 4099};
  const std::vector<DType> dtypes{DType::F32, DType::BF16, DType::I32, DType::F32};
  for (const bool one_tag : {false, true}) {
    std::vector<Tensor> in;
    std::vector<PointToPoint> batch;
    // The values name the sender and the message: a message landing in another's slot shows.
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const int tag = one_tag ? 4 : 10 + static_cast<int>(k);
      batch.push_back(PointToPoint::send(filled(sizes[k], dtypes[k], [&](i64 i) { return r * 64 + static_cast<i64>(k) * 8 + i % 8; }),
                                         partner, tag));
      in.push_back(filled(sizes[k], dtypes[k], [](i64) { return -1; }));
    }
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      batch.push_back(PointToPoint::recv(in[k], partner, one_tag ? 4 : 10 + static_cast<int>(k)));
    }
    world.batch(std::move(batch));
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_EQ(values_of(in[k]), expected(sizes[k], [&](i64 i) { return partner * 64 + static_cast<i64>(k) * 8 + i % 8; }))
          << "message " << k << (one_tag ? " (one tag)" : " (distinct tags)");
    }
  }
}

// Every rank exchanges with every other in one batch: all sends first, then all receives.
TEST(Batch, EveryPairAtOnce) {
  Communicator& world = test_world();
  const int n = world.size(), r = world.rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<PointToPoint> batch;
  std::vector<Tensor> in(static_cast<std::size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p != r) batch.push_back(PointToPoint::send(filled(100 + p, DType::I32, [&](i64 i) { return r * 10 + p + i; }), p));
  }
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    in[static_cast<std::size_t>(p)] = filled(100 + r, DType::I32, [](i64) { return -1; });
    batch.push_back(PointToPoint::recv(in[static_cast<std::size_t>(p)], p));
  }
  world.batch(std::move(batch));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    EXPECT_EQ(values_of(in[static_cast<std::size_t>(p)]), expected(100 + r, [&](i64 i) { return p * 10 + r + i; })) << "from " << p;
  }
}

// Device tensors go through pinned host buffers (MemoryAccess::Staged), copied back once the
// batch is done. The ranks may share a GPU: MPI never touches it.
TEST(Batch, DeviceTensorsAreStaged) {
  MT_SKIP_WITHOUT_GPU();
  Communicator& world = test_world();
  const int n = world.size(), r = world.rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  const auto gpus = static_cast<int>(testing::test_device_discovery().gpus.size());
  DeviceContext gpu(DeviceOptions{Device::cuda(r % gpus), 0, 1});
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const i64 count = (i64{1} << 16) + 1;
  Tensor out = filled(count, DType::F32, [&](i64 i) { return r * 1000 + i % 999; }, gpu);
  Tensor in = filled(count, DType::F32, [](i64) { return -1; }, gpu);
  world.batch({PointToPoint::send(out, next, 1), PointToPoint::recv(in, prev, 1)});
  EXPECT_EQ(values_of(in), expected(count, [&](i64 i) { return prev * 1000 + i % 999; }));
  EXPECT_EQ(values_of(out), expected(count, [&](i64 i) { return r * 1000 + i % 999; })) << "a send leaves its tensor alone";
}

// Refused before anything starts, naming the message and what is wrong; the next op still matches.
TEST(Batch, BadMessagesAreRefusedClearly) {
  Communicator& world = test_world();
  const int n = world.size(), r = world.rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks (a single rank has no other peer)";
  const int other = (r + 1) % n;
  Tensor t = filled(8, DType::F32, [](i64) { return 0; });
  auto refusal = [&](std::vector<PointToPoint> batch) {
    return testing::error_of<InternalError>([&] { world.batch_async(std::move(batch)); });
  };
  std::string why = refusal({PointToPoint::send(t, other), PointToPoint::recv(t.flat_slice(0, 4), r, 2)});
  EXPECT_TRUE(contains(why, "p2p batch message 1 (recv from " + std::to_string(r) + " tag 2)")) << why;
  EXPECT_TRUE(contains(why, "the peer is this rank")) << why;
  why = refusal({PointToPoint::send(t, n)});
  EXPECT_TRUE(contains(why, "peer " + std::to_string(n) + " outside a group of " + std::to_string(n))) << why;
  why = refusal({PointToPoint::send(t, -1)});
  EXPECT_TRUE(contains(why, "outside a group")) << why;
  why = refusal({PointToPoint::send(t, other, 1 << 15)});
  EXPECT_TRUE(contains(why, "tag 32768 outside [0, 32768)")) << why;
  why = refusal({PointToPoint::recv(Tensor(), other)});
  EXPECT_TRUE(contains(why, "no tensor")) << why;
  // A receive may not overlap another message's tensor (a send of it, or a second receive).
  Tensor storage = filled(16, DType::F32, [](i64) { return 0; });
  why = refusal({PointToPoint::send(storage.flat_slice(0, 8), other), PointToPoint::recv(storage.flat_slice(4, 8), other)});
  EXPECT_TRUE(contains(why, "receives into memory that p2p batch message 0")) << why;
  EXPECT_THROW(world.batch_async({PointToPoint::recv(storage, other, 1), PointToPoint::recv(storage.flat_slice(15, 1), other, 2)}),
               InternalError);
  // Nothing was started: the next op still matches across ranks.
  Tensor x = filled(1, DType::F32, [](i64) { return 1; });
  world.allreduce(x);
  EXPECT_EQ(x.to_host<float>()[0], static_cast<float>(n));
}

// An empty batch is a Work already done (a pipeline step with nothing to exchange).
TEST(Batch, AnEmptyBatchIsDoneAtOnce) {
  Communicator& world = test_world();
  WorkPtr work = world.batch_async({});
  EXPECT_TRUE(work->test());
  EXPECT_NO_THROW(work->wait(std::chrono::milliseconds(0)));
  EXPECT_EQ(work->error(), nullptr);
  EXPECT_NO_THROW(world.batch({}));
}

// One numbered op among the point-to-point ones, described with its messages.
TEST(Batch, IsOneNumberedPointToPointOp) {
  Communicator& world = test_world();
  const int r = world.rank(), partner = r ^ 1;
  if (partner >= world.size()) GTEST_SKIP() << "no partner for the last rank of an odd count";
  Tensor a = filled(4096, DType::F32, [](i64) { return 1; });
  Tensor b = filled(4096, DType::F32, [](i64) { return 2; });
  const bool sends = r % 2 == 0;
  WorkPtr single = sends ? world.send_async(a, partner, {5}) : world.recv_async(a, partner, {5});
  const int out_tag = sends ? 3 : 8, in_tag = sends ? 8 : 3;
  WorkPtr batch = world.batch_async({PointToPoint::send(b, partner, out_tag), PointToPoint::recv(a, partner, in_tag)});
  single->wait();
  batch->wait();
  EXPECT_EQ(batch->record().sequence, single->record().sequence + 1);
  EXPECT_EQ(batch->record().kind, CollectiveKind::Batch);
  EXPECT_EQ(batch->record().bytes, 2u * 4096 * 4);
  const std::string text = batch->describe();
  EXPECT_EQ(text, "p2p batch #" + std::to_string(batch->record().sequence) + " (32.0 KiB): send fp32 x 4096 to " +
                      std::to_string(partner) + " tag " + std::to_string(out_tag) + ", recv fp32 x 4096 from " +
                      std::to_string(partner) + " tag " + std::to_string(in_tag) + " in a group of " +
                      std::to_string(world.size()))
      << text;
}

TEST(Batch, ALongBatchIsDescribedShort) {
  OpRecord r;
  r.kind = CollectiveKind::Batch;
  r.sequence = 7;
  r.bytes = 6 * 16;
  r.group_size = 3;
  for (int k = 0; k < 6; ++k) r.messages.push_back(MessageRecord{k % 2 == 0, DType::BF16, 8, 1 + k % 2, k});
  EXPECT_EQ(r.describe(),
            "p2p batch #7 (96 B): send bf16 x 8 to 1 tag 0, recv bf16 x 8 from 2 tag 1, send bf16 x 8 to 1 tag 2, "
            "recv bf16 x 8 from 2 tag 3, and 2 more in a group of 3");
}

// A wait that times out names the batch and its messages; the batch still completes later.
TEST(Batch, ATimedOutWaitNamesTheBatch) {
  Communicator& world = test_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor in = filled(2, DType::I32, [](i64) { return 0; });
  if (world.rank() == 0) {
    WorkPtr w = world.batch_async({PointToPoint::send(filled(3, DType::F32, [](i64) { return 9; }), 1, 76),
                                   PointToPoint::recv(in, 1, 77)});
    try {
      w->wait(std::chrono::milliseconds(100));
      FAIL() << "a batch completed whose peer never posted its side";
    } catch (const TimeoutError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(contains(what, "p2p batch #")) << what;
      EXPECT_TRUE(contains(what, "send fp32 x 3 to 1 tag 76, recv int32 x 2 from 1 tag 77")) << what;
    }
    world.barrier();  // now rank 1 posts its side
    w->wait();
    EXPECT_EQ(values_of(in), (std::vector<float>{5, 6}));
  } else {
    world.barrier();
    if (world.rank() == 1) {
      Tensor got = filled(3, DType::F32, [](i64) { return 0; });
      world.batch({PointToPoint::recv(got, 0, 76), PointToPoint::send(Tensor::from_host(std::vector<std::int32_t>{5, 6}, {2}, test_context()), 0, 77)});
      EXPECT_EQ(values_of(got), (std::vector<float>{9, 9, 9}));
    }
  }
}

// Batches, like single sends and receives, stay out of --debug-collectives' group-wide check: only
// ranks 0 and 1 exchange while the others go straight on. A check would pair their exchange with
// the others' barrier check and report a desync.
TEST(Batch, DebugCollectivesLeavesBatchesToTheirPeers) {
  auto world = MpiCommunicator::world(CommOptions{.timeout = std::chrono::seconds(60), .debug_collectives = true});
  const int r = world->rank();
  if (world->size() < 2) GTEST_SKIP() << "needs two ranks";
  if (r < 2) {
    Tensor out = filled(16, DType::F32, [&](i64) { return r + 1; });
    Tensor in = filled(16, DType::F32, [](i64) { return 0; });
    world->batch({PointToPoint::send(out, 1 - r), PointToPoint::recv(in, 1 - r)});
    EXPECT_EQ(values_of(in)[0], static_cast<float>(2 - r));
  }
  world->barrier();
}

}  // namespace
}  // namespace mt
