// Pipeline schedules: every property the executor relies on (each computation once, messages matched
// in order per stage pair, no deadlock with blocking receives nor with grouped batches, data
// dependencies, bounded activations, the completing marks), checked for many shapes of all five
// kinds; their unit-cost timing against the theory; a few lists by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/schedule.h"  // defines: Schedule, make_schedule, make_forward_only_schedule, simulate
#include "runtime/error.h"      // defines: Error

namespace mt {

// Readable failures: gtest prints actions as "RF3.1".
void PrintTo(const Action& action, std::ostream* out) { *out << to_string(action, true); }

namespace {

struct Shape {
  ScheduleKind kind;
  int stages;
  int micro_batches;
  int virtual_stages;
};

std::string name(const Shape& s) {
  std::ostringstream out;
  out << schedule_kind_name(s.kind) << " P=" << s.stages << " M=" << s.micro_batches << " v=" << s.virtual_stages;
  return out.str();
}

bool zero_bubble(ScheduleKind kind) { return kind == ScheduleKind::ZeroBubbleH1 || kind == ScheduleKind::ZeroBubbleV; }

// GPipe, 1F1B, ZB-H1 and ZB-V (v = 2): P 1..8, M 1..16. Interleaved: P 1..8, v 2..4, M every
// multiple of P up to 24.
std::vector<Shape> all_shapes() {
  std::vector<Shape> shapes;
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      shapes.push_back({ScheduleKind::GPipe, p, m, 1});
      shapes.push_back({ScheduleKind::OneFOneB, p, m, 1});
      shapes.push_back({ScheduleKind::ZeroBubbleH1, p, m, 1});
      shapes.push_back({ScheduleKind::ZeroBubbleV, p, m, 2});
    }
    for (int v = 2; v <= 4; ++v) {
      for (int m = p; m <= 24; m += p) shapes.push_back({ScheduleKind::Interleaved, p, m, v});
    }
  }
  return shapes;
}

Schedule make(const Shape& s) { return make_schedule(s.kind, s.stages, s.micro_batches, s.virtual_stages); }

using Key = std::tuple<int, int>;  // (micro, local chunk)

// Receives sit directly before their computation in these lists (schedule.h's rules); interleaved
// and ZB-V may have them earlier.
bool receives_directly_before(const Schedule& s) {
  return s.forward_only || (s.kind != ScheduleKind::Interleaved && s.kind != ScheduleKind::ZeroBubbleV);
}

// Sends directly follow the computation they belong to, receives precede it (directly, where
// receives_directly_before), a gradient's receive after its forward, exactly when the chunk has a
// neighbour in that direction; nothing else is in the list.
void expect_messages_around_computations(const Schedule& s, bool forward_only) {
  const bool directly = receives_directly_before(s);
  for (int stage = 0; stage < s.stages; ++stage) {
    const auto& list = s.actions[stage];
    std::size_t accounted = 0;
    std::set<std::tuple<int, int, int>> received;  // (kind, micro, chunk) of receives seen so far
    std::set<Key> forwarded;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      ASSERT_GE(a.micro, 0);
      ASSERT_LT(a.micro, s.micro_batches);
      ASSERT_GE(a.chunk, 0);
      ASSERT_LT(a.chunk, s.virtual_stages);
      if (is_receive(a.kind)) {
        if (a.kind == ActionKind::RecvBackward) {
          EXPECT_TRUE(forwarded.count({a.micro, a.chunk})) << "gradient received before its forward, stage " << stage
                                                            << " " << to_string(a, true);
        }
        EXPECT_TRUE(received.insert({static_cast<int>(a.kind), a.micro, a.chunk}).second) << to_string(a, true);
      }
      if (!is_compute(a.kind)) continue;
      ++accounted;
      if (a.kind == ActionKind::BackwardWeight) continue;  // no messages
      const bool fwd = a.kind == ActionKind::Forward;
      if (fwd) forwarded.insert({a.micro, a.chunk});
      ASSERT_TRUE(fwd || !forward_only);
      const bool needs_receive = fwd ? !s.is_first_chunk(stage, a.chunk) : !s.is_last_chunk(stage, a.chunk);
      const bool needs_send = fwd ? !s.is_last_chunk(stage, a.chunk) : !s.is_first_chunk(stage, a.chunk);
      const ActionKind receive = fwd ? ActionKind::RecvForward : ActionKind::RecvBackward;
      const ActionKind send = fwd ? ActionKind::SendForward : ActionKind::SendBackward;
      const bool has_receive = directly ? i > 0 && list[i - 1] == Action{receive, a.micro, a.chunk}
                                        : received.count({static_cast<int>(receive), a.micro, a.chunk}) == 1;
      const bool has_send = i + 1 < list.size() && list[i + 1] == Action{send, a.micro, a.chunk};
      EXPECT_EQ(has_receive, needs_receive) << "stage " << stage << " " << to_string(a, true);
      EXPECT_EQ(has_send, needs_send) << "stage " << stage << " " << to_string(a, true);
      accounted += static_cast<std::size_t>(has_receive) + static_cast<std::size_t>(has_send);
    }
    EXPECT_EQ(accounted, list.size()) << "stray messages on stage " << stage;
  }
}

// Every (micro, chunk) forward once and backward once, the backward after the forward: a fused
// Backward, or in the zero-bubble lists BackwardInput and then BackwardWeight.
void expect_each_computation_once(const Schedule& s) {
  const bool split = zero_bubble(s.kind) && !s.forward_only;
  for (int stage = 0; stage < s.stages; ++stage) {
    std::map<ActionKind, std::map<Key, int>> at;
    const auto& list = s.actions[stage];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (!is_compute(a.kind)) continue;
      EXPECT_TRUE(at[a.kind].emplace(Key{a.micro, a.chunk}, i).second) << "twice: " << to_string(a, true);
    }
    const std::size_t all = static_cast<std::size_t>(s.micro_batches * s.virtual_stages);
    const std::size_t none = 0;
    EXPECT_EQ(at[ActionKind::Forward].size(), all) << "stage " << stage;
    EXPECT_EQ(at[ActionKind::Backward].size(), s.forward_only || split ? none : all) << "stage " << stage;
    EXPECT_EQ(at[ActionKind::BackwardInput].size(), split ? all : none) << "stage " << stage;
    EXPECT_EQ(at[ActionKind::BackwardWeight].size(), split ? all : none) << "stage " << stage;
    for (ActionKind later : {ActionKind::Backward, ActionKind::BackwardInput}) {
      for (const auto& [key, i] : at[later]) EXPECT_LT(at[ActionKind::Forward].at(key), i) << "stage " << stage;
    }
    for (const auto& [key, i] : at[ActionKind::BackwardWeight])
      EXPECT_LT(at[ActionKind::BackwardInput].at(key), i) << "stage " << stage;
  }
}

// completes_chunk on exactly the last Backward or BackwardWeight of each local chunk.
void expect_completing_marks(const Schedule& s) {
  for (int stage = 0; stage < s.stages; ++stage) {
    const auto& list = s.actions[stage];
    std::vector<int> last(static_cast<std::size_t>(s.virtual_stages), -1);
    for (int i = 0; i < static_cast<int>(list.size()); ++i)
      if (makes_weight_grad(list[i].kind)) last[static_cast<std::size_t>(list[i].chunk)] = i;
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const bool expected = !s.forward_only && last[static_cast<std::size_t>(list[i].chunk)] == i;
      EXPECT_EQ(list[i].completes_chunk, expected) << "stage " << stage << " " << to_string(list[i], true);
    }
  }
}

struct Message {
  int tag;
  ChunkRef from;
  ChunkRef to;
  bool operator==(const Message&) const = default;
};

// The in-order rule: per ordered stage pair, the sends in the sender's order are the receives in the
// receiver's order, naming the same chunks at both ends and the same tags.
void expect_sends_match_receives_in_order(const Schedule& s) {
  std::map<std::pair<int, int>, std::vector<Message>> sent;
  std::map<std::pair<int, int>, std::vector<Message>> received;
  std::set<int> tags;
  for (int stage = 0; stage < s.stages; ++stage) {
    for (const Action& a : s.actions[stage]) {
      if (is_compute(a.kind)) continue;
      const ChunkRef self{stage, a.chunk};
      const ChunkRef other = s.peer(stage, a);
      const int tag = s.tag(stage, a);
      ASSERT_GE(tag, 0);
      ASSERT_LT(tag, s.tag_count());
      const int gap = s.global_chunk(other.stage, other.chunk) - s.global_chunk(stage, a.chunk);
      const bool toward_later = a.kind == ActionKind::SendForward || a.kind == ActionKind::RecvBackward;
      EXPECT_EQ(gap, toward_later ? 1 : -1);
      if (is_send(a.kind)) {
        EXPECT_TRUE(tags.insert(tag).second) << "tag " << tag << " sent twice";
        sent[{stage, other.stage}].push_back({tag, self, other});
      } else {
        received[{other.stage, stage}].push_back({tag, other, self});
      }
    }
  }
  EXPECT_EQ(sent, received);
}

// Executes all stages together, one action at a time: sends never block, a receive waits for the
// next message its peer sent to it (in order). Checks data dependencies at each computation.
void expect_runs_without_deadlock(const Schedule& s) {
  std::set<std::tuple<int, int, bool>> done;  // (micro, global chunk, forward)
  std::map<std::pair<int, int>, std::vector<int>> in_transit;
  std::vector<std::size_t> next(s.stages, 0);
  const int last = s.total_chunks() - 1;
  bool moved = true;
  while (moved) {
    moved = false;
    for (int stage = 0; stage < s.stages; ++stage) {
      const auto& list = s.actions[stage];
      if (next[stage] == list.size()) continue;
      const Action& a = list[next[stage]];
      const int g = s.global_chunk(stage, a.chunk);
      if (is_send(a.kind)) {
        in_transit[{stage, s.peer(stage, a).stage}].push_back(s.tag(stage, a));
      } else if (is_receive(a.kind)) {
        auto& queue = in_transit[{s.peer(stage, a).stage, stage}];
        if (queue.empty()) continue;  // blocked
        ASSERT_EQ(queue.front(), s.tag(stage, a)) << "stage " << stage << " " << to_string(a, true);
        queue.erase(queue.begin());
      } else if (a.kind == ActionKind::Forward) {
        if (g > 0) {
          ASSERT_TRUE(done.count({a.micro, g - 1, true})) << "forward before its input: " << to_string(a, true);
        }
        done.insert({a.micro, g, true});
      } else if (a.kind == ActionKind::BackwardWeight) {
        ASSERT_TRUE(done.count({a.micro, g, false})) << "weight gradient before input gradient: " << to_string(a, true);
      } else {
        ASSERT_TRUE(done.count({a.micro, g, true})) << "backward before forward: " << to_string(a, true);
        if (g < last) {
          ASSERT_TRUE(done.count({a.micro, g + 1, false})) << "backward before its gradient: " << to_string(a, true);
        }
        done.insert({a.micro, g, false});
      }
      ++next[stage];
      moved = true;
    }
  }
  for (int stage = 0; stage < s.stages; ++stage) {
    EXPECT_EQ(next[stage], s.actions[stage].size()) << "deadlock on stage " << stage << "\n" << describe(s, true);
  }
  for (const auto& [pair, queue] : in_transit) EXPECT_TRUE(queue.empty()) << "unreceived messages";
}

// Forwards done minus weight gradients done, at most: GPipe all, 1F1B P - s, interleaved its
// warm-up + 1, ZB-H1 P (1F1B's stage 0), ZB-V 2P chunk slots (P stages' worth, the same).
int promised_peak(const Shape& shape, int stage) {
  const int p = shape.stages;
  const int m = shape.micro_batches;
  const int v = shape.virtual_stages;
  switch (shape.kind) {
    case ScheduleKind::GPipe: return m;
    case ScheduleKind::OneFOneB: return std::min(p - stage, m);
    case ScheduleKind::Interleaved: {
      const int warmup = m == p ? m * v : std::min((p - stage - 1) * 2 + (v - 1) * p, m * v);
      return std::min(warmup + 1, m * v);
    }
    case ScheduleKind::ZeroBubbleH1: return std::min(p, m);
    case ScheduleKind::ZeroBubbleV: return std::min(2 * p, 2 * m);
  }
  return 0;
}

// ZB-H1's other count, forwards done minus input gradients done: 1F1B's P - s.
int peak_before_input_grad(const Schedule& s, int stage) {
  int held = 0, peak = 0;
  for (const Action& a : s.actions[stage]) {
    if (a.kind == ActionKind::Forward) peak = std::max(peak, ++held);
    if (makes_input_grad(a.kind)) --held;
  }
  return peak;
}

TEST(ScheduleKind, ParsesAndNamesTheSchedules) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                            ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleV}) {
    EXPECT_EQ(parse_schedule_kind(schedule_kind_name(kind)), kind);
  }
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::OneFOneB), "1f1b");
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::ZeroBubbleH1), "zb-h1");
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::ZeroBubbleV), "zb-v");
  try {
    parse_schedule_kind("zigzag");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(e.message(), "unknown pipeline schedule 'zigzag' (expected gpipe, 1f1b, interleaved, zb-h1 or zb-v)");
  }
}

TEST(Schedule, EveryShapeKeepsTheExecutorsRules) {
  for (const Shape& shape : all_shapes()) {
    SCOPED_TRACE(name(shape));
    const Schedule s = make(shape);
    ASSERT_EQ(static_cast<int>(s.actions.size()), shape.stages);
    EXPECT_EQ(s.placement, shape.kind == ScheduleKind::ZeroBubbleV ? ChunkPlacement::VShape : ChunkPlacement::Looped);
    expect_messages_around_computations(s, false);
    expect_each_computation_once(s);
    expect_completing_marks(s);
    expect_sends_match_receives_in_order(s);
    expect_runs_without_deadlock(s);
    EXPECT_NO_THROW(check_grouped_messages(s));
    const std::vector<int> peaks = peak_in_flight(s);
    const std::vector<int> deferred = peak_deferred_weight(s);
    for (int stage = 0; stage < shape.stages; ++stage) {
      EXPECT_LE(peaks[stage], promised_peak(shape, stage)) << "stage " << stage;
      if (!zero_bubble(shape.kind)) {
        EXPECT_EQ(deferred[stage], 0);
      }
      EXPECT_LE(deferred[stage], peaks[stage]);
      if (shape.kind == ScheduleKind::ZeroBubbleH1) {
        EXPECT_LE(peak_before_input_grad(s, stage), std::min(shape.stages - stage, shape.micro_batches));
      }
      if (shape.kind == ScheduleKind::GPipe) {
        EXPECT_EQ(peaks[stage], shape.micro_batches);
      } else if (shape.kind == ScheduleKind::OneFOneB) {
        EXPECT_EQ(peaks[stage], std::min(shape.stages - stage, shape.micro_batches));
      }
    }
    if (::testing::Test::HasFailure()) return;  // one broken shape is enough to read
  }
}

TEST(Schedule, GPipeAnd1F1BTakeTheTheoreticalTime) {
  // forward f, backward b: (M + P - 1) * (f + b), every stage idles (P - 1) * (f + b); the bubble
  // fraction is (P - 1) / (M + P - 1).
  for (double backward : {2.0, 1.0, 3.0}) {
    for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
      for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 16; ++m) {
          SCOPED_TRACE(name({kind, p, m, 1}) + " backward " + std::to_string(backward));
          const ScheduleSimulation sim = simulate(make_schedule(kind, p, m), 1.0, backward);
          const double step = 1.0 + backward;
          EXPECT_DOUBLE_EQ(sim.makespan, (m + p - 1) * step);
          for (int stage = 0; stage < p; ++stage) EXPECT_DOUBLE_EQ(sim.idle[stage], (p - 1) * step);
          EXPECT_NEAR(sim.bubble_fraction(), (p - 1.0) / (m + p - 1.0), 1e-12);
        }
      }
    }
  }
}

TEST(Schedule, InterleavedShrinksTheBubbleByTheChunks) {
  // Per-chunk costs f/v and b/v keep the ideal busy time at M * (f + b) for every v; the bubble is
  // (P - 1) * (f + b) / v (Narayanan et al. 2021), i.e. makespan (M*v + P - 1) * (f + b) / v. Found
  // exact for every shape here, M == P (all forwards first) included, on every stage.
  for (double backward : {2.0, 1.0, 3.0}) {
    for (int p = 1; p <= 8; ++p) {
      for (int v = 2; v <= 4; ++v) {
        for (int m = p; m <= 24; m += p) {
          SCOPED_TRACE(name({ScheduleKind::Interleaved, p, m, v}) + " backward " + std::to_string(backward));
          const ScheduleSimulation sim =
              simulate(make_schedule(ScheduleKind::Interleaved, p, m, v), 1.0 / v, backward / v);
          const double step = 1.0 + backward;
          EXPECT_NEAR(sim.makespan, (m * v + p - 1) * step / v, 1e-9);
          for (int stage = 0; stage < p; ++stage) {
            EXPECT_NEAR(sim.busy[stage], m * step, 1e-9);
            EXPECT_NEAR(sim.idle[stage], (p - 1) * step / v, 1e-9);
          }
        }
      }
    }
  }
}

std::vector<Action> parse_actions(const std::string& text) {
  // "RF0.1 F0.1 SF0.1": kind letters, micro, chunk; "B3!" completes its chunk's gradients.
  std::vector<Action> actions;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    const bool completes = word.back() == '!';
    if (completes) word.pop_back();
    const std::size_t digit = word.find_first_of("0123456789");
    const std::string letters = word.substr(0, digit);
    const std::size_t dot = word.find('.');
    const int micro = std::stoi(word.substr(digit, dot - digit));
    const int chunk = dot == std::string::npos ? 0 : std::stoi(word.substr(dot + 1));
    static const std::map<std::string, ActionKind> kinds = {
        {"RF", ActionKind::RecvForward},  {"F", ActionKind::Forward},  {"SF", ActionKind::SendForward},
        {"RB", ActionKind::RecvBackward}, {"B", ActionKind::Backward}, {"SB", ActionKind::SendBackward},
        {"Bi", ActionKind::BackwardInput}, {"W", ActionKind::BackwardWeight}};
    actions.push_back({kinds.at(letters), micro, chunk, completes});
  }
  return actions;
}

TEST(Schedule, GPipeTwoStagesTwoMicroBatchesByHand) {
  const Schedule s = make_schedule(ScheduleKind::GPipe, 2, 2);
  EXPECT_EQ(s.actions[0], parse_actions("F0 SF0 F1 SF1 RB0 B0 RB1 B1!"));
  EXPECT_EQ(s.actions[1], parse_actions("RF0 F0 RF1 F1 B0 SB0 B1! SB1"));
  EXPECT_EQ(describe(s), "s0: F0 F1 B0 B1\ns1: F0 F1 B0 B1\n");
}

TEST(Schedule, OneFOneBTwoStagesThreeMicroBatchesByHand) {
  const Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 3);
  EXPECT_EQ(s.actions[0], parse_actions("F0 SF0  F1 SF1 RB0 B0  F2 SF2 RB1 B1  RB2 B2!"));
  EXPECT_EQ(s.actions[1], parse_actions("RF0 F0 B0 SB0  RF1 F1 B1 SB1  RF2 F2 B2! SB2"));
  EXPECT_EQ(describe(s), "s0: F0 F1 B0 F2 B1 B2\ns1: F0 B0 F1 B1 F2 B2\n");
}

TEST(Schedule, OneFOneBFourStagesByHand) {
  const Schedule s = make_schedule(ScheduleKind::OneFOneB, 4, 6);
  EXPECT_EQ(describe(s),
            "s0: F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5\n"
            "s1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5\n"
            "s2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5\n"
            "s3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5\n");
}

TEST(Schedule, InterleavedTwoStagesTwoMicroBatchesTwoChunksByHand) {
  // Stage 0 holds global chunks 0 (embedding) and 2; stage 1 holds 1 and 3 (head). M == P: forwards first.
  const Schedule s = make_schedule(ScheduleKind::Interleaved, 2, 2, 2);
  EXPECT_EQ(s.actions[0], parse_actions("F0.0 SF0.0  F1.0 SF1.0  RF0.1 F0.1 SF0.1  RF1.1 F1.1 SF1.1 "
                                        "RB0.1 B0.1 SB0.1  RB1.1 B1.1! SB1.1  RB0.0 B0.0  RB1.0 B1.0!"));
  EXPECT_EQ(s.actions[1], parse_actions("RF0.0 F0.0 SF0.0  RF1.0 F1.0 SF1.0  RF0.1 F0.1  RF1.1 F1.1 "
                                        "B0.1 SB0.1  B1.1! SB1.1  RB0.0 B0.0 SB0.0  RB1.0 B1.0! SB1.0"));
  EXPECT_EQ(s.peer(1, Action{ActionKind::SendForward, 0, 0}), (ChunkRef{0, 1}));
  EXPECT_EQ(s.peer(0, Action{ActionKind::SendBackward, 0, 1}), (ChunkRef{1, 0}));
  EXPECT_TRUE(s.is_first_chunk(0, 0));
  EXPECT_TRUE(s.is_last_chunk(1, 1));
}

TEST(Schedule, InterleavedTwoStagesFourMicroBatchesByHand) {
  // Warm-up: stage 0 (2-0-1)*2 + (2-1)*2 = 4 forwards, stage 1 2; then one forward one backward.
  const Schedule s = make_schedule(ScheduleKind::Interleaved, 2, 4, 2);
  EXPECT_EQ(describe(s),
            "s0: F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0\n"
            "s1: F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0\n");
}

TEST(Schedule, TagsAreTheSameAtBothEnds) {
  const Schedule s = make_schedule(ScheduleKind::Interleaved, 3, 6, 2);
  // Micro 4 leaves global chunk 2 (stage 2, chunk 0) for global chunk 3 (stage 0, chunk 1).
  const Action send{ActionKind::SendForward, 4, 0};
  const Action receive{ActionKind::RecvForward, 4, 1};
  EXPECT_EQ(s.tag(2, send), s.tag(0, receive));
  EXPECT_EQ(s.tag(2, send), (4 * 6 + 3) * 2);
  const Action gradient_send{ActionKind::SendBackward, 4, 1};
  const Action gradient_receive{ActionKind::RecvBackward, 4, 0};
  EXPECT_EQ(s.tag(0, gradient_send), s.tag(2, gradient_receive));
  EXPECT_EQ(s.tag(0, gradient_send), (4 * 6 + 2) * 2 + 1);
}

TEST(Schedule, RejectsShapesItCannotRun) {
  auto message_of = [](auto make_it) {
    try {
      make_it();
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message_of([] { make_schedule(ScheduleKind::GPipe, 2, 4, 2); }),
            "virtual stages (2) need the interleaved schedule, not gpipe");
  EXPECT_EQ(message_of([] { make_schedule(ScheduleKind::Interleaved, 4, 6, 2); }),
            "the interleaved schedule needs the micro-batches (6) to be a multiple of the pipeline stages (4)");
  EXPECT_EQ(message_of([] { make_schedule(ScheduleKind::Interleaved, 4, 8, 1); }),
            "the interleaved schedule needs 2 or more virtual stages (model chunks per stage), got 1");
  EXPECT_EQ(message_of([] { make_schedule(ScheduleKind::OneFOneB, 0, 8); }),
            "a pipeline needs at least 1 stage, got 0");
  EXPECT_EQ(message_of([] { make_schedule(ScheduleKind::OneFOneB, 2, 0); }),
            "a pipeline schedule needs at least 1 micro-batch, got 0");
}

TEST(Schedule, ForwardOnlyRunsEveryForwardOnceWithMatchedMessages) {
  for (int p = 1; p <= 8; ++p) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = 1; m <= 16; ++m) {
       for (ChunkPlacement placement : {ChunkPlacement::Looped, ChunkPlacement::VShape}) {
        if (placement == ChunkPlacement::VShape && v != 2) continue;
        SCOPED_TRACE(name({ScheduleKind::GPipe, p, m, v}) + " forward only" +
                     (placement == ChunkPlacement::VShape ? " V" : ""));
        const Schedule s = make_forward_only_schedule(p, m, v, placement);
        EXPECT_TRUE(s.forward_only);
        EXPECT_EQ(s.placement, placement);
        expect_messages_around_computations(s, true);
        expect_each_computation_once(s);
        expect_completing_marks(s);
        expect_sends_match_receives_in_order(s);
        expect_runs_without_deadlock(s);
        EXPECT_NO_THROW(check_grouped_messages(s));
        const ScheduleSimulation sim = simulate(s, 1.0, 2.0);
        EXPECT_DOUBLE_EQ(sim.busy[0], m * v * 1.0);
        if (::testing::Test::HasFailure()) return;
       }
      }
    }
  }
}

TEST(Schedule, ForwardOnlyByHand) {
  const Schedule s = make_forward_only_schedule(2, 3, 2);
  EXPECT_EQ(describe(s), "s0: F0.0 F1.0 F0.1 F1.1 F2.0 F2.1\ns1: F0.0 F1.0 F0.1 F1.1 F2.0 F2.1\n");
  EXPECT_EQ(describe(make_forward_only_schedule(2, 2)), "s0: F0 F1\ns1: F0 F1\n");
  EXPECT_EQ(describe(make_forward_only_schedule(2, 1), true), "s0: F0 SF0\ns1: RF0 F0\n");
}

TEST(Schedule, SimulateReportsADeadlock) {
  Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 1);  // each stage now waits for the other:
  s.actions[0] = {{ActionKind::RecvBackward, 0, 0}, {ActionKind::Backward, 0, 0}};
  s.actions[1] = {{ActionKind::RecvForward, 0, 0}, {ActionKind::Forward, 0, 0}};
  EXPECT_THROW(simulate(s, 1.0, 2.0), Error);
}

TEST(Schedule, BubbleFractionAndFirstStagePeakAreTheClosedForms) {
  // The figures docs/ARCHITECTURE.md quotes. With forward 1/v and backward 2/v per chunk, every
  // stage idles (P-1)*3/v of a makespan (v*M + P-1)*3/v, so bubble_fraction() is (P-1)/(v*M + P-1)
  // for all three schedules (v = 1: GPipe, 1F1B). Stage 0 holds the most activations: M for GPipe,
  // min(P, M) for 1F1B, and for interleaved its whole warm-up plus one, 2(P-1) + (v-1)P + 1
  // forwards (all M*v when M = P), which the executor's slots and the memory estimate must cover.
  for (const Shape& shape : all_shapes()) {
    if (zero_bubble(shape.kind)) continue;  // their own tests below
    SCOPED_TRACE(name(shape));
    const int p = shape.stages;
    const int m = shape.micro_batches;
    const int v = shape.virtual_stages;
    const Schedule s = make(shape);
    const ScheduleSimulation sim = simulate(s, 1.0 / v, 2.0 / v);
    EXPECT_NEAR(sim.bubble_fraction(), (p - 1.0) / (v * m + p - 1.0), 1e-12);
    EXPECT_EQ(peak_in_flight(s)[0], promised_peak(shape, 0));
    if (::testing::Test::HasFailure()) return;  // one broken shape is enough to read
  }
}

// ---- zero-bubble schedules ----

TEST(ZeroBubble, H1TwoStagesByHand) {
  // The unit-cost timeline: stage 1 alternates F and B and defers W0 until F2 can arrive; stage 0
  // may hold P = 2 forwards not yet through W, so W0 runs before F2. 10 units = 3M + P - 1.
  const Schedule s = make_schedule(ScheduleKind::ZeroBubbleH1, 2, 3);
  EXPECT_EQ(s.actions[0], parse_actions("F0 SF0 F1 SF1 RB0 Bi0 W0 F2 SF2 RB1 Bi1 W1 RB2 Bi2 W2!"));
  EXPECT_EQ(s.actions[1], parse_actions("RF0 F0 Bi0 SB0 RF1 F1 Bi1 SB1 W0 RF2 F2 Bi2 SB2 W1 W2!"));
  EXPECT_DOUBLE_EQ(simulate(s, ComputeCosts{}).makespan, 10.0);
  EXPECT_EQ(describe(make_schedule(ScheduleKind::ZeroBubbleH1, 2, 2)), "s0: F0 F1 Bi0 W0 Bi1 W1\ns1: F0 Bi0 F1 Bi1 W0 W1\n");
  EXPECT_EQ(describe(make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4)),
            "s0: F0 F1 Bi0 W0 F2 Bi1 W1 F3 Bi2 W2 Bi3 W3\n"
            "s1: F0 Bi0 F1 Bi1 W0 F2 Bi2 W1 F3 Bi3 W2 W3\n");
}

TEST(ZeroBubble, VTwoStagesByHand) {
  // Stage 0 holds global chunks 0 (embedding) and 3 (head), stage 1 chunks 1 and 2: the turn
  // 1 -> 2 is stage 1 sending to itself (SF0.0 then RF0.1 on stage 1).
  const Schedule s = make_schedule(ScheduleKind::ZeroBubbleV, 2, 2, 2);
  EXPECT_EQ(s.actions[0], parse_actions("F0.0 SF0.0  F1.0 SF1.0  RF0.1 F0.1 Bi0.1 SB0.1  RF1.1 F1.1 Bi1.1 SB1.1 "
                                        "RB0.0 Bi0.0 W0.1  RB1.0 Bi1.0 W1.1! W0.0 W1.0!"));
  EXPECT_EQ(s.actions[1], parse_actions("RF0.0 F0.0 SF0.0  RF1.0 RF0.1 F0.1 SF0.1  F1.0 SF1.0  RF1.1 F1.1 SF1.1 "
                                        "RB0.1 Bi0.1 SB0.1  RB0.0 Bi0.0 SB0.0  RB1.1 Bi1.1 SB1.1  RB1.0 Bi1.0 SB1.0 "
                                        "W0.1 W0.0 W1.1! W1.0!"));
  EXPECT_EQ(s.peer(1, Action{ActionKind::SendForward, 0, 0}), (ChunkRef{1, 1}));
  EXPECT_EQ(s.tag(1, Action{ActionKind::SendForward, 0, 0}), s.tag(1, Action{ActionKind::RecvForward, 0, 1}));
  EXPECT_EQ(describe(make_schedule(ScheduleKind::ZeroBubbleV, 2, 4, 2)),
            "s0: F0.0 F1.0 F2.0 F0.1 Bi0.1 W0.1 F1.1 Bi0.0 Bi1.1 W0.0 F3.0 Bi1.0 W1.1 F2.1 Bi2.1 W1.0 W2.1 Bi2.0 "
            "W2.0 F3.1 Bi3.1 W3.1 Bi3.0 W3.0\n"
            "s1: F0.0 F0.1 F1.0 F1.1 Bi0.1 Bi0.0 W0.1 F2.0 Bi1.1 Bi1.0 W0.0 F2.1 W1.1 F3.0 Bi2.1 Bi2.0 W1.0 F3.1 "
            "W2.1 W2.0 Bi3.1 Bi3.0 W3.1 W3.0\n");
}

TEST(ZeroBubble, VPlacesTheChunksInAV) {
  const Schedule s = make_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 2);
  EXPECT_EQ(s.placement, ChunkPlacement::VShape);
  EXPECT_EQ(s.global_chunk(0, 0), 0);
  EXPECT_EQ(s.global_chunk(0, 1), 7);
  EXPECT_EQ(s.global_chunk(3, 0), 3);
  EXPECT_EQ(s.global_chunk(3, 1), 4);
  EXPECT_EQ(s.chunk_at(5), (ChunkRef{2, 1}));
  EXPECT_TRUE(s.is_first_chunk(0, 0));
  EXPECT_TRUE(s.is_last_chunk(0, 1));
  EXPECT_FALSE(s.is_last_chunk(3, 1));
  // Chunk 1 runs back up: its activations go to the stage before, its gradients to the stage after.
  EXPECT_EQ(s.peer(2, Action{ActionKind::SendForward, 0, 1}), (ChunkRef{1, 1}));
  EXPECT_EQ(s.peer(2, Action{ActionKind::SendBackward, 0, 1}), (ChunkRef{3, 1}));
  EXPECT_EQ(s.peer(3, Action{ActionKind::SendBackward, 0, 1}), (ChunkRef{3, 0}));  // the turn, to itself
  EXPECT_EQ(s.tag(2, Action{ActionKind::SendForward, 5, 1}), (5 * 8 + 6) * 2);
}

TEST(ZeroBubble, H1TakesTheTheoreticalTime) {
  // F = B = W = 1 (the unit the lists are built for): every stage idles (P-1)(F+B-W) = P-1 when
  // M >= P, a third of 1F1B's (P-1)(F+B+W); the step is 3M + P - 1. 1F1B's in-flight count before
  // B on every stage, P forwards before W.
  for (int p = 1; p <= 8; ++p) {
    for (int m = p; m <= 16; ++m) {
      SCOPED_TRACE(name({ScheduleKind::ZeroBubbleH1, p, m, 1}));
      const ScheduleSimulation sim = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, p, m), ComputeCosts{});
      EXPECT_DOUBLE_EQ(sim.makespan, 3.0 * m + p - 1);
      for (int stage = 0; stage < p; ++stage) EXPECT_DOUBLE_EQ(sim.idle[stage], p - 1.0);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(ZeroBubble, VReachesTheLeastBubble) {
  // Per chunk F = B = W = 1/2 (a stage's work 3 per micro-batch, as for ZB-H1): from M >= 2P on,
  // the step is 3M + (P-1)/2, every stage idling (P-1)/2: the least possible, as stage P-1 cannot
  // start before the first micro-batch crossed P-1 chunks. Activations: at most 2P chunk slots.
  for (int p = 1; p <= 8; ++p) {
    for (int m = 2 * p; m <= 24; ++m) {
      SCOPED_TRACE(name({ScheduleKind::ZeroBubbleV, p, m, 2}));
      const Schedule s = make_schedule(ScheduleKind::ZeroBubbleV, p, m, 2);
      const ScheduleSimulation sim = simulate(s, ComputeCosts{0.5, 0.5, 0.5});
      EXPECT_DOUBLE_EQ(sim.makespan, 3.0 * m + (p - 1) / 2.0);
      const std::vector<int> peaks = peak_in_flight(s);
      EXPECT_EQ(*std::max_element(peaks.begin(), peaks.end()), 2 * p);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(ZeroBubble, BubblesAgainst1F1BAtFourStagesEightMicroBatches) {
  // F = B = W, P = 4, M = 8 (the bench's default shape). 1F1B idles 9 of 33 units (0.273). ZB-H1
  // idles 3 of 27, 11/27 = 0.407 of 1F1B's fraction: the floor for 1F1B's memory (stage 0 holds at
  // most P = 4 forwards before B and the first gradient comes back at 2P-1 = 7, so it idles >= 3),
  // so 0.4x cannot be met. ZB-V idles 1.5 of 25.5 (0.216x), also the floor (stage 3's first input
  // arrives after 3 chunk forwards), so 0.15x cannot be met either.
  const double one_f_one_b = simulate(make_schedule(ScheduleKind::OneFOneB, 4, 8), ComputeCosts{}).bubble_fraction();
  const double h1 = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8), ComputeCosts{}).bubble_fraction();
  const double v = simulate(make_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 2), ComputeCosts{0.5, 0.5, 0.5}).bubble_fraction();
  EXPECT_NEAR(one_f_one_b, 9.0 / 33.0, 1e-12);
  EXPECT_NEAR(h1, 3.0 / 27.0, 1e-12);
  EXPECT_NEAR(v, 1.5 / 25.5, 1e-12);
  EXPECT_LE(h1 / one_f_one_b, 0.41);
  EXPECT_LE(v / one_f_one_b, 0.22);
}

TEST(ZeroBubble, PeaksAtFourStagesEightMicroBatches) {
  // ZB-H1: P forwards before W on every stage (1F1B's stage-0 peak); W deferred by up to s + 1
  // micro-batches on stage s. ZB-V: 2P chunk slots everywhere.
  const Schedule h1 = make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8);
  EXPECT_EQ(peak_in_flight(h1), (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(peak_deferred_weight(h1), (std::vector<int>{1, 2, 3, 4}));
  const Schedule v = make_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 2);
  EXPECT_EQ(peak_in_flight(v), (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(peak_deferred_weight(v), (std::vector<int>{3, 4, 4, 6}));
  EXPECT_EQ(peak_deferred_weight(make_schedule(ScheduleKind::OneFOneB, 4, 8)), (std::vector<int>{0, 0, 0, 0}));
}

TEST(ZeroBubble, RejectsTheWrongVirtualStages) {
  auto message_of = [](auto make_it) {
    try {
      make_it();
    } catch (const UsageError& e) {
      return e.message();
    }
    return std::string("no usage error");
  };
  EXPECT_EQ(message_of([] { make_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 1); }),
            "the zb-v schedule needs --virtual-stages 2 (two model chunks per stage, placed in a V), got 1");
  EXPECT_EQ(message_of([] { make_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 3); }),
            "the zb-v schedule needs --virtual-stages 2 (two model chunks per stage, placed in a V), got 3");
  EXPECT_EQ(message_of([] { make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8, 2); }),
            "the zb-h1 schedule needs --virtual-stages 1, got 2");
  EXPECT_EQ(message_of([] { make_forward_only_schedule(4, 8, 3, ChunkPlacement::VShape); }),
            "the V placement (zb-v) needs 2 virtual stages, got 3");
}

// The same computations, every receive moved directly before its computation.
Schedule with_receives_directly_before(Schedule s) {
  for (int stage = 0; stage < s.stages; ++stage) {
    std::vector<Action> out;
    for (const Action& a : s.actions[stage]) {
      if (is_receive(a.kind)) continue;
      if (a.kind == ActionKind::Forward && !s.is_first_chunk(stage, a.chunk))
        out.push_back({ActionKind::RecvForward, a.micro, a.chunk});
      if (makes_input_grad(a.kind) && !s.is_last_chunk(stage, a.chunk))
        out.push_back({ActionKind::RecvBackward, a.micro, a.chunk});
      out.push_back(a);
    }
    s.actions[stage] = out;
  }
  return s;
}

TEST(Schedule, GroupedCheckNamesTheStuckStages) {
  // Interleaved with every receive directly before its computation (the lists before the grouped
  // check): fine with sends that never block, a deadlock once each run of messages is one batch.
  // Stage 0 sends B0.1's gradient in a batch stage 1 can only match after F2.0, and stage 1's
  // batch holds B1.1's gradient, which stage 0 receives only after F3.0.
  const Schedule old = with_receives_directly_before(make_schedule(ScheduleKind::Interleaved, 2, 4, 2));
  EXPECT_NO_THROW(simulate(old, 1.0, 2.0));
  try {
    check_grouped_messages(old);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("s0 waits in [SB0.1]; s1 waits in [SB1.1 RF2.0];"), std::string::npos) << e.message();
  }
  // What make_schedule does instead: stage 1 receives that gradient one computation early.
  const Schedule s = make_schedule(ScheduleKind::Interleaved, 2, 4, 2);
  EXPECT_NO_THROW(check_grouped_messages(s));
  EXPECT_EQ(s.actions[1], parse_actions("RF0.0 F0.0 SF0.0  RF1.0 F1.0 SF1.0  RF0.1 F0.1  B0.1 SB0.1  RF1.1 F1.1 "
                                        "B1.1 SB1.1 RF2.0 RB0.0  F2.0 SF2.0 RF3.0  B0.0 SB0.0 RB1.0  F3.0 SF3.0 RF2.1 "
                                        "B1.0 SB1.0  F2.1  B2.1 SB2.1  RF3.1 F3.1  B3.1! SB3.1  RB2.0 B2.0 SB2.0 "
                                        "RB3.0 B3.0! SB3.0"));
}

TEST(Schedule, SimulateChargesSplitAndFusedBackwards) {
  // A fused Backward costs B + W; the two-cost form splits the backward in halves.
  const Schedule fused = make_schedule(ScheduleKind::OneFOneB, 3, 5);
  EXPECT_DOUBLE_EQ(simulate(fused, ComputeCosts{1, 0.5, 1.5}).makespan, simulate(fused, 1.0, 2.0).makespan);
  EXPECT_DOUBLE_EQ(simulate(fused, ComputeCosts{1, 1, 1}).makespan, 7 * 3.0);
  const Schedule split = make_schedule(ScheduleKind::ZeroBubbleH1, 3, 5);
  const ScheduleSimulation sim = simulate(split, ComputeCosts{1, 2, 0.5});
  for (double busy : sim.busy) EXPECT_DOUBLE_EQ(busy, 5 * 3.5);
}

}  // namespace
}  // namespace mt
