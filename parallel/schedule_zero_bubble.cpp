#include "parallel/schedule_zero_bubble.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <tuple>

#include "runtime/error.h"

namespace mt {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr double kCost = 1.0;  // F, B and W of one chunk alike: the lists do not depend on real costs

// What the simulation knows of one (micro-batch, global chunk).
struct Cell {
  double input_at = kNever;        // its forward input arrived (0 for the first chunk)
  double gradient_at = kNever;     // its output gradient arrived (unused for the last chunk)
  double forward_end = kNever;     // F done
  double input_grad_end = kNever;  // B done
  bool weight_done = false;        // W done
};

struct StageState {
  double free = 0;          // when it next decides; kNever while it waits for a message it does not know of
  double idle_since = 0;    // while waiting: since when
  bool waiting = false;
  bool last_was_input_grad = false;  // its last F or B was a B: an F goes first now (1F1B's alternation)
  int before_input_grad = 0;         // forwards not yet through B
  int before_weight = 0;             // forwards not yet through W
  int left = 0;                      // computations still to do
};

// The in-flight limits of make_schedule's comment, for stage s.
struct Limits {
  int before_input_grad;
  int before_weight;
};

Limits limits_of(const Schedule& s, int stage) {
  if (s.kind == ScheduleKind::ZeroBubbleH1) return {s.stages - stage, s.stages};
  return {2 * s.stages, 2 * s.stages};
}

class Simulation {
 public:
  explicit Simulation(const Schedule& s)
      : s_(s), chunks_(s.total_chunks()), cells_(static_cast<std::size_t>(s.micro_batches * chunks_)),
        stages_(static_cast<std::size_t>(s.stages)), orders_(static_cast<std::size_t>(s.stages)) {
    for (int m = 0; m < s.micro_batches; ++m) cell(m, 0).input_at = 0;
    for (StageState& st : stages_) st.left = 3 * s.micro_batches * s.virtual_stages;
  }

  Timelines run() {
    while (true) {
      const int stage = next_stage();
      if (stage < 0) break;
      decide(stage);
    }
    for (int stage = 0; stage < s_.stages; ++stage)
      MT_CHECK(state(stage).left == 0, "the zero-bubble simulation of ", schedule_kind_name(s_.kind), " P=", s_.stages,
               " M=", s_.micro_batches, " is stuck on stage ", stage);
    return std::move(orders_);
  }

 private:
  Cell& cell(int micro, int global) { return cells_[static_cast<std::size_t>(micro * chunks_ + global)]; }
  StageState& state(int stage) { return stages_[static_cast<std::size_t>(stage)]; }

  // The stage that decides next: the earliest free one, the lowest index on a tie; -1 when none.
  int next_stage() {
    int best = -1;
    for (int stage = 0; stage < s_.stages; ++stage) {
      const StageState& st = state(stage);
      if (st.left == 0 || st.free == kNever) continue;
      if (best < 0 || st.free < state(best).free) best = stage;
    }
    return best;
  }

  void decide(int stage) {
    StageState& st = state(stage);
    const double t = st.free;
    const Limits limits = limits_of(s_, stage);
    const bool forward_fits = st.before_input_grad < limits.before_input_grad && st.before_weight < limits.before_weight;
    // The best candidate of each kind by its key, the smallest wins (chunk -1: none). B: (micro, -g,
    // chunk), the lowest micro-batch, then the later chunk; F: (-g, micro, chunk); W: (when its B ended, micro, chunk).
    std::tuple<int, int, int> b{0, 0, -1}, f{0, 0, -1};
    std::tuple<double, int, int> w{kNever, 0, -1};
    for (int c = 0; c < s_.virtual_stages; ++c) {
      const int g = s_.global_chunk(stage, c);
      const bool last = g == chunks_ - 1;
      for (int m = 0; m < s_.micro_batches; ++m) {
        const Cell& x = cell(m, g);
        if (x.forward_end == kNever) {
          const std::tuple<int, int, int> key{-g, m, c};
          if (forward_fits && x.input_at <= t && (std::get<2>(f) < 0 || key < f)) f = key;
        } else if (x.input_grad_end == kNever) {
          const std::tuple<int, int, int> key{m, -g, c};
          if ((last || x.gradient_at <= t) && (std::get<2>(b) < 0 || key < b)) b = key;
        } else if (!x.weight_done && x.input_grad_end < std::get<0>(w)) {
          w = {x.input_grad_end, m, c};
        }
      }
    }
    const bool has_b = std::get<2>(b) >= 0, has_f = std::get<2>(f) >= 0;
    if (has_f && (!has_b || st.last_was_input_grad)) return start(stage, ActionKind::Forward, std::get<1>(f), std::get<2>(f));
    if (has_b) return start(stage, ActionKind::BackwardInput, std::get<0>(b), std::get<2>(b));
    if (std::get<2>(w) >= 0) return start(stage, ActionKind::BackwardWeight, std::get<1>(w), std::get<2>(w));
    wait(stage, t);
  }

  // Nothing to do at t: sleep until the next message known to come, or until one is sent.
  void wait(int stage, double t) {
    StageState& st = state(stage);
    double next = kNever;
    for (int c = 0; c < s_.virtual_stages; ++c) {
      const int g = s_.global_chunk(stage, c);
      for (int m = 0; m < s_.micro_batches; ++m) {
        const Cell& x = cell(m, g);
        if (x.input_at > t) next = std::min(next, x.input_at);
        if (x.gradient_at > t && g < chunks_ - 1) next = std::min(next, x.gradient_at);
      }
    }
    st.waiting = true;
    st.idle_since = t;
    st.free = next;
  }

  void deliver(int micro, int global, bool gradient, double at) {
    Cell& x = cell(micro, global);
    (gradient ? x.gradient_at : x.input_at) = at;
    StageState& receiver = state(s_.chunk_at(global).stage);
    if (receiver.waiting) receiver.free = std::min(receiver.free, std::max(receiver.idle_since, at));
  }

  void start(int stage, ActionKind kind, int micro, int chunk) {
    StageState& st = state(stage);
    const double start = st.free, end = start + kCost;
    orders_[static_cast<std::size_t>(stage)].push_back({kind, micro, chunk, start, end});
    st.free = end;
    st.waiting = false;
    --st.left;
    const int g = s_.global_chunk(stage, chunk);
    Cell& x = cell(micro, g);
    if (kind == ActionKind::Forward) {
      st.last_was_input_grad = false;
      x.forward_end = end;
      ++st.before_input_grad;
      ++st.before_weight;
      if (g + 1 < chunks_) deliver(micro, g + 1, false, end);
    } else if (kind == ActionKind::BackwardInput) {
      st.last_was_input_grad = true;
      x.input_grad_end = end;
      --st.before_input_grad;
      if (g > 0) deliver(micro, g - 1, true, end);
    } else {
      x.weight_done = true;
      --st.before_weight;
    }
  }

  const Schedule& s_;
  int chunks_;
  std::vector<Cell> cells_;
  std::vector<StageState> stages_;
  Timelines orders_;
};

}  // namespace

Timelines zero_bubble_timelines(const Schedule& shape) {
  MT_CHECK(splits_backward(shape.kind),
           "not a zero-bubble kind: ", schedule_kind_name(shape.kind));
  return Simulation(shape).run();
}

namespace {

// A receive waiting for its place in a run of messages.
struct TimedReceive {
  double at;
  int from;
  Action action;
};

}  // namespace

std::vector<std::vector<Action>> place_messages_by_clock(const Schedule& shape, const Timelines& timelines) {
  const auto stages = static_cast<std::size_t>(shape.stages);
  MT_CHECK(timelines.size() == stages, timelines.size(), " timelines for ", stages, " stages");
  // receives[stage][k]: the receives in the run of messages before computation k (k = size: after the last).
  std::vector<std::vector<std::vector<TimedReceive>>> receives(stages);
  for (std::size_t s = 0; s < stages; ++s) receives[s].resize(timelines[s].size() + 1);
  auto receive_at = [&](int stage, double at, Action action, int from) {
    const auto& line = timelines[static_cast<std::size_t>(stage)];
    const auto first =
        std::partition_point(line.begin(), line.end(), [at](const TimedCompute& t) { return t.start < at; });
    receives[static_cast<std::size_t>(stage)][static_cast<std::size_t>(first - line.begin())].push_back(
        {at, from, action});
  };
  for (int stage = 0; stage < shape.stages; ++stage) {
    for (const TimedCompute& t : timelines[static_cast<std::size_t>(stage)]) {
      const int g = shape.global_chunk(stage, t.chunk);
      if (t.kind == ActionKind::Forward && g + 1 < shape.total_chunks()) {
        const ChunkRef to = shape.chunk_at(g + 1);
        receive_at(to.stage, t.end, {ActionKind::RecvForward, t.micro, to.chunk}, stage);
      } else if (makes_input_grad(t.kind) && g > 0) {
        const ChunkRef to = shape.chunk_at(g - 1);
        receive_at(to.stage, t.end, {ActionKind::RecvBackward, t.micro, to.chunk}, stage);
      }
    }
  }
  std::vector<std::vector<Action>> actions(stages);
  for (int stage = 0; stage < shape.stages; ++stage) {
    const auto& line = timelines[static_cast<std::size_t>(stage)];
    auto& out = actions[static_cast<std::size_t>(stage)];
    for (std::size_t k = 0; k <= line.size(); ++k) {
      if (k > 0) {  // the send of the computation just done comes first in its run
        const TimedCompute& t = line[k - 1];
        const int g = shape.global_chunk(stage, t.chunk);
        if (t.kind == ActionKind::Forward && g + 1 < shape.total_chunks())
          out.push_back({ActionKind::SendForward, t.micro, t.chunk});
        if (makes_input_grad(t.kind) && g > 0) out.push_back({ActionKind::SendBackward, t.micro, t.chunk});
      }
      auto& run = receives[static_cast<std::size_t>(stage)][k];
      std::stable_sort(run.begin(), run.end(), [](const TimedReceive& a, const TimedReceive& b) {
        return std::tie(a.at, a.from) < std::tie(b.at, b.from);
      });
      for (const TimedReceive& r : run) out.push_back(r.action);
      if (k < line.size()) out.push_back({line[k].kind, line[k].micro, line[k].chunk});
    }
  }
  return actions;
}

}  // namespace mt
