#include "parallel/pipeline_executor.h"

#include <chrono>
#include <set>

#include "runtime/error.h"

namespace mt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

PipelineExecutor::PipelineExecutor(Communicator& pp, const Stream& stream, ExecutorOptions options)
    : pp_(pp),
      stream_(stream),
      options_(options),
      early_receives_(options.overlap && pp.capabilities().early_receives) {}

void PipelineExecutor::post_receive(const Schedule& schedule, std::size_t index, PipelineStageRunner& runner) {
  if (receives_.count(index)) return;
  const int stage = pp_.rank();
  const Action& a = schedule.actions[static_cast<std::size_t>(stage)][index];
  const ChunkRef from = schedule.peer(stage, a);
  Tensor buffer = a.kind == ActionKind::RecvForward ? runner.forward_input(a.chunk, a.micro)
                                                    : runner.output_grad_buffer(a.chunk, a.micro);
  Pending p;
  if (from.stage == stage) {
    p.staged = buffer;  // filled from the self-send when the receive is waited for
  } else {
    p.work = pp_.recv_async(buffer, from.stage, {schedule.tag(stage, a)});
  }
  receives_[index] = std::move(p);
}

void PipelineExecutor::send(const Schedule& schedule, const Action& a, PipelineStageRunner& runner) {
  const int stage = pp_.rank();
  const ChunkRef to = schedule.peer(stage, a);
  Tensor data = a.kind == ActionKind::SendForward ? runner.forward_output(a.chunk, a.micro)
                                                  : runner.input_grad(a.chunk, a.micro);
  if (to.stage == stage) {
    // Copied when the receive comes; until then the sending slot is held (see release_finished).
    self_sends_[schedule.tag(stage, a)] = {data, {a.chunk, a.micro}};
    return;
  }
  // Never waited for before the stage goes on, with overlap or without: a send may complete only
  // once its receiver posted the receive (MPI's rendezvous for large messages), and in the
  // interleaved schedule the receiver may first need this stage's next computation. Without
  // overlap the receiver posts that receive only where the schedule puts it, so the transfer
  // still runs while the receiver waits, not while it computes. The slot is released (and the
  // send waited for) once it completed (release_finished).
  sends_[{a.chunk, a.micro}].push_back(pp_.send_async(data, to.stage, {schedule.tag(stage, a)}));
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
  std::vector<std::size_t> compute_positions;
  for (std::size_t i = 0; i < actions.size(); ++i)
    if (is_compute(actions[i].kind)) compute_positions.push_back(i);
  // The receives just before compute position n (which that computation needs). A gradient's
  // buffer exists only once its micro-batch's forward ran, so such a receive waits for that.
  std::set<std::pair<int, int>> forwarded;
  auto post_receives_for = [&](std::size_t n) {
    if (n >= compute_positions.size()) return;
    const std::size_t at = compute_positions[n];
    const std::size_t from = n == 0 ? 0 : compute_positions[n - 1] + 1;
    for (std::size_t k = from; k < at; ++k) {
      const Action& r = actions[k];
      if (!is_receive(r.kind) || receives_.count(k)) continue;
      if (r.kind == ActionKind::RecvBackward && !forwarded.count({r.chunk, r.micro})) continue;
      post_receive(schedule, k, runner);
      ++stats.receives_posted_early;
    }
  };
  std::size_t next_compute = 0;
  if (early_receives_) post_receives_for(0);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    switch (a.kind) {
      case ActionKind::RecvForward:
      case ActionKind::RecvBackward: {
        post_receive(schedule, i, runner);  // a no-op when posted early
        Pending& p = receives_.at(i);
        const auto start = std::chrono::steady_clock::now();
        if (p.work) {
          p.work->wait_on(stream_);
        } else {
          auto it = self_sends_.find(schedule.tag(stage, a));
          MT_CHECK(it != self_sends_.end(), "stage ", stage, ": ", to_string(a, true), " before its own send");
          p.staged.copy_from(it->second.data, stream_);
          self_sends_.erase(it);
        }
        stats.receive_wait_s += seconds_since(start);
        receives_.erase(i);
        break;
      }
      case ActionKind::Forward:
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
      case ActionKind::BackwardWeight: {
        if (early_receives_) post_receives_for(next_compute + 1);
        ++next_compute;
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
          if (early_receives_) post_receives_for(next_compute);  // a gradient it now has a buffer for
        } else {
          const BackwardPart part = a.kind == ActionKind::Backward        ? BackwardPart::Full
                                    : a.kind == ActionKind::BackwardInput ? BackwardPart::Input
                                                                          : BackwardPart::Weight;
          runner.backward(a.chunk, a.micro, part, a.completes_chunk);
        }
        stats.compute_s += seconds_since(start);
        const bool last_use = makes_weight_grad(a.kind) || schedule.forward_only;
        if (last_use) done_.push_back({a.chunk, a.micro});
        break;
      }
      case ActionKind::SendForward:
      case ActionKind::SendBackward:
        send(schedule, a, runner);
        break;
    }
  }
  release_finished(runner, true);
  MT_CHECK(receives_.empty() && self_sends_.empty(), "stage ", stage, ": the schedule left messages unmatched");
  return stats;
}

}  // namespace mt
