// Pipeline schedules as data: for each stage, the ordered receives, forwards, backwards and sends of
// one optimizer step. The executor follows the lists; tests and benchmarks simulate them.
// defines: ActionKind, Action, ChunkRef, Schedule, make_schedule, make_forward_only_schedule, describe,
//          to_string, is_compute, is_send, is_receive, makes_input_grad, makes_weight_grad, ComputeCosts,
//          ScheduleSimulation, simulate, check_grouped_messages, peak_in_flight, peak_deferred_weight
#pragma once

#include <string>
#include <vector>

#include "parallel/chunk_placement.h"
#include "parallel/schedule_kind.h"

namespace mt {

// Backward is a chunk's whole backward on a micro-batch. The zero-bubble schedules split it:
// BackwardInput (B) computes the input gradients (what SendBackward sends) and keeps what the
// weight gradients need; BackwardWeight (W) computes those later, off the critical path.
enum class ActionKind { RecvForward, Forward, SendForward, RecvBackward, Backward, SendBackward, BackwardInput, BackwardWeight };

constexpr bool is_compute(ActionKind k) {
  return k == ActionKind::Forward || k == ActionKind::Backward || k == ActionKind::BackwardInput ||
         k == ActionKind::BackwardWeight;
}
// A computation after which the chunk's input gradient exists (a SendBackward may follow).
constexpr bool makes_input_grad(ActionKind k) { return k == ActionKind::Backward || k == ActionKind::BackwardInput; }
// A computation after which the micro-batch's weight gradients are in (its activations may go).
constexpr bool makes_weight_grad(ActionKind k) { return k == ActionKind::Backward || k == ActionKind::BackwardWeight; }
constexpr bool is_send(ActionKind k) { return k == ActionKind::SendForward || k == ActionKind::SendBackward; }
constexpr bool is_receive(ActionKind k) { return k == ActionKind::RecvForward || k == ActionKind::RecvBackward; }

struct Action {
  ActionKind kind;
  int micro;
  int chunk;  // LOCAL chunk index on this stage, 0..virtual_stages-1
  // On the computation (Backward or BackwardWeight) after which this chunk's parameter gradients
  // are complete for the step: the data-parallel reduction of the chunk's parameters may start.
  bool completes_chunk = false;
  bool operator==(const Action&) const = default;
};

// "F3", "B3", "RF3", "SF3", "RB3", "SB3", "Bi3" (BackwardInput), "W3" (BackwardWeight); with model
// chunks the local chunk follows: "F3.1".
std::string to_string(const Action& action, bool with_chunk = false);

// One model chunk: a stage and its local chunk index.
struct ChunkRef {
  int stage;
  int chunk;
  bool operator==(const ChunkRef&) const = default;
};

// P stages with v model chunks each. Which global chunk a stage's local chunk holds is the
// schedule's placement (parallel/chunk_placement.h): looped, g = chunk * P + stage (Megatron's
// interleaving), or for ZB-V a V (chunk 0 down the stages, chunk 1 back up, so global chunks P-1
// and P are both on stage P-1). Global chunk 0 holds the embedding, P*v-1 the head and loss.
// Activations flow g -> g+1, gradients g+1 -> g. Rules every list obeys ("B" below is the
// computation that makes the input gradient: Backward, or BackwardInput in the zero-bubble lists):
//  - per (micro, chunk): Forward once, then either Backward once, or BackwardInput and later
//    BackwardWeight once each (the zero-bubble kinds; the others use Backward only);
//  - SendForward(m, c) comes directly after Forward(m, c) unless (stage, c) is the last chunk,
//    SendBackward directly after B unless it is the first chunk: a run of messages holds at most
//    one send, at its start;
//  - RecvForward(m, c) comes before Forward(m, c) unless first, RecvBackward after Forward(m, c)
//    and before B unless last. GPipe, 1F1B, ZB-H1 and forward-only put each receive directly
//    before its computation. Interleaved does too, except the receives that would deadlock grouped
//    batches (M > P), which move a few computations earlier, into the run of messages where their
//    peer's send is waited for (move_receives_until_batches_complete). ZB-V puts each receive in
//    the run of messages where its send happens in ZB-V's unit-cost simulation (chunk 0's
//    activations and chunk 1's gradients share a pair of stages, so receives directly before their
//    computations would not come in the sends' order); receives in one run come in send order;
//  - for every ordered pair of stages a -> b, the sends from a to b, in a's order, are exactly the
//    receives on b from a, in b's order (NCCL matches point-to-point messages in issue order);
//  - run with sends that never block and receives that block, all stages finish (no deadlock);
//  - run with each maximal run of messages between two computations as one batch that completes
//    only when all its messages are matched (NCCL group semantics), all stages finish
//    (check_grouped_messages);
//  - Action::completes_chunk is set on exactly the last Backward or BackwardWeight of each local chunk.
// With P = 1 and v >= 2 the chunk-to-chunk messages go from the stage to itself, as does the V's
// turn at stage P-1 in ZB-V; a stage's message to itself never blocks (the executor copies it).
struct Schedule {
  ScheduleKind kind = ScheduleKind::GPipe;
  int stages = 1;
  int micro_batches = 1;
  int virtual_stages = 1;
  bool forward_only = false;                  // evaluation: forwards and their messages only
  std::vector<std::vector<Action>> actions;   // per stage, in execution order
  ChunkPlacement placement = ChunkPlacement::Looped;

  int total_chunks() const { return stages * virtual_stages; }
  int global_chunk(int stage, int chunk) const { return global_chunk_of(placement, stages, stage, chunk); }
  ChunkRef chunk_at(int global) const {
    const LocalChunk at = local_chunk_of(placement, stages, global);
    return {at.stage, at.chunk};
  }
  bool is_first_chunk(int stage, int chunk) const { return global_chunk(stage, chunk) == 0; }
  bool is_last_chunk(int stage, int chunk) const { return global_chunk(stage, chunk) == total_chunks() - 1; }

  // The other end of a send or receive executed on `stage`: where a SendForward goes, where a
  // RecvForward comes from, and so on (the peer's stage and its local chunk).
  ChunkRef peer(int stage, const Action& action) const;
  // The tag of the message a send or receive carries, the same at both ends and unique in one step:
  // (micro * total_chunks() + destination global chunk) * 2 + (0 forward, 1 backward),
  // in [0, tag_count()). Lets an executor post receives early and match them by tag.
  int tag(int stage, const Action& action) const;
  int tag_count() const { return 2 * micro_batches * total_chunks(); }
};

// GPipe and 1F1B need virtual_stages == 1 and work for any micro_batches >= 1. Interleaved needs
// virtual_stages >= 2 and micro_batches a multiple of stages. ZB-H1 needs virtual_stages == 1,
// ZB-V virtual_stages == 2 (V placement); both work for any micro_batches >= 1, ZB-V's bubble is
// near zero from micro_batches >= 2 * stages on. Bad arguments throw UsageError.
//
// The zero-bubble lists come from one deterministic greedy list scheduler over a unit-cost
// simulation of all stages (F = B = W = 1 per chunk, messages free): whenever a stage is free it
// runs, in this order of preference, B of the micro-batch whose gradient has arrived (the lowest
// micro-batch, then the later chunk), F whose input has arrived within the in-flight limits (the
// later chunk, then the lowest micro-batch) — after a B the F goes first, 1F1B's alternation —,
// else the oldest pending W; otherwise it waits for the next message. In-flight limits, counted
// in chunk slots:
//   ZB-H1: forwards not yet through B <= P - s on stage s (1F1B's count), not yet through W <= P
//     (1F1B's peak, stage 0's): W waits to fill the bubble, by up to s micro-batches on stage s.
//     Bubble (P-1)(F+B-W) a stage (Qi et al.), a third of 1F1B's (P-1)(F+B+W) at F = B = W:
//     exactly P-1 units there when micro_batches >= P, the least with 1F1B's counts (stage 0
//     holds P forwards and waits for the first gradient until 2P-1).
//   ZB-V: not yet through W <= 2P chunk slots (P stages' worth of activations, 1F1B's stage-0
//     peak). Bubble (P-1) F/2 a stage, the least any schedule can have (stage P-1 waits that long
//     for its first input), when micro_batches >= 2P.
// Then the messages go around the computations (see the rules above).
Schedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages = 1);
// Forwards only, with their sends and receives, in the same forward order as the training schedule
// (any micro_batches >= 1, also with virtual stages). kind is GPipe for v = 1, Interleaved otherwise;
// with the V placement (ZB-V's model, v must be 2) kind is ZeroBubbleV.
Schedule make_forward_only_schedule(int stages, int micro_batches, int virtual_stages = 1,
                                    ChunkPlacement placement = ChunkPlacement::Looped);

// One line per stage, computations only ("s0: F0 F1 B0 B1"), or every action with communication.
std::string describe(const Schedule& schedule, bool with_communication = false);

// The time one computation of one (micro-batch, chunk) takes: F, B (input gradients), W (weight
// gradients). A fused Backward takes backward_input + backward_weight.
struct ComputeCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
};

// Timing of a schedule: computations take their ComputeCosts, messages are free and sends never block.
struct ScheduleSimulation {
  double makespan = 0;
  std::vector<double> busy;  // per stage: time spent computing
  std::vector<double> idle;  // per stage: makespan - busy (the pipeline bubble as that stage sees it)
  double bubble_fraction() const;  // mean idle / makespan
};
// Matches messages in issue order per stage pair, as the executor does; throws Error on a deadlock.
ScheduleSimulation simulate(const Schedule& schedule, const ComputeCosts& costs);
// The same with B = W = backward_cost / 2 (a fused Backward costs backward_cost).
ScheduleSimulation simulate(const Schedule& schedule, double forward_cost, double backward_cost);

// Runs the lists as an executor that sends each run of messages between two computations as one
// grouped batch (NCCL group semantics): a stage posts the batch, and it completes (the stage goes
// on) only when every message in it is matched by the peer's batch, in per-pair issue order.
// Messages to the stage itself never block. Throws Error naming the stuck stages (and where each
// waits) on a deadlock, or the first pair whose send and receive disagree.
void check_grouped_messages(const Schedule& schedule);

// Per stage: the most (micro-batch, chunk) activations held at once, in chunk slots: held from
// Forward until Backward, or until BackwardWeight in the zero-bubble lists.
std::vector<int> peak_in_flight(const Schedule& schedule);
// Per stage: the most (micro-batch, chunk) slots held at once whose BackwardInput ran and whose
// BackwardWeight has not (what deferring W holds: the inputs and output gradients W still needs).
// Zero for the fused schedules.
std::vector<int> peak_deferred_weight(const Schedule& schedule);

}  // namespace mt
