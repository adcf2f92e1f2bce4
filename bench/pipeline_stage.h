// The synthetic stage `meshbench pipeline` runs the real PipelineExecutor over: each forward of one
// (chunk, micro-batch) burns a fixed time, each backward twice that (split, for the zero-bubble
// schedules, into B, the input gradient, and W, the weight gradients, by a given share), and every message is a real
// activation (or gradient) tensor of a given size. A few values at the head of each tensor name its
// sender, micro-batch and step, and the receiver checks them, so a schedule or executor that
// delivers the wrong message fails loudly instead of timing nonsense.
// defines: StageWork, parse_stage_work, stage_work_name, TimedWork, SyntheticStage
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "parallel/pipeline_executor.h"
#include "runtime/context.h"

namespace mt {

// sleep: the compute is a timed sleep, so ranks may outnumber cores and still measure the schedule
// exactly. gemm: real fp32 GEMMs, as many as take the time (honest only with a core per rank).
enum class StageWork { Sleep, Gemm };
StageWork parse_stage_work(std::string_view name);  // throws Error naming the known kinds
const char* stage_work_name(StageWork work);

// Spends a given time computing. Gemm calibrates once, at construction (about 0.2 s): the mean
// time of one square sgemm of kGemmSize, then each run makes round(seconds / that) calls.
class TimedWork {
 public:
  static constexpr int kGemmSize = 64;  // ~0.5 MFLOP a call: fine-grained enough for sub-millisecond chunks
  TimedWork(DeviceContext& ctx, StageWork kind);
  void run(double seconds);
  StageWork kind() const { return kind_; }
  double gemm_call_s() const { return gemm_call_s_; }  // 0 for sleep

 private:
  DeviceContext& ctx_;
  StageWork kind_;
  double gemm_call_s_ = 0;
  Tensor a_, b_, c_;
};

class SyntheticStage : public PipelineStageRunner {
 public:
  // forward_s: one micro-batch through one chunk (the stage's forward time / virtual stages).
  // activation_bytes: of every message, rounded up to whole fp32 values (at least 4).
  // weight_share: W's part of the backward (2 forward_s): B takes (1 - share), W share of it.
  SyntheticStage(DeviceContext& ctx, const Schedule& schedule, int stage, TimedWork& work, double forward_s,
                 std::int64_t activation_bytes, double weight_share = 0.5);

  // Before each step: the step number goes into the messages' heads. Every slot must be released.
  void begin_step(int step);

  Tensor forward_input(int chunk, int micro) override;
  void forward(int chunk, int micro) override;
  Tensor forward_output(int chunk, int micro) override;
  Tensor output_grad_buffer(int chunk, int micro) override;
  void backward(int chunk, int micro, BackwardPart part, bool completes_chunk) override;
  Tensor input_grad(int chunk, int micro) override;
  void release(int chunk, int micro) override;

  // The most (chunk, micro-batch) slots held at once since construction (buffers a receive was
  // posted into count: with overlap on, that is one computation before the schedule needs them).
  int peak_slots() const { return peak_slots_; }
  double forward_s_total() const { return forward_total_; }    // measured, all steps
  double backward_s_total() const { return backward_total_; }  // every part: Full, Input and Weight
  double weight_s_total() const { return weight_total_; }      // the Weight (W) calls alone

 private:
  struct Slot {
    Tensor input, output, grad_input, grad_output;  // undefined until first used
    bool input_grad_done = false;                   // B ran: W may
  };
  Slot& slot(int chunk, int micro);
  Tensor acquire();                                     // a message-sized buffer from the free list
  void write_head(Tensor& t, int chunk, int micro, float kind);  // sender's global chunk, micro, step, kind
  void check_head(const Tensor& t, int from_global, int micro, float kind, int chunk);

  DeviceContext& ctx_;
  const Schedule& schedule_;
  int stage_;
  TimedWork& work_;
  double forward_s_;
  double weight_share_;
  std::int64_t numel_;
  int step_ = 0;
  std::map<std::pair<int, int>, Slot> slots_;
  std::vector<Tensor> free_;
  int peak_slots_ = 0;
  double forward_total_ = 0, backward_total_ = 0, weight_total_ = 0;
};

}  // namespace mt
