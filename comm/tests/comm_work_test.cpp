// A finished op's Work keeps no tensor: once wait() returns, the caller's references are the last
// ones, so dropping them gives the memory back to the allocator at once, on the caller's thread,
// even while the Work itself is kept (a list of pending ops). What the op was stays describable.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tests/test_env.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::test_context;
using testing::test_world;

std::size_t in_use() { return test_context().allocator().stats().in_use; }

TEST(WorkTensors, CompleteDropsThemAndKeepsTheDescription) {
  const std::size_t before = in_use();
  Tensor t = Tensor::zeros({1000}, DType::F32, test_context());
  CollectiveDesc desc;
  desc.kind = CollectiveKind::Allreduce;
  desc.input = t;
  desc.output = t;
  desc.sequence = 7;
  Work work(std::move(desc), std::chrono::seconds(1));
  t = Tensor();
  EXPECT_GT(in_use(), before) << "a running op keeps its tensors alive";
  work.complete();
  EXPECT_EQ(in_use(), before) << "a finished op still holds its tensor";
  EXPECT_TRUE(contains(work.describe(), "allreduce #7 fp32 x 1000")) << work.describe();
  EXPECT_TRUE(work.record().in_place);
}

// Many times over: the backend's thread must have let go before the waiter wakes, not just after.
// Every rank runs every iteration (a rank leaving early would leave its peers waiting), then checks.
TEST(WorkTensors, AFinishedCollectiveHoldsNone) {
  Communicator& world = test_world();
  const std::size_t before = in_use();
  std::vector<WorkPtr> kept;  // like a caller's list of pending ops
  int held = 0;
  for (int i = 0; i < 200; ++i) {
    Tensor in = Tensor::zeros({64}, DType::F32, test_context());
    Tensor out = Tensor::zeros({64}, DType::F32, test_context());
    kept.push_back(world.allreduce_async(in, out));
    kept.back()->wait();
    in = Tensor();
    out = Tensor();
    held += in_use() != before ? 1 : 0;
  }
  EXPECT_EQ(held, 0) << "after that many allreduces of 200, the Work or the backend still held a tensor";
  const std::string text = kept.front()->describe();
  EXPECT_TRUE(contains(text, "allreduce #")) << text;
  EXPECT_TRUE(contains(text, "fp32 x 64")) << text;
}

TEST(WorkTensors, AFinishedBatchHoldsNone) {
  Communicator& world = test_world();
  const int r = world.rank(), partner = r ^ 1;
  if (partner >= world.size()) GTEST_SKIP() << "no partner for the last rank of an odd count";
  const std::size_t before = in_use();
  std::vector<WorkPtr> kept;
  int held = 0;
  for (int i = 0; i < 100; ++i) {
    Tensor a = Tensor::zeros({32}, DType::F32, test_context());
    Tensor b = Tensor::zeros({32}, DType::F32, test_context());
    kept.push_back(world.batch_async({PointToPoint::send(a, partner, 1), PointToPoint::recv(b, partner, 1)}));
    kept.back()->wait();
    a = Tensor();
    b = Tensor();
    held += in_use() != before ? 1 : 0;
  }
  EXPECT_EQ(held, 0) << "after that many batches of 100, the Work or the backend still held a tensor";
  const std::string text = kept.back()->describe();
  EXPECT_TRUE(contains(text, "send fp32 x 32 to " + std::to_string(partner))) << text;
}

}  // namespace
}  // namespace mt
