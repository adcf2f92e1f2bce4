#include "parallel/pipeline_executor.h"

#include <chrono>
#include <set>

#include "runtime/error.h"

namespace mt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A stage's list as computations and the runs of messages between them: run n comes before
// computation n (the last run, after the last computation, has none after it).
struct StageList {
  std::vector<std::size_t> computes;
  std::vector<std::vector<std::size_t>> runs{1};
};

StageList split_list(const std::vector<Action>& actions) {
  StageList list;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (is_compute(actions[i].kind)) {
      list.computes.push_back(i);
      list.runs.emplace_back();
    } else {
      list.runs.back().push_back(i);
    }
  }
  return list;
}

BackwardPart backward_part(ActionKind kind) {
  if (kind == ActionKind::BackwardInput) return BackwardPart::Input;
  return kind == ActionKind::BackwardWeight ? BackwardPart::Weight : BackwardPart::Full;
}

}  // namespace

PipelineExecutor::PipelineExecutor(Communicator& pp, const Stream& stream, ExecutorOptions options)
    : pp_(pp),
      stream_(stream),
      options_(options),
      early_receives_(options.overlap && pp.capabilities().early_receives) {}

Tensor PipelineExecutor::message_tensor(const Action& a, PipelineStageRunner& runner) {
  switch (a.kind) {
    case ActionKind::RecvForward: return runner.forward_input(a.chunk, a.micro);
    case ActionKind::RecvBackward: return runner.output_grad_buffer(a.chunk, a.micro);
    case ActionKind::SendForward: return runner.forward_output(a.chunk, a.micro);
    case ActionKind::SendBackward: return runner.input_grad(a.chunk, a.micro);
    default: MT_FAIL("a computation carries no message: ", to_string(a, true));
  }
}

void PipelineExecutor::start_batch(const Schedule& schedule, const std::vector<std::size_t>& indices,
                                   PipelineStageRunner& runner, ExecutorStats& stats) {
  const int stage = pp_.rank();
  const std::vector<Action>& actions = schedule.actions[static_cast<std::size_t>(stage)];
  std::vector<PointToPoint> batch;
  std::vector<std::size_t> receives;
  for (std::size_t i : indices) {
    const Action& a = actions[i];
    const int peer = schedule.peer(stage, a).stage;
    Tensor tensor = message_tensor(a, runner);
    const int tag = schedule.tag(stage, a);
    if (peer == stage) {
      // A stage sending to itself copies: the send keeps its slot until the receive took the data.
      if (is_send(a.kind)) {
        self_sends_[tag] = {tensor, {a.chunk, a.micro}};
      } else {
        receives_[i] = Pending{nullptr, tensor};
      }
      continue;
    }
    batch.push_back({is_send(a.kind) ? PointToPoint::Kind::Send : PointToPoint::Kind::Recv, tensor, peer, tag});
    if (is_receive(a.kind)) receives.push_back(i);
  }
  if (batch.empty()) return;
  WorkPtr work = pp_.batch_async(std::move(batch));
  ++stats.batches;
  for (std::size_t i : indices) {
    const Action& a = actions[i];
    if (schedule.peer(stage, a).stage == stage) continue;
    // Never waited for on its own before the stage goes on: the slot is released (and the batch
    // waited for) once it completed (release_finished).
    if (is_send(a.kind)) sends_[{a.chunk, a.micro}].push_back(work);
  }
  for (std::size_t i : receives) receives_[i] = Pending{work, Tensor()};
}

void PipelineExecutor::finish_receive(const Schedule& schedule, std::size_t index, ExecutorStats& stats) {
  const int stage = pp_.rank();
  const Action& a = schedule.actions[static_cast<std::size_t>(stage)][index];
  Pending& p = receives_.at(index);
  const auto start = std::chrono::steady_clock::now();
  if (p.work) {
    p.work->wait_on(stream_);  // a batch's receives all complete together: later ones return at once
  } else {
    auto it = self_sends_.find(schedule.tag(stage, a));
    MT_CHECK(it != self_sends_.end(), "stage ", stage, ": ", to_string(a, true), " before its own send");
    p.staged.copy_from(it->second.data, stream_);
    self_sends_.erase(it);
  }
  stats.receive_wait_s += seconds_since(start);
  receives_.erase(index);
}

void PipelineExecutor::release_finished(PipelineStageRunner& runner, bool wait_all) {
  std::vector<std::pair<int, int>> still;
  for (const auto& key : done_) {
    auto it = sends_.find(key);
    bool finished = true;
    for (const auto& [tag, self] : self_sends_) finished = finished && self.from != key;  // not yet copied
    if (finished && it != sends_.end()) {
      for (const WorkPtr& w : it->second) {
        if (wait_all) {
          w->wait();
        } else if (!w->test()) {
          finished = false;
          break;
        }
      }
      if (finished) {
        for (const WorkPtr& w : it->second) w->wait();  // rethrows a failed send
        sends_.erase(it);
      }
    }
    if (finished) {
      runner.release(key.first, key.second);
    } else {
      still.push_back(key);
    }
  }
  done_ = std::move(still);
}

ExecutorStats PipelineExecutor::run(const Schedule& schedule, PipelineStageRunner& runner) {
  const int stage = pp_.rank();
  MT_CHECK(pp_.size() == schedule.stages, "a schedule for ", schedule.stages, " stages on a pipeline group of ",
           pp_.size());
  const std::vector<Action>& actions = schedule.actions[static_cast<std::size_t>(stage)];
  ExecutorStats stats;
  receives_.clear();
  self_sends_.clear();
  sends_.clear();
  done_.clear();
  const StageList list = split_list(actions);
  const std::vector<std::size_t>& computes = list.computes;
  const std::vector<std::vector<std::size_t>>& runs = list.runs;
  // Early receives (MPI with overlap): run n's receives are posted as one batch before computation
  // n - 1, so the transfer runs during it. A gradient's buffer exists only once its micro-batch's
  // forward ran, so such a receive waits for that (or for its run).
  std::set<std::pair<int, int>> forwarded;
  auto post_early = [&](std::size_t n) {
    if (!early_receives_ || n >= runs.size()) return;
    std::vector<std::size_t> postable;
    for (std::size_t k : runs[n]) {
      const Action& r = actions[k];
      if (!is_receive(r.kind) || receives_.count(k)) continue;
      if (r.kind == ActionKind::RecvBackward && !forwarded.count({r.chunk, r.micro})) continue;
      postable.push_back(k);
    }
    stats.receives_posted_early += static_cast<int>(postable.size());
    start_batch(schedule, postable, runner, stats);
  };
  // Run n: what was not posted early goes as one batch (sends with receives: NCCL groups them,
  // so neighbours sending to each other in the same run cannot block one another); then the
  // computation waits for the run's receives.
  auto execute_run = [&](std::size_t n) {
    std::vector<std::size_t> rest;
    for (std::size_t k : runs[n])
      if (!receives_.count(k)) rest.push_back(k);
    start_batch(schedule, rest, runner, stats);
    for (std::size_t k : runs[n])
      if (is_receive(actions[k].kind)) finish_receive(schedule, k, stats);
  };
  post_early(0);
  for (std::size_t n = 0; n < computes.size(); ++n) {
    execute_run(n);
    const Action& a = actions[computes[n]];
    post_early(n + 1);
    // In validation no backward holds a sending stage back: without a bound, the first stage
    // would forward every micro-batch of the batch, each slot held until the next stage takes
    // it. Waiting once `stages` slots are done bounds that, and cannot deadlock: the order of
    // computations is the same on every stage, and what is waited for are receives of earlier
    // computations, which depend only on computations earlier still (or earlier stages).
    release_finished(runner, schedule.forward_only && done_.size() >= static_cast<std::size_t>(schedule.stages));
    const auto start = std::chrono::steady_clock::now();
    if (a.kind == ActionKind::Forward) {
      runner.forward(a.chunk, a.micro);
      forwarded.insert({a.chunk, a.micro});
      post_early(n + 1);  // a gradient it now has a buffer for
    } else {
      runner.backward(a.chunk, a.micro, backward_part(a.kind), a.completes_chunk);
    }
    stats.compute_s += seconds_since(start);
    if (makes_weight_grad(a.kind) || schedule.forward_only) done_.push_back({a.chunk, a.micro});
  }
  execute_run(computes.size());
  release_finished(runner, true);
  MT_CHECK(receives_.empty() && self_sends_.empty(), "stage ", stage, ": the schedule left messages unmatched");
  return stats;
}

}  // namespace mt
