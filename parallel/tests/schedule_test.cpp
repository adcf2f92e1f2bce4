// Pipeline schedules: every property the executor relies on (each computation once, messages matched
// in order per stage pair, no deadlock, data dependencies, bounded activations), checked for many
// shapes of all three kinds; their unit-cost timing against the theory; a few lists by hand.
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

// GPipe and 1F1B: P 1..8, M 1..16. Interleaved: P 1..8, v 2..4, M every multiple of P up to 24.
std::vector<Shape> all_shapes() {
  std::vector<Shape> shapes;
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      shapes.push_back({ScheduleKind::GPipe, p, m, 1});
      shapes.push_back({ScheduleKind::OneFOneB, p, m, 1});
    }
    for (int v = 2; v <= 4; ++v) {
      for (int m = p; m <= 24; m += p) shapes.push_back({ScheduleKind::Interleaved, p, m, v});
    }
  }
  return shapes;
}

Schedule make(const Shape& s) { return make_schedule(s.kind, s.stages, s.micro_batches, s.virtual_stages); }

using Key = std::tuple<int, int>;  // (micro, local chunk)

// Sends directly follow, receives directly precede the computation they belong to, exactly when the
// chunk has a neighbour in that direction; nothing else is in the list.
void expect_messages_around_computations(const Schedule& s, bool forward_only) {
  for (int stage = 0; stage < s.stages; ++stage) {
    const auto& list = s.actions[stage];
    std::size_t computations = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      ASSERT_GE(a.micro, 0);
      ASSERT_LT(a.micro, s.micro_batches);
      ASSERT_GE(a.chunk, 0);
      ASSERT_LT(a.chunk, s.virtual_stages);
      if (!is_compute(a.kind)) continue;
      ++computations;
      const bool fwd = a.kind == ActionKind::Forward;
      ASSERT_TRUE(fwd || !forward_only);
      const bool needs_receive = fwd ? !s.is_first_chunk(stage, a.chunk) : !s.is_last_chunk(stage, a.chunk);
      const bool needs_send = fwd ? !s.is_last_chunk(stage, a.chunk) : !s.is_first_chunk(stage, a.chunk);
      const ActionKind receive = fwd ? ActionKind::RecvForward : ActionKind::RecvBackward;
      const ActionKind send = fwd ? ActionKind::SendForward : ActionKind::SendBackward;
      const bool has_receive = i > 0 && list[i - 1] == Action{receive, a.micro, a.chunk};
      const bool has_send = i + 1 < list.size() && list[i + 1] == Action{send, a.micro, a.chunk};
      EXPECT_EQ(has_receive, needs_receive) << "stage " << stage << " " << to_string(a, true);
      EXPECT_EQ(has_send, needs_send) << "stage " << stage << " " << to_string(a, true);
      computations += static_cast<std::size_t>(has_receive) + static_cast<std::size_t>(has_send);
    }
    EXPECT_EQ(computations, list.size()) << "stray messages on stage " << stage;
  }
}

// Every (micro, chunk) forward once and backward once, the backward after the forward.
void expect_each_computation_once(const Schedule& s) {
  for (int stage = 0; stage < s.stages; ++stage) {
    std::map<Key, int> forward_at;
    std::map<Key, int> backward_at;
    const auto& list = s.actions[stage];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (!is_compute(a.kind)) continue;
      auto& seen = a.kind == ActionKind::Forward ? forward_at : backward_at;
      EXPECT_TRUE(seen.emplace(Key{a.micro, a.chunk}, i).second) << "twice: " << to_string(a, true);
    }
    const std::size_t all = static_cast<std::size_t>(s.micro_batches * s.virtual_stages);
    EXPECT_EQ(forward_at.size(), all) << "stage " << stage;
    EXPECT_EQ(backward_at.size(), s.forward_only ? 0 : all) << "stage " << stage;
    for (const auto& [key, at] : backward_at) EXPECT_LT(forward_at.at(key), at) << "stage " << stage;
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

// Forwards done minus backwards done, at most: GPipe all, 1F1B P - s, interleaved its warm-up + 1.
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
  }
  return 0;
}

TEST(ScheduleKind, ParsesAndNamesTheThreeSchedules) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
    EXPECT_EQ(parse_schedule_kind(schedule_kind_name(kind)), kind);
  }
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::OneFOneB), "1f1b");
  try {
    parse_schedule_kind("zigzag");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "unknown pipeline schedule 'zigzag' (expected gpipe, 1f1b or interleaved)");
  }
}

TEST(Schedule, EveryShapeKeepsTheExecutorsRules) {
  for (const Shape& shape : all_shapes()) {
    SCOPED_TRACE(name(shape));
    const Schedule s = make(shape);
    ASSERT_EQ(static_cast<int>(s.actions.size()), shape.stages);
    expect_messages_around_computations(s, false);
    expect_each_computation_once(s);
    expect_sends_match_receives_in_order(s);
    expect_runs_without_deadlock(s);
    const std::vector<int> peaks = peak_in_flight(s);
    for (int stage = 0; stage < shape.stages; ++stage) {
      EXPECT_LE(peaks[stage], promised_peak(shape, stage)) << "stage " << stage;
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
        {"RB", ActionKind::RecvBackward}, {"B", ActionKind::Backward}, {"SB", ActionKind::SendBackward}};
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
        SCOPED_TRACE(name({ScheduleKind::GPipe, p, m, v}) + " forward only");
        const Schedule s = make_forward_only_schedule(p, m, v);
        EXPECT_TRUE(s.forward_only);
        expect_messages_around_computations(s, true);
        expect_each_computation_once(s);
        expect_sends_match_receives_in_order(s);
        expect_runs_without_deadlock(s);
        const ScheduleSimulation sim = simulate(s, 1.0, 2.0);
        EXPECT_DOUBLE_EQ(sim.busy[0], m * v * 1.0);
        if (::testing::Test::HasFailure()) return;
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

}  // namespace
}  // namespace mt
