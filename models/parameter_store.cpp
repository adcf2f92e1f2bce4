#include "models/parameter_store.h"

#include "runtime/kernels.h"

namespace mt {

ParameterStore::ParameterStore(DeviceContext& ctx, std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  std::int64_t total = 0;
  for (const ParamSpec& s : specs_) {
    offsets_.push_back(total);
    total += s.numel();
  }
  flat_params_ = Tensor::zeros({total}, DType::F32, ctx);
  flat_grads_ = Tensor::zeros({total}, DType::F32, ctx);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    params_.push_back(flat_params_.flat_slice(offsets_[i], specs_[i].numel()).reshape(specs_[i].shape));
    grads_.push_back(flat_grads_.flat_slice(offsets_[i], specs_[i].numel()).reshape(specs_[i].shape));
  }
}

std::size_t ParameterStore::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].name == name) return i;
  MT_FAIL("no parameter named '", name, "'");
}

void ParameterStore::zero_grads(DeviceContext& ctx) { kernels::fill(ctx, flat_grads_, 0.0); }

}  // namespace mt
