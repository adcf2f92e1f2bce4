// held_slots: the activation slots each chunk keeps as the pipeline executor runs a schedule, worked
// out by hand for small schedules (the executor's own peaks are checked against real runs by
// memory_bound_test).
#include <gtest/gtest.h>

#include "perf/memory_model.h"

namespace mt::perf {
namespace {

using Slots = std::vector<std::vector<int>>;

TEST(HeldSlots, OneStageOneChunkKeepsOneSlot) {
  // F0 B0 F1 B1 ...: each slot is released before the next forward takes one; no messages.
  const Schedule train = make_schedule(ScheduleKind::OneFOneB, 1, 4);
  const Schedule eval = make_forward_only_schedule(1, 4);
  EXPECT_EQ(held_slots(train, &eval), (Slots{{1}}));
}

TEST(HeldSlots, OneFOneBAddsTheEarlyReceiveAndTheSendStillInFlight) {
  // Stage 0 (P = 2, M = 4): F0 F1 B0 F2 B1 F3 B2 B3 holds 2, as the schedule says (no receive
  // before its forwards, no send after its backwards). Stage 1: F0 B0 F1 B1 ...; during B1 it holds
  // slot 0 (B0's send may not have completed), slot 1, and slot 2 (F2's receive, posted early).
  const Schedule train = make_schedule(ScheduleKind::OneFOneB, 2, 4);
  EXPECT_EQ(held_slots(train, nullptr), (Slots{{2}, {3}}));
  // Validation: stage 0 sends without waiting until 2 (= stages) slots are done; before F2 it
  // waits for their sends and releases both, so F2 and F3 again hold 2. Stage 1 has nothing to send,
  // but before F1 it posts F2's receive (taking slot 2) and only then releases slot 0: 3 at once.
  const Schedule eval = make_forward_only_schedule(2, 4);
  EXPECT_EQ(held_slots(eval, nullptr), (Slots{{2}, {3}}));
  EXPECT_EQ(held_slots(train, &eval), (Slots{{2}, {3}}));
}

TEST(HeldSlots, GPipeHoldsEveryMicroBatch) {
  const Schedule train = make_schedule(ScheduleKind::GPipe, 2, 3);
  EXPECT_EQ(held_slots(train, nullptr), (Slots{{3}, {3}}));
}

TEST(HeldSlots, ChunksOfOneStageCountApartAndSelfSendsHoldUntilCopied) {
  // One stage, two chunks: chunk 0's forward output goes to chunk 1 through a copy at chunk 1's
  // receive, chunk 1's input gradient back to chunk 0 at chunk 0's. Every chunk keeps its own pool.
  const Schedule train = make_schedule(ScheduleKind::Interleaved, 1, 2, 2);
  const Slots slots = held_slots(train, nullptr);
  ASSERT_EQ(slots.size(), 1u);
  ASSERT_EQ(slots[0].size(), 2u);
  EXPECT_GE(slots[0][0], 1);
  EXPECT_GE(slots[0][1], 1);
  EXPECT_LE(slots[0][0] + slots[0][1], 4);  // never more than M per chunk
}

TEST(Memory, ValidationRunAheadIsBoundedByTheStages) {
  ModelShape m = gpt_preset("tiny");
  m.vocab_size = 256;
  TrainingShape t;
  t.seq_len = 64;
  t.global_batch = 8;
  Layout l;
  l.pp = 2;
  l.micro_batch = 1;  // M = 8
  const LayoutPlan plan(l, layout_dims(m, t.seq_len), l.world_size(), t.global_batch);
  const Schedule train = make_schedule(l.schedule, l.pp, 8);
  const Schedule eval = make_forward_only_schedule(l.pp, 8);
  const MemoryBreakdown without = estimate_stage_memory(m, t, plan, Cluster{}, held_slots(train, nullptr), 0);
  const MemoryBreakdown with = estimate_stage_memory(m, t, plan, Cluster{}, held_slots(train, &eval), 0);
  // Without the executor's wait, the first stage would keep all 8 micro-batches of validation.
  EXPECT_EQ(held_slots(eval, nullptr)[0], std::vector<int>{2});
  EXPECT_EQ(without.in_flight, 2);
  EXPECT_EQ(with.in_flight, 2);
  EXPECT_DOUBLE_EQ(with.activations, without.activations);
  EXPECT_EQ(with.parameters, without.parameters);
}

}  // namespace
}  // namespace mt::perf
