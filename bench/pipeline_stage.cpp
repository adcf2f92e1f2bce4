#include "bench/pipeline_stage.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/kernels.h"

namespace mt {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

constexpr int kHead = 4;        // fp32 values at the head of every message: chunk, micro, step, kind
constexpr float kActivation = 1.0f, kGradient = 2.0f;  // the kind

}  // namespace

StageWork parse_stage_work(std::string_view name) {
  if (name == "sleep") return StageWork::Sleep;
  if (name == "gemm") return StageWork::Gemm;
  MT_FAIL_AS(UsageError, "unknown --work '", name, "' (expected sleep or gemm)");
}

const char* stage_work_name(StageWork work) { return work == StageWork::Sleep ? "sleep" : "gemm"; }

TimedWork::TimedWork(DeviceContext& ctx, StageWork kind) : ctx_(ctx), kind_(kind) {
  if (kind_ != StageWork::Gemm) return;
  a_ = Tensor::empty({TimedWork::kGemmSize, TimedWork::kGemmSize}, DType::F32, ctx_);
  b_ = Tensor::empty({TimedWork::kGemmSize, TimedWork::kGemmSize}, DType::F32, ctx_);
  c_ = Tensor::empty({TimedWork::kGemmSize, TimedWork::kGemmSize}, DType::F32, ctx_);
  kernels::fill(ctx_, a_, 0.5);
  kernels::fill(ctx_, b_, 0.25);
  for (int i = 0; i < 3; ++i) matmul(ctx_, a_, false, b_, false, c_);  // thread pool, page faults
  ctx_.synchronize();
  const auto start = clock_type::now();
  int calls = 0;
  do {
    matmul(ctx_, a_, false, b_, false, c_);
    ctx_.synchronize();
    ++calls;
  } while (since(start) < 0.2);
  gemm_call_s_ = since(start) / calls;
}

void TimedWork::run(double seconds) {
  if (seconds <= 0) return;
  if (kind_ == StageWork::Sleep) {
    // Against a deadline, so a wake-up that comes early (a signal) sleeps the rest.
    std::this_thread::sleep_until(clock_type::now() + std::chrono::duration<double>(seconds));
    return;
  }
  const long calls = std::max(1L, std::lround(seconds / gemm_call_s_));
  for (long i = 0; i < calls; ++i) matmul(ctx_, a_, false, b_, false, c_);
  ctx_.synchronize();
}

SyntheticStage::SyntheticStage(DeviceContext& ctx, const Schedule& schedule, int stage, TimedWork& work,
                               double forward_s, std::int64_t activation_bytes, double weight_share)
    : ctx_(ctx),
      schedule_(schedule),
      stage_(stage),
      work_(work),
      forward_s_(forward_s),
      weight_share_(weight_share),
      numel_(std::max<std::int64_t>(kHead, (activation_bytes + 3) / 4)) {}

void SyntheticStage::begin_step(int step) {
  MT_CHECK(slots_.empty(), "stage ", stage_, ": ", slots_.size(), " slot(s) never released in step ", step_);
  step_ = step;
}

SyntheticStage::Slot& SyntheticStage::slot(int chunk, int micro) {
  Slot& s = slots_[{chunk, micro}];
  peak_slots_ = std::max(peak_slots_, static_cast<int>(slots_.size()));
  return s;
}

Tensor SyntheticStage::acquire() {
  if (free_.empty()) return Tensor::zeros({numel_}, DType::F32, ctx_);
  Tensor t = free_.back();
  free_.pop_back();
  return t;
}

void SyntheticStage::write_head(Tensor& t, int chunk, int micro, float kind) {
  const float head[kHead] = {static_cast<float>(schedule_.global_chunk(stage_, chunk)), static_cast<float>(micro),
                             static_cast<float>(step_), kind};
  t.flat_slice(0, kHead).copy_from_host(head, sizeof head, ctx_.stream());
}

void SyntheticStage::check_head(const Tensor& t, int from_global, int micro, float kind, int chunk) {
  const char* what = kind == kActivation ? "activation" : "gradient";
  float head[kHead] = {};
  t.flat_slice(0, kHead).copy_to_host(head, sizeof head, ctx_.stream());
  ctx_.synchronize();
  const bool ok = head[0] == static_cast<float>(from_global) && head[1] == static_cast<float>(micro) &&
                  head[2] == static_cast<float>(step_) && head[3] == kind;
  MT_CHECK(ok, "stage ", stage_, " chunk ", chunk, " micro-batch ", micro, " step ", step_, ": the ", what,
           " received came from global chunk ", head[0], ", micro-batch ", head[1], ", step ", head[2],
           ", kind ", head[3],
           " (expected chunk ", from_global, ", micro-batch ", micro, ", step ", step_, ")");
}

Tensor SyntheticStage::forward_input(int chunk, int micro) {
  Slot& s = slot(chunk, micro);
  if (!s.input.defined()) s.input = acquire();
  return s.input;
}

void SyntheticStage::forward(int chunk, int micro) {
  const auto start = clock_type::now();
  Slot& s = slot(chunk, micro);
  if (!schedule_.is_first_chunk(stage_, chunk))
    check_head(s.input, schedule_.global_chunk(stage_, chunk) - 1, micro, kActivation, chunk);
  work_.run(forward_s_);
  if (!s.output.defined()) s.output = acquire();
  write_head(s.output, chunk, micro, kActivation);
  ctx_.synchronize();
  forward_total_ += since(start);
}

Tensor SyntheticStage::forward_output(int chunk, int micro) { return slot(chunk, micro).output; }

Tensor SyntheticStage::output_grad_buffer(int chunk, int micro) {
  Slot& s = slot(chunk, micro);
  if (!s.grad_input.defined()) s.grad_input = acquire();
  return s.grad_input;
}

void SyntheticStage::backward(int chunk, int micro, BackwardPart part, bool /*completes_chunk*/) {
  const auto start = clock_type::now();
  Slot& s = slot(chunk, micro);
  MT_CHECK(s.output.defined(), "stage ", stage_, ": backward of chunk ", chunk, " micro-batch ", micro,
           " before its forward");
  if (part == BackwardPart::Weight) {
    // W: the weight gradients of the B that ran before; no message comes or goes.
    MT_CHECK(s.input_grad_done, "stage ", stage_, ": weight gradients of chunk ", chunk, " micro-batch ", micro,
             " before its input gradient");
    work_.run(2 * forward_s_ * weight_share_);
    const double took = since(start);
    backward_total_ += took;
    weight_total_ += took;
    return;
  }
  MT_CHECK(!s.input_grad_done, "stage ", stage_, ": a second backward of chunk ", chunk, " micro-batch ", micro);
  if (!schedule_.is_last_chunk(stage_, chunk))
    check_head(s.grad_input, schedule_.global_chunk(stage_, chunk) + 1, micro, kGradient, chunk);
  work_.run(part == BackwardPart::Full ? 2 * forward_s_ : 2 * forward_s_ * (1 - weight_share_));
  if (!s.grad_output.defined()) s.grad_output = acquire();
  write_head(s.grad_output, chunk, micro, kGradient);
  s.input_grad_done = true;
  ctx_.synchronize();
  backward_total_ += since(start);
}

Tensor SyntheticStage::input_grad(int chunk, int micro) { return slot(chunk, micro).grad_output; }

void SyntheticStage::release(int chunk, int micro) {
  auto it = slots_.find({chunk, micro});
  MT_CHECK(it != slots_.end(), "stage ", stage_, ": release of chunk ", chunk, " micro-batch ", micro,
           " that holds nothing");
  for (Tensor* t : {&it->second.input, &it->second.output, &it->second.grad_input, &it->second.grad_output})
    if (t->defined()) free_.push_back(*t);
  slots_.erase(it);
}

}  // namespace mt
