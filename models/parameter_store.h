// A model's parameters and gradients, each in one contiguous fp32 buffer on the device, handed out
// as per-parameter views in the order of the specs. One buffer makes the gradient norm one
// reduction, and lets data parallelism cut the gradients into contiguous buckets.
// defines: ParameterStore
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt_parameters.h"
#include "runtime/tensor.h"

namespace mt {

class ParameterStore {
 public:
  ParameterStore(DeviceContext& ctx, std::vector<ParamSpec> specs);

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
  std::int64_t numel() const { return flat_params_.numel(); }

  void zero_grads(DeviceContext& ctx);

 private:
  std::vector<ParamSpec> specs_;
  std::vector<std::int64_t> offsets_;
  Tensor flat_params_, flat_grads_;
  std::vector<Tensor> params_, grads_;
};

}  // namespace mt
