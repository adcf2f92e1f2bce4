// A model's parameters and gradients, each in one contiguous fp32 buffer on the device, handed out
// as per-parameter views in the order of the specs. One buffer makes the gradient norm one
// reduction, and lets data parallelism cut the gradients into contiguous buckets.
//
// With a bf16 compute dtype the fp32 parameters and gradients stay the master copy (what the
// optimizer updates, checkpoints save and gradients accumulate into), and a third flat buffer
// holds the parameters rounded to bf16 for the GEMMs: refresh_compute_params() casts the master
// into it in one kernel. With fp32 compute there is no copy: the compute views are the parameters.
// defines: ParameterStore
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt_parameters.h"
#include "runtime/tensor.h"

namespace mt {

class ParameterStore {
 public:
  // pad_multiple: the flat buffers are padded with zeros to a multiple of it (data parallelism
  // cuts them into dp equal blocks); the padding belongs to no parameter.
  ParameterStore(DeviceContext& ctx, std::vector<ParamSpec> specs, DType compute = DType::F32,
                 std::int64_t pad_multiple = 1);

  std::size_t size() const { return specs_.size(); }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& spec(std::size_t i) const { return specs_.at(i); }
  std::size_t index_of(const std::string& name) const;  // throws Error for an unknown name

  Tensor& param(std::size_t i) { return params_.at(i); }
  Tensor& grad(std::size_t i) { return grads_.at(i); }
  const Tensor& param(std::size_t i) const { return params_.at(i); }
  const Tensor& grad(std::size_t i) const { return grads_.at(i); }
  Tensor& param(const std::string& name) { return params_.at(index_of(name)); }
  Tensor& grad(const std::string& name) { return grads_.at(index_of(name)); }
  std::int64_t offset(std::size_t i) const { return offsets_.at(i); }  // elements into the flat buffers

  const Tensor& flat_params() const { return flat_params_; }
  const Tensor& flat_grads() const { return flat_grads_; }
  std::int64_t numel() const { return flat_params_.numel(); }  // padding included
  std::int64_t param_numel() const { return param_numel_; }    // without the padding

  void zero_grads(DeviceContext& ctx);  // Error once placed()

  // ZeRO-2/3 (parallel/unit_shards.h): parameters [first, first + count) move out of the flat
  // buffers into per-unit buffers (Tensor::redirect_to: every view, the layers' included, follows):
  // params, compute (the bf16 copy; ignored for fp32 compute) and grads, each at least as long as
  // the run. Then release_flat() frees the flat buffers' own memory: views that cross units (the
  // flat buffers themselves) fail when read, and zero_grads() is refused (the units zero theirs).
  void place(std::size_t first, std::size_t count, const Tensor& params, const Tensor& compute, const Tensor& grads);
  // refresh: the (fp32, compute) pairs refresh_compute_params() casts from now on (ZeRO-2: every
  // unit; ZeRO-3: none, each gathered unit is cast when gathered).
  void release_flat(std::vector<std::pair<Tensor, Tensor>> refresh);
  bool placed() const { return placed_; }

  // The parameters in the compute dtype (fp32 or bf16), as the GEMMs read them; the same offsets.
  DType compute_dtype() const { return flat_compute_.dtype(); }
  const Tensor& compute_param(std::size_t i) const { return compute_.at(i); }
  const Tensor& compute_param(const std::string& name) const { return compute_.at(index_of(name)); }
  const Tensor& flat_compute_params() const { return flat_compute_; }
  // Rounds the master parameters into the bf16 copy (to nearest even); nothing to do for fp32.
  // Call after every change of the parameters and before the next forward.
  void refresh_compute_params(DeviceContext& ctx);

 private:
  std::vector<ParamSpec> specs_;
  std::vector<std::int64_t> offsets_;
  Tensor flat_params_, flat_grads_, flat_compute_;  // flat_compute_ shares flat_params_ for fp32
  std::vector<Tensor> params_, grads_, compute_;
  std::int64_t param_numel_ = 0;
  bool placed_ = false;
  std::vector<std::pair<Tensor, Tensor>> refresh_;  // once placed
};

}  // namespace mt
