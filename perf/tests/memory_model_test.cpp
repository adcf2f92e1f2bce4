// held_slots: the activation slots each chunk keeps as the pipeline executor runs a schedule, worked
// out by hand for small schedules (the executor's own peaks are checked against real runs by
// memory_bound_test).
#include <gtest/gtest.h>

#include "perf/memory_model.h"

#include <cmath>

#include "models/head_chunks.h"
#include "perf/cluster.h"
#include "perf/cost_model.h"

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

// The executor posts a run of messages between two computations as one batch, the run after a
// computation already before it: every RecvForward in the run takes its slot then, not only the one
// directly before the next forward. Stage 1 below: before B0 it posts [SB0 RF1 RF2], taking slots 1
// and 2 while slot 0 is still in use: 3 (a receive counted only directly before its forward: 2).
TEST(HeldSlots, ARunOfReceivesTakesAllItsSlotsOneComputationEarly) {
  using K = ActionKind;
  Schedule s;
  s.kind = ScheduleKind::GPipe;
  s.stages = 2;
  s.micro_batches = 3;
  s.actions = {{{K::Forward, 0, 0}, {K::SendForward, 0, 0}, {K::Forward, 1, 0}, {K::SendForward, 1, 0},
                {K::Forward, 2, 0}, {K::SendForward, 2, 0}, {K::RecvBackward, 0, 0}, {K::Backward, 0, 0},
                {K::RecvBackward, 1, 0}, {K::Backward, 1, 0}, {K::RecvBackward, 2, 0}, {K::Backward, 2, 0}},
               {{K::RecvForward, 0, 0}, {K::Forward, 0, 0}, {K::Backward, 0, 0}, {K::SendBackward, 0, 0},
                {K::RecvForward, 1, 0}, {K::RecvForward, 2, 0}, {K::Forward, 1, 0}, {K::Backward, 1, 0},
                {K::SendBackward, 1, 0}, {K::Forward, 2, 0}, {K::Backward, 2, 0}, {K::SendBackward, 2, 0}}};
  EXPECT_EQ(held_slots(s, nullptr)[1], std::vector<int>{3});
}

// ZB-H1, P = 2, M = 4, stage 1: RF0 F0 Bi0 SB0 RF1 F1 Bi1 SB1 W0 RF2 F2 ... A slot lives until its W:
// during W0 it holds slot 0, slot 1 (B done, W pending) and slot 2 (F2's receive, posted before W0):
// 3. Released at B, as the fused Backward is, it would hold 2. Stage 0 holds 2 (F0 F1 before Bi0).
TEST(HeldSlots, ZeroBubbleKeepsASlotUntilItsW) {
  const Schedule train = make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4);
  EXPECT_EQ(held_slots(train, nullptr), (Slots{{2}, {3}}));
}

ModelShape tiny_model() {
  ModelShape m = gpt_preset("tiny");  // 4 layers, 4 heads, 64 channels
  m.vocab_size = 256;
  return m;
}

// With the backward split, every slot also keeps what B leaves for W: per layer 4 [N, C] + [N, 3C]
// (tp 1), the head's [N, C], of the compute dtype. Tiny model, N = 2 x 32 = 64 rows, fp32.
TEST(Memory, ZeroBubbleCountsWhatBKeepsForW) {
  const ModelShape m = tiny_model();
  TrainingShape t;
  t.seq_len = 32;
  t.global_batch = 8;
  Layout l;
  l.pp = 2;
  l.micro_batch = 2;
  const LayoutPlan fused(l, layout_dims(m, t.seq_len), l.world_size(), t.global_batch);
  l.schedule = ScheduleKind::ZeroBubbleH1;
  const LayoutPlan split(l, layout_dims(m, t.seq_len), l.world_size(), t.global_batch);
  ASSERT_EQ(split.chunk_layers(), (std::vector<int>{2, 2}));
  const Slots slots{{2}, {3}};  // the same slots for both: only what a slot holds differs
  const double NC = 64 * 64 * 4.0;
  for (int stage : {0, 1}) {
    const MemoryBreakdown a = estimate_stage_memory(m, t, fused, Cluster{}, slots, stage);
    const MemoryBreakdown b = estimate_stage_memory(m, t, split, Cluster{}, slots, stage);
    const double per_slot = 2 * (4 * NC + 3 * NC);  // the head's dlnf (stage 1) is the slot's already
    EXPECT_EQ(a.deferred_weight, 0.0);
    EXPECT_EQ(b.deferred_weight, slots[stage][0] * per_slot) << "stage " << stage;
    EXPECT_EQ(b.activations - a.activations, b.deferred_weight);
    EXPECT_EQ(b.total() - a.total(), b.deferred_weight);
  }
}

// zb-v's V: stage 0 holds global chunks 0 (the embedding) and 3 (the head), stage 1 chunks 1 and 2.
TEST(Memory, ZeroBubbleVPutsTheEmbeddingAndTheHeadOnStageZero) {
  const ModelShape m = tiny_model();
  TrainingShape t;
  t.seq_len = 32;
  t.global_batch = 8;
  Layout l;
  l.pp = 2;
  l.micro_batch = 2;
  l.schedule = ScheduleKind::ZeroBubbleV;
  const LayoutPlan plan(l, layout_dims(m, t.seq_len), l.world_size(), t.global_batch);
  ASSERT_EQ(plan.layout().virtual_stages, 2);
  const Slots slots = held_slots(plan, false);
  const MemoryBreakdown s0 = estimate_stage_memory(m, t, plan, Cluster{}, slots, 0);
  const MemoryBreakdown s1 = estimate_stage_memory(m, t, plan, Cluster{}, slots, 1);
  const Layout& resolved = plan.layout();
  EXPECT_EQ(s0.logits, logits_bytes(m, t, resolved, true));  // the head is stage 0's chunk 1: one chunk
  EXPECT_EQ(s1.logits, 0.0);
  const double head = weight_inputs_bytes(m, t, resolved, 1, true), layer = weight_inputs_bytes(m, t, resolved, 1, false);
  EXPECT_EQ(s0.activations, slots[0][0] * (slot_bytes(m, t, resolved, 1, true, false) + layer) +
                                slots[0][1] * (slot_bytes(m, t, resolved, 1, false, true) + head));
  EXPECT_EQ(s1.activations, (slots[1][0] + slots[1][1]) * (slot_bytes(m, t, resolved, 1, false, false) + layer));
  // Stage 0 also holds the token and position embeddings and the final norm, once.
  EXPECT_EQ(s0.parameters - s1.parameters, 4.0 * (256 * 64 + 64 * 64 + 2 * 64));
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

namespace mt::perf {
namespace {

// The head keeps one row chunk of logits whatever the slots (models/head_chunks.h): GPT-2 at
// T = 1024, 8 sequences a micro-batch, 1F1B over 2 stages (the last keeps one slot, the first two),
// fp32: at most 64 MiB on a CPU (25 chunks of 328 rows), 1 GiB on a GPU (2 chunks of 4096 rows),
// never the 1.5 GiB of [8192, 50304].
TEST(Memory, TheHeadKeepsOneChunkOfLogits) {
  const ModelShape m = gpt_preset("gpt2");
  TrainingShape t;
  t.seq_len = 1024;
  t.global_batch = 16;
  Layout l;
  l.pp = 2;
  l.micro_batch = 8;
  const LayoutPlan plan(l, layout_dims(m, t.seq_len), l.world_size(), t.global_batch);
  const auto slots = held_slots(plan, false);
  const double row = 50304 * 4.0;
  const MemoryBreakdown cpu = estimate_stage_memory(m, t, plan, cluster_preset("cpu-2core"), slots, 1);
  const MemoryBreakdown gpu = estimate_stage_memory(m, t, plan, cluster_preset("dgx-a100"), slots, 1);
  EXPECT_EQ(cpu.logits, std::ceil(head_chunk_rows(8192, 50304, 4, false) * row / 256) * 256);
  EXPECT_LE(cpu.logits, static_cast<double>(kHeadChunkBytesCpu));
  EXPECT_EQ(gpu.logits, std::ceil(head_chunk_rows(8192, 50304, 4, true) * row / 256) * 256);
  EXPECT_LE(gpu.logits, static_cast<double>(kHeadChunkBytesCuda));
  EXPECT_EQ(estimate_stage_memory(m, t, plan, cluster_preset("cpu-2core"), slots, 0).logits, 0.0);
}

}  // namespace
}  // namespace mt::perf

namespace mt::perf {
namespace {

// Context parallelism leaves each rank seq_len / cp rows of every sequence: its activations are those
// of the shorter sequence (ring attention keeps only its log-sum-exp, not [T, T] probabilities),
// while the parameters, gradients and AdamW moments stay replicated over cp.
TEST(Memory, ContextParallelHalvesTheActivationsAtTheSameSequence) {
  ModelShape m = gpt_preset("gpt2");
  m.max_seq_len = 2048;
  TrainingShape t;
  t.seq_len = 2048;
  t.global_batch = 4;
  Layout one;
  one.dp = 2;
  Layout two = one;
  two.cp = 2;
  // Without the attention probabilities (selective recomputation drops them), exactly half, but for
  // ring attention's log-sum-exp [B, H, T/cp] fp32, which the slot keeps.
  one.recompute = two.recompute = Recompute::Selective;
  const double lse = 1.0 * m.heads * (t.seq_len / 2) * 4.0;
  EXPECT_EQ(2 * (layer_bytes(m, t, two) - lse), layer_bytes(m, t, one));
  TrainingShape half = t;
  half.seq_len = 1024;
  EXPECT_EQ(layer_bytes(m, t, two) - lse, layer_bytes(m, half, one));
  // Whole steps: the probabilities [B, H, T, T] go too, so more than half is saved.
  one.recompute = two.recompute = Recompute::None;
  const Cluster c = cluster_preset("dgx-a100");
  const Prediction a = predict_step(m, t, one, c), b = predict_step(m, t, two, c);
  EXPECT_LE(b.memory.activations, a.memory.activations / 2);
  // (The flat buffers pad to a multiple of dp x cp instead of dp: a few elements.)
  EXPECT_NEAR(b.memory.parameters, a.memory.parameters, 512);
  EXPECT_NEAR(b.memory.gradients, a.memory.gradients, 512);
  EXPECT_EQ(b.memory.optimizer, a.memory.optimizer);
}

}  // namespace
}  // namespace mt::perf
