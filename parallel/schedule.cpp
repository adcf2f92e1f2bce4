// Schedules are built in two steps: each stage's order of computations (the part that differs between
// GPipe, 1F1B and interleaved), then the receives and sends around every computation. The
// zero-bubble kinds come from a simulation instead (parallel/schedule_zero_bubble.h).
#include "parallel/schedule.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "parallel/schedule_batches.h"
#include "parallel/schedule_zero_bubble.h"
#include "runtime/error.h"

namespace mt {

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "interleaved") return ScheduleKind::Interleaved;
  if (name == "zb-h1") return ScheduleKind::ZeroBubbleH1;
  if (name == "zb-v") return ScheduleKind::ZeroBubbleV;
  MT_FAIL_AS(UsageError, "unknown pipeline schedule '", name, "' (expected gpipe, 1f1b, interleaved, zb-h1 or zb-v)");
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
    case ScheduleKind::ZeroBubbleV: return "zb-v";
  }
  return "?";
}

std::string to_string(const Action& action, bool with_chunk) {
  const char* name = "?";
  switch (action.kind) {
    case ActionKind::RecvForward: name = "RF"; break;
    case ActionKind::Forward: name = "F"; break;
    case ActionKind::SendForward: name = "SF"; break;
    case ActionKind::RecvBackward: name = "RB"; break;
    case ActionKind::Backward: name = "B"; break;
    case ActionKind::SendBackward: name = "SB"; break;
    case ActionKind::BackwardInput: name = "Bi"; break;
    case ActionKind::BackwardWeight: name = "W"; break;
  }
  std::ostringstream out;
  out << name << action.micro;
  if (with_chunk) out << '.' << action.chunk;
  return out.str();
}

ChunkRef Schedule::peer(int stage, const Action& action) const {
  const int g = global_chunk(stage, action.chunk);
  switch (action.kind) {
    case ActionKind::SendForward:
    case ActionKind::RecvBackward:
      MT_CHECK(g + 1 < total_chunks(), "the last chunk has no next chunk: ", to_string(action, true));
      return chunk_at(g + 1);
    case ActionKind::RecvForward:
    case ActionKind::SendBackward:
      MT_CHECK(g > 0, "the first chunk has no previous chunk: ", to_string(action, true));
      return chunk_at(g - 1);
    default: MT_FAIL("a computation has no peer: ", to_string(action, true));
  }
}

int Schedule::tag(int stage, const Action& action) const {
  MT_CHECK(!is_compute(action.kind), "a computation carries no message: ", to_string(action, true));
  const bool forward = action.kind == ActionKind::SendForward || action.kind == ActionKind::RecvForward;
  const bool sending = is_send(action.kind);
  const ChunkRef destination = sending ? peer(stage, action) : ChunkRef{stage, action.chunk};
  return (action.micro * total_chunks() + global_chunk(destination.stage, destination.chunk)) * 2 + (forward ? 0 : 1);
}

namespace {

struct Compute {
  bool forward;
  int micro;
  int chunk;
};

// Interleaved order (also the forward-only order): micro-batches in groups of P, each group through
// chunk 0, then chunk 1, ...; backwards visit the chunks in reverse. The k-th forward (or backward).
Compute interleaved_compute(int k, bool forward, int stages, int chunks) {
  const int group = k / (stages * chunks);
  const int micro = group * stages + k % stages;
  const int step = (k / stages) % chunks;
  return {forward, micro, forward ? step : chunks - 1 - step};
}

std::vector<Compute> gpipe_order(int micro_batches) {
  std::vector<Compute> order;
  for (int m = 0; m < micro_batches; ++m) order.push_back({true, m, 0});
  for (int m = 0; m < micro_batches; ++m) order.push_back({false, m, 0});
  return order;
}

// Warm-up forwards, then one forward one backward, then the remaining backwards; with
// forward(k), backward(k) giving the k-th of each. Stage-independent except for the warm-up count.
template <class ForwardAt, class BackwardAt>
std::vector<Compute> one_forward_one_backward(int total, int warmup, ForwardAt forward, BackwardAt backward) {
  std::vector<Compute> order;
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(forward(warmup + k));
    order.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(backward(k));
  return order;
}

std::vector<Compute> one_f_one_b_order(int stages, int stage, int micro_batches) {
  // Stage s has P-s-1 forwards in flight before its first backward can arrive (PipeDream-flush).
  const int warmup = std::min(stages - stage - 1, micro_batches);
  return one_forward_one_backward(
      micro_batches, warmup, [](int k) { return Compute{true, k, 0}; },
      [](int k) { return Compute{false, k, 0}; });
}

std::vector<Compute> interleaved_order(int stages, int stage, int micro_batches, int chunks) {
  const int total = micro_batches * chunks;
  // Megatron-LM: two more forwards per later stage to cover the round trip, plus a full pass of the
  // other chunks; with M == P everything is warm-up (forwards first).
  int warmup = (stages - stage - 1) * 2 + (chunks - 1) * stages;
  if (micro_batches == stages) warmup = total;
  warmup = std::min(warmup, total);
  return one_forward_one_backward(
      total, warmup, [&](int k) { return interleaved_compute(k, true, stages, chunks); },
      [&](int k) { return interleaved_compute(k, false, stages, chunks); });
}

std::vector<Compute> forward_only_order(int stages, int micro_batches, int chunks) {
  // Groups of P micro-batches (the last one may be short), each through every chunk in turn.
  std::vector<Compute> order;
  for (int first = 0; first < micro_batches; first += stages) {
    const int last = std::min(first + stages, micro_batches);
    for (int c = 0; c < chunks; ++c) {
      for (int m = first; m < last; ++m) order.push_back({true, m, c});
    }
  }
  return order;
}

// Marks, per local chunk, the last computation that adds to its weight gradients.
void mark_completing(std::vector<Action>& actions) {
  std::vector<bool> seen;
  for (auto it = actions.rbegin(); it != actions.rend(); ++it) {
    if (!makes_weight_grad(it->kind)) continue;
    const auto c = static_cast<std::size_t>(it->chunk);
    if (seen.size() <= c) seen.resize(c + 1, false);
    if (!seen[c]) it->completes_chunk = true;
    seen[c] = true;
  }
}

std::vector<Action> computations_of(const std::vector<Compute>& order) {
  std::vector<Action> actions;
  for (const Compute& c : order)
    actions.push_back({c.forward ? ActionKind::Forward : ActionKind::Backward, c.micro, c.chunk});
  return actions;
}

// Receive directly before, send directly after each computation that has a neighbouring chunk.
std::vector<Action> with_messages(const Schedule& s, int stage, const std::vector<Action>& computations) {
  std::vector<Action> actions;
  for (const Action& c : computations) {
    const bool first = s.is_first_chunk(stage, c.chunk);
    const bool last = s.is_last_chunk(stage, c.chunk);
    if (c.kind == ActionKind::Forward) {
      if (!first) actions.push_back({ActionKind::RecvForward, c.micro, c.chunk});
      actions.push_back(c);
      if (!last) actions.push_back({ActionKind::SendForward, c.micro, c.chunk});
    } else if (makes_input_grad(c.kind)) {
      if (!last) actions.push_back({ActionKind::RecvBackward, c.micro, c.chunk});
      actions.push_back(c);
      if (!first) actions.push_back({ActionKind::SendBackward, c.micro, c.chunk});
    } else {
      actions.push_back(c);
    }
  }
  return actions;
}

void require_sizes(int stages, int micro_batches, int virtual_stages) {
  MT_REQUIRE(stages >= 1, "a pipeline needs at least 1 stage, got ", stages);
  MT_REQUIRE(micro_batches >= 1, "a pipeline schedule needs at least 1 micro-batch, got ", micro_batches);
  MT_REQUIRE(virtual_stages >= 1, "virtual stages (model chunks per stage) must be at least 1, got ",
             virtual_stages);
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  require_sizes(stages, micro_batches, virtual_stages);
  switch (kind) {
    case ScheduleKind::Interleaved:
      MT_REQUIRE(virtual_stages >= 2, "the interleaved schedule needs 2 or more virtual stages (model chunks per ",
                 "stage), got ", virtual_stages);
      MT_REQUIRE(micro_batches % stages == 0, "the interleaved schedule needs the micro-batches (", micro_batches,
                 ") to be a multiple of the pipeline stages (", stages, ")");
      break;
    case ScheduleKind::ZeroBubbleV:
      MT_REQUIRE(virtual_stages == 2, "the zb-v schedule needs --virtual-stages 2 (two model chunks per stage, ",
                 "placed in a V), got ", virtual_stages);
      break;
    case ScheduleKind::ZeroBubbleH1:
      MT_REQUIRE(virtual_stages == 1, "the zb-h1 schedule needs --virtual-stages 1, got ", virtual_stages);
      break;
    default:
      MT_REQUIRE(virtual_stages == 1, "virtual stages (", virtual_stages, ") need the interleaved schedule, not ",
                 schedule_kind_name(kind));
  }
  Schedule s{kind, stages, micro_batches, virtual_stages, false, {}, placement_of(kind)};
  if (kind == ScheduleKind::ZeroBubbleV) {
    // Chunk 0's activations and chunk 1's gradients share each pair of stages: receives directly
    // before their computations would not come in the order of the sends. Each sits where the
    // simulation sent it.
    s.actions = place_messages_by_clock(s, zero_bubble_timelines(s));
  } else {
    const Timelines zb = kind == ScheduleKind::ZeroBubbleH1 ? zero_bubble_timelines(s) : Timelines{};
    for (int stage = 0; stage < stages; ++stage) {
      std::vector<Action> computations;
      switch (kind) {
        case ScheduleKind::GPipe: computations = computations_of(gpipe_order(micro_batches)); break;
        case ScheduleKind::OneFOneB:
          computations = computations_of(one_f_one_b_order(stages, stage, micro_batches));
          break;
        case ScheduleKind::Interleaved:
          computations = computations_of(interleaved_order(stages, stage, micro_batches, virtual_stages));
          break;
        default:
          for (const TimedCompute& t : zb[static_cast<std::size_t>(stage)]) computations.push_back({t.kind, t.micro, t.chunk});
      }
      s.actions.push_back(with_messages(s, stage, computations));
    }
    // Receives directly before their computations deadlock the interleaved lists (M > P) once the
    // messages between two computations go as one batch: those receives move earlier, as few as needed.
    move_receives_until_batches_complete(s);
  }
  for (auto& list : s.actions) mark_completing(list);
  return s;
}

Schedule make_forward_only_schedule(int stages, int micro_batches, int virtual_stages, ChunkPlacement placement) {
  require_sizes(stages, micro_batches, virtual_stages);
  const bool v_shape = placement == ChunkPlacement::VShape;
  MT_REQUIRE(!v_shape || virtual_stages == 2, "the V placement (zb-v) needs 2 virtual stages, got ", virtual_stages);
  const ScheduleKind kind = v_shape                ? ScheduleKind::ZeroBubbleV
                            : virtual_stages == 1 ? ScheduleKind::GPipe
                                                  : ScheduleKind::Interleaved;
  Schedule s{kind, stages, micro_batches, virtual_stages, true, {}, placement};
  const std::vector<Action> order = computations_of(forward_only_order(stages, micro_batches, virtual_stages));
  for (int stage = 0; stage < stages; ++stage) s.actions.push_back(with_messages(s, stage, order));
  return s;
}

std::string describe(const Schedule& schedule, bool with_communication) {
  std::ostringstream out;
  const bool with_chunk = schedule.virtual_stages > 1;
  for (int stage = 0; stage < schedule.stages; ++stage) {
    out << 's' << stage << ':';
    for (const Action& a : schedule.actions[stage]) {
      if (with_communication || is_compute(a.kind)) out << ' ' << to_string(a, with_chunk);
    }
    out << '\n';
  }
  return out.str();
}

}  // namespace mt
