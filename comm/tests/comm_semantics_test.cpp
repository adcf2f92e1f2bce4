// Communicator behaviour beyond the values: splitting into groups, sequence numbers, argument
// checks, waiting with a timeout, and the error every member sees for inconsistent groups.
#include <gtest/gtest.h>

#include <numeric>

#include "comm/communicator.h"
#include "runtime/error.h"
#include "runtime/kernels.h"
#include "tests/test_env.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::test_context;
using testing::test_group;
using testing::test_world;

Tensor ints(std::vector<std::int32_t> values) {
  const auto n = static_cast<std::int64_t>(values.size());
  return Tensor::from_host(values, {n}, test_context());
}

TEST(Split, GroupsOfTwoFollowTheMemberOrder) {
  Communicator& world = test_world();
  // Pairs (0,1), (2,3), ... listed in reverse, so new rank 0 is the higher world rank.
  const int base = world.rank() / 2 * 2;
  std::vector<int> members;
  if (base + 1 < world.size()) {
    members = {base + 1, base};
  } else {
    members = {base};
  }
  auto pair = world.split(members);
  ASSERT_NE(pair, nullptr);
  EXPECT_EQ(pair->size(), static_cast<int>(members.size()));
  EXPECT_EQ(pair->world_ranks(), members);
  const int expected_rank = static_cast<int>(std::find(members.begin(), members.end(), world.rank()) - members.begin());
  EXPECT_EQ(pair->rank(), expected_rank);
  // The group reduces over its members only.
  Tensor t = ints({world.rank()});
  pair->allreduce(t);
  const int want = std::accumulate(members.begin(), members.end(), 0);
  EXPECT_EQ(t.to_host<std::int32_t>()[0], want);
}

TEST(Split, EmptyListJoinsNoGroup) {
  Communicator& world = test_world();
  std::vector<int> members;
  if (world.rank() != 0) {
    for (int r = 1; r < world.size(); ++r) members.push_back(r);
  }
  auto group = world.split(members);
  if (world.rank() == 0) {
    EXPECT_EQ(group, nullptr);
  } else {
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->size(), world.size() - 1);
  }
}

TEST(Split, NestedSplitOfASubgroup) {
  Communicator& world = test_world();
  std::vector<int> all(static_cast<std::size_t>(world.size()));
  std::iota(all.begin(), all.end(), 0);
  auto copy = world.split(all);
  ASSERT_NE(copy, nullptr);
  auto single = copy->split({copy->rank()});
  ASSERT_NE(single, nullptr);
  EXPECT_EQ(single->size(), 1);
  EXPECT_EQ(single->world_ranks(), std::vector<int>{world.rank()});
}

TEST(Split, DisagreeingMemberListsFailOnEveryMember) {
  Communicator& world = test_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  // Ranks 0 and 1 both name a group led by 0, but with different members.
  std::vector<int> members;
  if (world.rank() == 0) members = {0, 1};
  if (world.rank() == 1) members = {1, 0};
  if (world.rank() >= 2) members = {world.rank()};
  if (world.rank() <= 1) {
    try {
      world.split(members);
      FAIL() << "inconsistent member lists were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("different member lists"), std::string::npos) << e.what();
    }
  } else {
    EXPECT_NE(world.split(members), nullptr);
  }
}

TEST(Split, RejectsBadListsLocally) {
  Communicator& world = test_world();
  EXPECT_THROW(world.split({world.rank(), world.rank()}), Error);
  EXPECT_THROW(world.split({world.size()}), Error);
  if (world.size() > 1) {
    EXPECT_THROW(world.split({(world.rank() + 1) % world.size()}), Error);
  }
}

TEST(Sequence, CollectivesAreNumberedInOrder) {
  Communicator& world = test_world();
  Tensor t = ints({1});
  WorkPtr a = world.allreduce_async(t, t);
  WorkPtr b = world.barrier_async();
  a->wait();
  b->wait();
  EXPECT_EQ(b->record().sequence, a->record().sequence + 1);
  EXPECT_EQ(world.collectives_issued(), b->record().sequence + 1);
  EXPECT_NE(a->describe().find("allreduce #"), std::string::npos) << a->describe();
}

TEST(Validation, WrongSizesAreClearErrorsBeforeAnyCommunication) {
  Communicator& world = test_world();
  const int n = world.size();
  Tensor in = Tensor::zeros({4 * n + 1}, DType::F32, test_context());
  Tensor out = Tensor::zeros({4}, DType::F32, test_context());
  try {
    world.reduce_scatter_async(in, out);
    FAIL() << "mismatched reduce_scatter sizes were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter"), std::string::npos) << e.what();
  }
  EXPECT_THROW(world.allgather_async(out, in), Error);
  EXPECT_THROW(world.allreduce_async(in, out), Error);
  Tensor i32 = Tensor::zeros({4}, DType::I32, test_context());
  EXPECT_THROW(world.allreduce_async(out, i32), Error);  // dtypes differ
  EXPECT_THROW(world.broadcast_async(out, {n}), Error);  // root outside the group
  EXPECT_THROW(world.send_async(out, n), Error);         // peer outside the group
  EXPECT_THROW(world.send_async(out, 0, {1 << 20}), Error);
  // Nothing was started: the next collective still matches across ranks.
  Tensor t = ints({1});
  world.allreduce(t);
  EXPECT_EQ(t.to_host<std::int32_t>()[0], n);
}

TEST(Validation, OverlappingAlltoallBuffersAreRefused) {
  Communicator& world = test_world();
  const int n = world.size();
  Tensor storage = Tensor::zeros({3 * n}, DType::F32, test_context());
  EXPECT_THROW(world.alltoall_async(storage.flat_slice(0, 2 * n), storage.flat_slice(n, 2 * n)), Error);
  EXPECT_THROW(world.alltoall_async(storage.flat_slice(0, n), storage.flat_slice(0, n)), Error);
  // Disjoint windows of one storage are fine.
  Tensor in = storage.flat_slice(0, n);
  Tensor out = storage.flat_slice(n, n);
  kernels::fill(test_context(), in, world.rank());
  world.alltoall(in, out);
  std::vector<float> got = out.to_host<float>();
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<std::size_t>(r)], static_cast<float>(r));
}

TEST(Lifetime, DroppingASubgroupWithAnOpInFlightIsSafe) {
  // Each op holds its communicator alive: destroying the Communicator right after launching is fine.
  Communicator& world = test_world();
  std::vector<int> all(static_cast<std::size_t>(world.size()));
  std::iota(all.begin(), all.end(), 0);
  for (int round = 0; round < 10; ++round) {
    auto sub = world.split(all);
    Tensor t = Tensor::zeros({1 << 16}, DType::F32, test_context());
    kernels::fill(test_context(), t, 1.0);
    WorkPtr work = sub->allreduce_async(t, t);
    sub.reset();
    work->wait();
    EXPECT_EQ(kernels::reduce(test_context(), ReduceKind::Min, t), world.size());
  }
}

TEST(Errors, ATruncatedReceiveFailsItsWork) {
  Communicator& world = test_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  if (world.rank() == 0) {
    Tensor small = ints({0, 0});
    WorkPtr r = world.recv_async(small, 1, {9});
    try {
      r->wait();
      FAIL() << "a 4-element message was received into 2 elements without an error";
    } catch (const Error& e) {
      EXPECT_TRUE(testing::contains(e.what(), "recv")) << e.what();
      EXPECT_TRUE(testing::contains(e.what(), "TRUNCATE") || testing::contains(e.what(), "truncat")) << e.what();
    }
  } else if (world.rank() == 1) {
    world.send(ints({1, 2, 3, 4}), 0, {9});
  }
  world.barrier();
}

TEST(Wait, TimesOutWithTheOperationNamedThenCompletesLater) {
  Communicator& world = test_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = ints({0, 0});
  if (world.rank() == 0) {
    WorkPtr r = world.recv_async(t, 1, {77});
    EXPECT_FALSE(r->test());
    try {
      r->wait(std::chrono::milliseconds(100));
      FAIL() << "a receive nobody sent completed";
    } catch (const TimeoutError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("recv"), std::string::npos) << what;
      EXPECT_NE(what.find("from 1"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
    }
    world.barrier();  // now rank 1 sends
    r->wait();
    EXPECT_EQ(t.to_host<std::int32_t>(), (std::vector<std::int32_t>{5, 6}));
  } else {
    world.barrier();
    if (world.rank() == 1) world.send(ints({5, 6}), 0, {77});
  }
}

TEST(PointToPoint, TagsKeepMessagesApart) {
  Communicator& world = test_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  if (world.rank() == 0) {
    Tensor a = ints({0});
    Tensor b = ints({0});
    // Posted in the opposite order to the sends: matching is by tag, not by arrival.
    WorkPtr rb = world.recv_async(b, 1, {2});
    WorkPtr ra = world.recv_async(a, 1, {1});
    ra->wait();
    rb->wait();
    EXPECT_EQ(a.to_host<std::int32_t>()[0], 10);
    EXPECT_EQ(b.to_host<std::int32_t>()[0], 20);
  } else if (world.rank() == 1) {
    WorkPtr sa = world.send_async(ints({10}), 0, {1});
    WorkPtr sb = world.send_async(ints({20}), 0, {2});
    sa->wait();
    sb->wait();
  }
  world.barrier();
}

// The MPI backend's answers (comm/comm_capabilities.h), which the pipeline acts on: its groups
// answer alike, and the two point-to-point claims hold for messages past the eager limit.
TEST(Capabilities, MpiPostsEarlyAndSendsInEitherOrderOnHostAndStagedDeviceMemory) {
  Communicator& world = test_world();
  std::vector<int> everyone(static_cast<std::size_t>(world.size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  Communicator* group = test_group("capabilities", everyone);
  ASSERT_NE(group, nullptr);
  for (const CommCapabilities& caps : {world.capabilities(), group->capabilities()}) {
    EXPECT_TRUE(caps.early_receives);
    EXPECT_TRUE(caps.unordered_point_to_point);
    EXPECT_TRUE(caps.grouped_point_to_point);  // batches: comm_batch_test.cpp
    EXPECT_EQ(caps.host_memory, MemoryAccess::Direct);
    EXPECT_EQ(caps.device_memory, MemoryAccess::Staged);
  }
  if (world.size() < 2) return;
  // Every rank posts its receive first, then sends to its right neighbour and receives from its
  // left (early receive); then every rank sends before it receives (unordered). 1 MiB per message.
  const int right = (world.rank() + 1) % world.size();
  const int left = (world.rank() + world.size() - 1) % world.size();
  const std::int64_t n = 1 << 18;
  for (const bool receive_first : {true, false}) {
    Tensor out = ints(std::vector<std::int32_t>(static_cast<std::size_t>(n), world.rank()));
    Tensor in = ints(std::vector<std::int32_t>(static_cast<std::size_t>(n), -1));
    WorkPtr recv = receive_first ? world.recv_async(in, left, {3}) : nullptr;
    WorkPtr send = world.send_async(out, right, {3});
    if (!receive_first) recv = world.recv_async(in, left, {3});
    send->wait();
    recv->wait();
    EXPECT_EQ(in.to_host<std::int32_t>()[n - 1], left);
  }
}

TEST(Async, ManyOutstandingCollectivesCompleteInOrder) {
  Communicator& world = test_world();
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 32; ++i) {
    tensors.push_back(ints({i, world.rank()}));
    works.push_back(world.allreduce_async(tensors.back(), tensors.back()));
  }
  const int n = world.size();
  for (int i = 31; i >= 0; --i) {  // waited for in reverse: order of waits does not matter
    works[static_cast<std::size_t>(i)]->wait();
    EXPECT_EQ(tensors[static_cast<std::size_t>(i)].to_host<std::int32_t>(),
              (std::vector<std::int32_t>{i * n, n * (n - 1) / 2}));
  }
}

}  // namespace
}  // namespace mt
