// Pipeline schedules as data: for each stage, the ordered receives, forwards, backwards and sends of
// one optimizer step. The executor follows the lists; tests and benchmarks simulate them.
// defines: ActionKind, Action, ChunkRef, Schedule, make_schedule, make_forward_only_schedule, describe,
//          to_string, is_compute, is_send, is_receive, ScheduleSimulation, simulate, peak_in_flight
#pragma once

#include <string>
#include <vector>

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

// P stages with v model chunks each. Global chunk g = chunk * P + stage (Megatron's interleaving):
// chunk 0 (global) holds the embedding, chunk P*v-1 the head and loss. Activations flow g -> g+1,
// gradients g+1 -> g. Rules every list obeys:
//  - RecvForward(m, c) comes directly before Forward(m, c) unless (stage, c) is the first chunk;
//  - SendForward(m, c) comes directly after Forward(m, c) unless (stage, c) is the last chunk;
//  - RecvBackward(m, c) directly before Backward(m, c) unless last; SendBackward directly after unless first;
//  - for every ordered pair of stages a -> b, the sends from a to b, in a's order, are exactly the
//    receives on b from a, in b's order (NCCL matches point-to-point messages in issue order);
//  - run with sends that never block and receives that block, all stages finish (no deadlock).
// With P = 1 and v >= 2 the chunk-to-chunk messages go from the stage to itself.
struct Schedule {
  ScheduleKind kind = ScheduleKind::GPipe;
  int stages = 1;
  int micro_batches = 1;
  int virtual_stages = 1;
  bool forward_only = false;                  // evaluation: forwards and their messages only
  std::vector<std::vector<Action>> actions;   // per stage, in execution order

  int total_chunks() const { return stages * virtual_stages; }
  int global_chunk(int stage, int chunk) const { return chunk * stages + stage; }
  ChunkRef chunk_at(int global) const { return {global % stages, global / stages}; }
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
// virtual_stages >= 2 and micro_batches a multiple of stages. Bad arguments throw Error.
Schedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages = 1);
// Forwards only, with their sends and receives, in the same forward order as the training schedule
// (any micro_batches >= 1, also with virtual stages). kind is GPipe for v = 1, Interleaved otherwise.
Schedule make_forward_only_schedule(int stages, int micro_batches, int virtual_stages = 1);

// One line per stage, computations only ("s0: F0 F1 B0 B1"), or every action with communication.
std::string describe(const Schedule& schedule, bool with_communication = false);

// Unit-cost timing of a schedule: every Forward action (one micro-batch through one model chunk)
// takes forward_cost, every Backward backward_cost, messages are free and sends never block.
struct ScheduleSimulation {
  double makespan = 0;
  std::vector<double> busy;  // per stage: time spent computing
  std::vector<double> idle;  // per stage: makespan - busy (the pipeline bubble as that stage sees it)
  double bubble_fraction() const;  // mean idle / makespan
};
// Matches messages in issue order per stage pair, as the executor does; throws Error on a deadlock.
ScheduleSimulation simulate(const Schedule& schedule, double forward_cost, double backward_cost);

// Per stage: the most (micro-batch, chunk) activations held at once (forwards done - backwards done).
std::vector<int> peak_in_flight(const Schedule& schedule);

}  // namespace mt
