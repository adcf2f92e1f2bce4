// Runs a pipeline schedule (parallel/schedule.h) for one optimizer step on this stage: computes
// through a PipelineStageRunner (the trainer's model), sends and receives over the pp group.
//
// Messages go in batches (Communicator::batch_async): each run of sends and receives between two
// computations of the list is one batch, in the list's order, so the per-peer order is the
// schedule's on both ends (NCCL matches point-to-point messages in issue order) and neighbours
// that send to each other in the same run cannot hold each other up (NCCL groups the batch). The
// schedules guarantee that waiting for a whole batch never deadlocks (check_grouped_messages).
//
// Overlap: a batch's sends are never waited for before the stage goes on unless the batch also
// holds receives; a slot's buffers are released once the batches sending from it completed. Where
// the pp communicator has CommCapabilities::early_receives (MPI) a run's receives are posted as
// their own batch one computation early, so the transfer runs during that computation on the
// communication thread. Otherwise (NCCL) the batches go on one comm stream in schedule order and
// the GPU overlaps it with compute. With overlap off every batch is posted and waited for where
// the schedule puts it, so a transfer runs while its receiver waits, not while it computes.
// A stage sending to itself (one stage with virtual chunks, or the turn of a V) copies the tensor.
// defines: PipelineStageRunner, ExecutorOptions, ExecutorStats, PipelineExecutor
#pragma once

#include <map>
#include <vector>

#include "comm/communicator.h"
#include "parallel/schedule.h"

namespace mt {

// Which part of a chunk's backward a computation runs (parallel/schedule.h: Backward,
// BackwardInput, BackwardWeight).
enum class BackwardPart { Full, Input, Weight };

// One stage's computations on (local chunk, micro-batch), as the schedule names them.
class PipelineStageRunner {
 public:
  virtual ~PipelineStageRunner() = default;
  virtual Tensor forward_input(int chunk, int micro) = 0;     // buffer a RecvForward fills
  virtual void forward(int chunk, int micro) = 0;
  virtual Tensor forward_output(int chunk, int micro) = 0;    // what a SendForward sends
  virtual Tensor output_grad_buffer(int chunk, int micro) = 0;  // buffer a RecvBackward fills
  // Full: the whole backward. Input (B): the input gradient only, keeping what Weight needs.
  // Weight (W): the weight gradients of an earlier Input. completes_chunk: after this call the
  // chunk's parameter gradients are final for the step (Action::completes_chunk), so their
  // data-parallel reduction may start from it.
  virtual void backward(int chunk, int micro, BackwardPart part, bool completes_chunk) = 0;
  virtual Tensor input_grad(int chunk, int micro) = 0;        // what a SendBackward sends
  // The micro-batch is done on this chunk (after its backward, or its forward when forward-only)
  // and nothing is sending from its buffers any more.
  virtual void release(int chunk, int micro) = 0;
};

struct ExecutorOptions {
  bool overlap = true;
};

struct ExecutorStats {
  double receive_wait_s = 0;  // time blocked on receives (the bubble as this stage saw it, plus transfers)
  double compute_s = 0;       // time in forward and backward
  int receives_posted_early = 0;
  int batches = 0;  // point-to-point batches started
};

class PipelineExecutor {
 public:
  // pp: the pipeline group, ranked by stage. stream: the compute stream, ordered after receives.
  PipelineExecutor(Communicator& pp, const Stream& stream, ExecutorOptions options = {});
  // Runs this stage's list; returns when every computation is done and every send completed.
  ExecutorStats run(const Schedule& schedule, PipelineStageRunner& runner);

 private:
  struct Pending {
    WorkPtr work;
    Tensor staged;  // a self-send's copy
  };
  static Tensor message_tensor(const Action& action, PipelineStageRunner& runner);
  // Starts the messages at `indices` (of this stage's list) as one batch; self-messages are staged.
  void start_batch(const Schedule& schedule, const std::vector<std::size_t>& indices, PipelineStageRunner& runner,
                   ExecutorStats& stats);
  void finish_receive(const Schedule& schedule, std::size_t index, ExecutorStats& stats);
  void release_finished(PipelineStageRunner& runner, bool wait_all);

  Communicator& pp_;
  const Stream& stream_;
  ExecutorOptions options_;
  bool early_receives_ = false;
  // Per step: receives posted (by action index; a batch's receives share its Work), self-sends
  // waiting for their receive (by tag), and finished micro-batches whose sends may be in flight.
  std::map<std::size_t, Pending> receives_;
  struct SelfSend {
    Tensor data;
    std::pair<int, int> from;  // the sending slot (chunk, micro), held until the receive copied it
  };
  std::map<int, SelfSend> self_sends_;
  std::map<std::pair<int, int>, std::vector<WorkPtr>> sends_;
  std::vector<std::pair<int, int>> done_;
};

}  // namespace mt
