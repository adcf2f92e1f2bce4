// The executor decides from the pp communicator's capabilities, not its backend's name, whether it
// posts receives early. One stage with two model chunks sends to itself, so the run needs no MPI:
// the fake group below fails any operation that would reach a backend.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "parallel/pipeline_executor.h"
#include "parallel/schedule.h"
#include "runtime/context.h"
#include "runtime/error.h"

namespace mt {
namespace {

// A one-member pipeline group answering the given capabilities under a name that means nothing.
class OneStageGroup final : public Communicator {
 public:
  explicit OneStageGroup(CommCapabilities caps) : Communicator(0, 1, CommOptions{}), caps_(caps) {}
  std::string backend_name() const override { return "fake"; }
  CommCapabilities capabilities() const override { return caps_; }
  std::vector<int> world_ranks() const override { return {0}; }

 protected:
  WorkPtr launch(CollectiveDesc desc) override { MT_FAIL("one stage sends only to itself, not ", desc.describe()); }
  std::unique_ptr<Communicator> split_by_color(int, int, const std::vector<int>&) override {
    MT_FAIL("no split expected");
  }
  void allgather_host_bytes(const void*, void*, std::size_t) override { MT_FAIL("no allgather expected"); }

 private:
  CommCapabilities caps_;
};

// Four floats per message; computing is a no-op. Each (chunk, micro) slot keeps its buffers.
class TinyStage final : public PipelineStageRunner {
 public:
  explicit TinyStage(DeviceContext& ctx) : ctx_(ctx) {}
  Tensor forward_input(int chunk, int micro) override { return buffer(chunk, micro, 0); }
  void forward(int, int) override {}
  Tensor forward_output(int chunk, int micro) override { return buffer(chunk, micro, 1); }
  Tensor output_grad_buffer(int chunk, int micro) override { return buffer(chunk, micro, 2); }
  void backward(int, int, BackwardPart, bool) override {}
  Tensor input_grad(int chunk, int micro) override { return buffer(chunk, micro, 3); }
  void release(int, int) override {}

 private:
  Tensor buffer(int chunk, int micro, int which) {
    Tensor& t = buffers_[{chunk, micro, which}];
    if (!t.defined()) t = Tensor::zeros({4}, DType::F32, ctx_);
    return t;
  }
  DeviceContext& ctx_;
  std::map<std::tuple<int, int, int>, Tensor> buffers_;
};

int receives_posted_early(CommCapabilities caps, bool overlap) {
  DeviceContext ctx(DeviceOptions{});
  OneStageGroup group(caps);
  const Schedule schedule = make_schedule(ScheduleKind::Interleaved, 1, 2, 2);
  TinyStage stage(ctx);
  PipelineExecutor executor(group, ctx.stream(), ExecutorOptions{.overlap = overlap});
  return executor.run(schedule, stage).receives_posted_early;
}

TEST(PipelineExecutor, PostsReceivesEarlyWhenTheCommunicatorCan) {
  EXPECT_GT(receives_posted_early({.early_receives = true}, true), 0);
}

TEST(PipelineExecutor, KeepsReceivesInScheduleOrderWhenTheCommunicatorCannot) {
  EXPECT_EQ(receives_posted_early({.early_receives = false, .unordered_point_to_point = true}, true), 0);
}

TEST(PipelineExecutor, NoOverlapPostsNothingEarly) {
  EXPECT_EQ(receives_posted_early({.early_receives = true}, false), 0);
}

}  // namespace
}  // namespace mt
