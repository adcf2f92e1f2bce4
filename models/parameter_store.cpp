#include "models/parameter_store.h"

#include "runtime/kernels.h"

namespace mt {

ParameterStore::ParameterStore(DeviceContext& ctx, std::vector<ParamSpec> specs, DType compute,
                               std::int64_t pad_multiple)
    : specs_(std::move(specs)) {
  MT_CHECK(pad_multiple >= 1, "pad multiple ", pad_multiple);
  MT_CHECK(compute == DType::F32 || compute == DType::BF16, "parameters compute in fp32 or bf16, not ",
           dtype_name(compute));
  std::int64_t total = 0;
  for (const ParamSpec& s : specs_) {
    offsets_.push_back(total);
    total += s.numel();
  }
  param_numel_ = total;
  total = (total + pad_multiple - 1) / pad_multiple * pad_multiple;
  flat_params_ = Tensor::zeros({total}, DType::F32, ctx);
  flat_grads_ = Tensor::zeros({total}, DType::F32, ctx);
  flat_compute_ = compute == DType::F32 ? flat_params_ : Tensor::zeros({total}, compute, ctx);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    auto view = [&](const Tensor& flat) {
      return flat.flat_slice(offsets_[i], specs_[i].numel()).reshape(specs_[i].shape);
    };
    params_.push_back(view(flat_params_));
    grads_.push_back(view(flat_grads_));
    compute_.push_back(view(flat_compute_));
  }
}

std::size_t ParameterStore::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].name == name) return i;
  MT_FAIL("no parameter named '", name, "'");
}

void ParameterStore::zero_grads(DeviceContext& ctx) {
  MT_CHECK(!placed_, "zero_grads on a store placed in units (ZeRO-2/3 zero each unit's gradients)");
  kernels::fill(ctx, flat_grads_, 0.0);
}

void ParameterStore::place(std::size_t first, std::size_t count, const Tensor& params, const Tensor& compute,
                           const Tensor& grads) {
  MT_CHECK(!placed_ && count >= 1 && first + count <= specs_.size(), "place params [", first, ", ", first + count,
           ") of ", specs_.size(), placed_ ? " after release_flat()" : "");
  const std::int64_t begin = offsets_[first];
  const std::int64_t n = offsets_[first + count - 1] + specs_[first + count - 1].numel() - begin;
  flat_params_.flat_slice(begin, n).redirect_to(params.flat_slice(0, n));
  flat_grads_.flat_slice(begin, n).redirect_to(grads.flat_slice(0, n));
  if (compute_dtype() != DType::F32) flat_compute_.flat_slice(begin, n).redirect_to(compute.flat_slice(0, n));
}

void ParameterStore::release_flat(std::vector<std::pair<Tensor, Tensor>> refresh) {
  placed_ = true;
  refresh_ = std::move(refresh);
  flat_params_.release_memory();
  flat_grads_.release_memory();
  flat_compute_.release_memory();
}

void ParameterStore::refresh_compute_params(DeviceContext& ctx) {
  if (compute_dtype() == DType::F32) return;  // the compute views are the parameters themselves
  if (placed_) {
    for (auto& [master, compute] : refresh_) kernels::cast(ctx, master, compute);
    return;
  }
  kernels::cast(ctx, flat_params_, flat_compute_);
}

}  // namespace mt
