// AdamW over a list of parameter slots, each a parameter tensor, its gradient and whether it gets
// weight decay. The optimizer owns the first and second moments (m, v: fp32, zeroed, one pair per
// slot) and the step count; it holds no other state and nothing global, so a data-parallel rank
// can run one over the slices of the parameters it owns (ZeRO-1) just as over whole tensors.
//
// The per-element math is runtime/ops/optimizer.h. step() walks every slot in one pass: the slots
// are a table of (param, grad, m, v, numel, decay, bf16 copy) cut into fixed chunks of kAdamWChunk
// elements when the optimizer is built. CPU: one OpenMP loop over the chunks with the context's
// thread count (the result never depends on it). CUDA: one launch over the table, uploaded once,
// where the context's CudaKernels turn on the optimizer family; else the reference, one launch per
// slot (and a cast per bf16 copy). Every path gives the same bits.
//
// A slot may have a bf16 working copy of its parameter (the GEMMs' compute copy): each step writes
// it from the updated parameter, the bits a separate cast would give, so it is current after step().
// defines: AdamWConfig, AdamMoment, ParamSlot, AdamW
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/context.h"  // defines: DeviceContext
#include "runtime/ops/optimizer.h"  // defines: AdamWTensor, AdamWChunk
#include "runtime/tensor.h"   // defines: Tensor

namespace mt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to slots with decay = true only
};

// Throws Error unless 0 <= beta < 1, eps > 0 and weight_decay >= 0 (all finite).
void validate(const AdamWConfig& config);

// AdamW's first (m) and second (v) moment.
enum class AdamMoment { First, Second };

struct ParamSlot {
  std::string name;  // unique within an optimizer; names the slot in errors and checkpoints
  Tensor param;      // fp32 on the context's device; may be a view (e.g. into one flat buffer)
  Tensor grad;       // fp32, same shape and device as param
  bool decay = false;
};

class AdamW {
 public:
  // Checks every slot (defined, fp32, on ctx's device, grad shaped like param, non-empty unique
  // names) and allocates zeroed m and v for each. The context must outlive the optimizer.
  // compute: empty, or one entry per slot, either undefined (no copy) or that slot's bf16 working
  // copy, shaped like its parameter on ctx's device.
  AdamW(DeviceContext& ctx, std::vector<ParamSlot> slots, AdamWConfig config = {}, std::vector<Tensor> compute = {});
  // Not copyable: a copy would share m and v with the original.
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;
  AdamW(AdamW&&) noexcept = default;
  AdamW& operator=(AdamW&&) noexcept = default;

  // One update of every slot: increments the step count t, then for each element
  // p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p) with the gradient multiplied by grad_scale
  // first (the clip scale times any loss-scale inverse). lr must be finite and >= 0, grad_scale
  // finite and >= 0: a non-finite clip scale (see grad_norm.h) is refused here with an Error,
  // before anything is changed. Then every bf16 copy holds its updated parameter. Asynchronous on a
  // CUDA stream.
  void step(float lr, float grad_scale = 1.0f);

  // Steps taken so far (t of the bias correction). Checkpoint restore sets it with m and v.
  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t steps);

  const AdamWConfig& config() const { return config_; }
  std::size_t size() const { return slots_.size(); }
  std::span<const ParamSlot> slots() const { return slots_; }
  const ParamSlot& slot(std::size_t i) const;
  std::size_t index_of(std::string_view name) const;  // throws Error naming an unknown slot

  // The moments of slot i, shaped like its parameter. Handles sharing the optimizer's storage:
  // copying into them (Tensor::copy_from) restores a checkpoint.
  const Tensor& m(std::size_t i) const;
  const Tensor& v(std::size_t i) const;

 private:
  DeviceContext* ctx_;
  std::vector<ParamSlot> slots_;
  std::vector<Tensor> m_;
  std::vector<Tensor> v_;
  std::vector<Tensor> compute_;      // per slot; undefined for a slot without a bf16 copy
  std::vector<AdamWTensor> table_;   // per slot, with its weight decay
  std::vector<AdamWChunk> chunks_;   // the table cut into kAdamWChunk pieces, slot by slot
  Tensor device_table_;              // CUDA: table_ then chunks_, uploaded once
  AdamWConfig config_;
  std::int64_t step_count_ = 0;
};

}  // namespace mt
