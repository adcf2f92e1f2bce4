// The executor decides from the pp communicator's capabilities, not its backend's name, whether it
// posts receives early. One stage with two model chunks sends to itself, so the run needs no MPI:
// the fake group below fails any operation that would reach a backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
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

// Stage `rank` of a pipeline whose peers are not there: every batch completes at once (receives
// leave their buffers as they are) and is recorded as "S1:5 R1:7" (send to 1 tag 5, receive ...).
class RecordingStage final : public Communicator {
 public:
  RecordingStage(int rank, int size, CommCapabilities caps) : Communicator(rank, size, CommOptions{}), caps_(caps) {}
  std::string backend_name() const override { return "recording"; }
  CommCapabilities capabilities() const override { return caps_; }
  std::vector<int> world_ranks() const override {
    std::vector<int> all(static_cast<std::size_t>(size()));
    for (int r = 0; r < size(); ++r) all[static_cast<std::size_t>(r)] = r;
    return all;
  }
  std::vector<std::string> batches;

 protected:
  WorkPtr launch(CollectiveDesc desc) override {
    MT_CHECK(desc.kind == CollectiveKind::Batch, "the executor sends batches only, not ", desc.describe());
    std::string text;
    for (const PointToPoint& m : desc.messages)
      text += (text.empty() ? "" : " ") + std::string(m.kind == PointToPoint::Kind::Send ? "S" : "R") +
              std::to_string(m.peer) + ":" + std::to_string(m.tag);
    batches.push_back(text);
    auto work = std::make_shared<Work>(std::move(desc), std::chrono::seconds(1));
    work->complete();
    return work;
  }
  std::unique_ptr<Communicator> split_by_color(int, int, const std::vector<int>&) override {
    MT_FAIL("no split expected");
  }
  void allgather_host_bytes(const void*, void*, std::size_t) override { MT_FAIL("no allgather expected"); }

 private:
  CommCapabilities caps_;
};

// The batches a stage should send: each run of messages between two computations, in list order.
std::vector<std::string> runs_of(const Schedule& s, int stage) {
  std::vector<std::string> runs(1);
  for (const Action& a : s.actions[static_cast<std::size_t>(stage)]) {
    if (is_compute(a.kind)) {
      if (!runs.back().empty()) runs.emplace_back();
      continue;
    }
    runs.back() += (runs.back().empty() ? "" : " ") + std::string(is_send(a.kind) ? "S" : "R") +
                   std::to_string(s.peer(stage, a).stage) + ":" + std::to_string(s.tag(stage, a));
  }
  if (runs.back().empty()) runs.pop_back();
  return runs;
}

std::vector<std::string> batches_sent(const Schedule& schedule, int stage, CommCapabilities caps, bool overlap) {
  DeviceContext ctx(DeviceOptions{});
  RecordingStage group(stage, schedule.stages, caps);
  TinyStage runner(ctx);
  PipelineExecutor executor(group, ctx.stream(), ExecutorOptions{.overlap = overlap});
  const ExecutorStats stats = executor.run(schedule, runner);
  EXPECT_EQ(stats.batches, static_cast<int>(group.batches.size()));
  return group.batches;
}

constexpr CommCapabilities kNcclLike{.grouped_point_to_point = true};

// What NCCL needs: each run between two computations is one batch, in the schedule's order, so a
// send-forward and the receive-backward after it (or the interleaved schedule's groups of up to
// four) go out together and neighbours cannot block each other.
TEST(PipelineExecutor, SendsEachRunOfMessagesAsOneBatch) {
  for (const Schedule& s : {make_schedule(ScheduleKind::OneFOneB, 4, 8), make_schedule(ScheduleKind::Interleaved, 4, 8, 2),
                            make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8), make_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 2),
                            make_forward_only_schedule(4, 8)}) {
    for (int stage = 0; stage < s.stages; ++stage) {
      SCOPED_TRACE(std::string(schedule_kind_name(s.kind)) + " stage " + std::to_string(stage));
      std::vector<std::string> expected = runs_of(s, stage);
      // Self-messages (the V's turn on the last stage) are copies, not messages.
      for (std::string& run : expected) {
        std::string kept;
        std::istringstream words(run);
        for (std::string w; words >> w;)
          if (std::stoi(w.substr(1, w.find(':') - 1)) != stage) kept += (kept.empty() ? "" : " ") + w;
        run = kept;
      }
      std::erase_if(expected, [](const std::string& run) { return run.empty(); });
      EXPECT_EQ(batches_sent(s, stage, kNcclLike, /*overlap=*/true), expected);
      // MPI without overlap posts exactly the same batches.
      EXPECT_EQ(batches_sent(s, stage, {.early_receives = true, .grouped_point_to_point = true}, /*overlap=*/false),
                expected);
    }
  }
  // 1F1B's steady state on a middle stage: the forward's send goes with the backward's receive.
  const Schedule one_f_one_b = make_schedule(ScheduleKind::OneFOneB, 4, 8);
  const std::vector<std::string> middle = batches_sent(one_f_one_b, 1, kNcclLike, true);
  EXPECT_NE(std::find_if(middle.begin(), middle.end(),
                         [](const std::string& b) { return b.find("S2:") != std::string::npos && b.find("R2:") != std::string::npos; }),
            middle.end());
}

// With early receives (MPI) a run's receives go one computation ahead, as a batch of their own.
TEST(PipelineExecutor, EarlyReceivesGoAheadAsTheirOwnBatch) {
  const Schedule s = make_schedule(ScheduleKind::OneFOneB, 4, 8);
  const std::vector<std::string> batches =
      batches_sent(s, 1, {.early_receives = true, .unordered_point_to_point = true, .grouped_point_to_point = true}, true);
  for (const std::string& b : batches) {
    const bool receives = b.find('R') != std::string::npos, sends = b.find('S') != std::string::npos;
    EXPECT_FALSE(receives && sends) << b;
  }
  EXPECT_GT(batches.size(), runs_of(s, 1).size());
}

}  // namespace
}  // namespace mt
