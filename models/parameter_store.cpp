#include "models/parameter_store.h"

#include <algorithm>

#include "runtime/kernels.h"

namespace mt {

ParameterStore::ParameterStore(DeviceContext& ctx, std::vector<ParamSpec> specs, DType compute,
                               std::int64_t pad_multiple, std::vector<StoreBlock> blocks, std::vector<int> flat_regions)
    : specs_(std::move(specs)), compute_dtype_(compute), blocks_(std::move(blocks)) {
  MT_CHECK(pad_multiple >= 1, "pad multiple ", pad_multiple);
  MT_CHECK(compute == DType::F32 || compute == DType::BF16, "parameters compute in fp32 or bf16, not ",
           dtype_name(compute));
  MT_CHECK(flat_regions.empty() || (flat_regions.size() == specs_.size() && !placed()), "flat regions: ",
           flat_regions.size(), " for ", specs_.size(), " parameters", placed() ? " of a store built in blocks" : "");
  const int regions = flat_regions.empty() ? 1 : *std::max_element(flat_regions.begin(), flat_regions.end()) + 1;
  MT_CHECK(flat_regions.empty() || *std::min_element(flat_regions.begin(), flat_regions.end()) >= 0,
           "flat regions are numbered from 0");
  const auto padded = [pad_multiple](std::int64_t n) { return (n + pad_multiple - 1) / pad_multiple * pad_multiple; };
  offsets_.assign(specs_.size(), 0);
  std::int64_t total = 0;
  for (int r = 0; r < regions; ++r) {
    if (r > 0) total = padded(total);  // each region starts at a multiple of the pad multiple
    region_starts_.push_back(total);
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (!flat_regions.empty() && flat_regions[i] != r) continue;
      offsets_[i] = total;
      total += specs_[i].numel();
      param_numel_ += specs_[i].numel();
    }
  }
  numel_ = padded(total);
  if (placed()) {
    build_blocks(ctx);
    return;
  }
  flat_params_ = Tensor::zeros({numel_}, DType::F32, ctx);
  flat_grads_ = Tensor::zeros({numel_}, DType::F32, ctx);
  flat_compute_ = compute == DType::F32 ? flat_params_ : Tensor::zeros({numel_}, compute, ctx);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    auto view = [&](const Tensor& flat) {
      return flat.flat_slice(offsets_[i], specs_[i].numel()).reshape(specs_[i].shape);
    };
    params_.push_back(view(flat_params_));
    grads_.push_back(view(flat_grads_));
    compute_.push_back(view(flat_compute_));
  }
}

void ParameterStore::build_blocks(DeviceContext& ctx) {
  std::size_t next = 0;
  for (const StoreBlock& b : blocks_) {
    MT_CHECK(b.count >= 1 && b.first == next && b.first + b.count <= specs_.size(), "store block [", b.first, ", ",
             b.first + b.count, ") does not follow the previous one at ", next, " within ", specs_.size(),
             " parameters");
    const std::int64_t begin = offsets_[b.first];
    const std::int64_t end = offsets_[b.first + b.count - 1] + specs_[b.first + b.count - 1].numel();
    MT_CHECK(b.padded >= end - begin, "store block [", b.first, ", ", b.first + b.count, ") of ", end - begin,
             " elements in buffers of ", b.padded);
    const Tensor params = Tensor::released({b.padded}, DType::F32, ctx);
    const Tensor compute =
        compute_dtype_ == DType::F32 ? params : Tensor::released({b.padded}, compute_dtype_, ctx);
    const Tensor grads = Tensor::released({b.padded}, DType::F32, ctx);
    for (std::size_t i = b.first; i < b.first + b.count; ++i) {
      auto view = [&](const Tensor& buffer) {
        return buffer.flat_slice(offsets_[i] - begin, specs_[i].numel()).reshape(specs_[i].shape);
      };
      params_.push_back(view(params));
      grads_.push_back(view(grads));
      compute_.push_back(view(compute));
    }
    block_params_.push_back(params);
    block_compute_.push_back(compute);
    block_grads_.push_back(grads);
    next = b.first + b.count;
  }
  MT_CHECK(next == specs_.size(), "store blocks cover ", next, " of ", specs_.size(), " parameters");
}

std::size_t ParameterStore::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].name == name) return i;
  MT_FAIL("no parameter named '", name, "'");
}

const Tensor& ParameterStore::flat_params() const {
  MT_CHECK(!placed(), "a store built in ZeRO-2/3 blocks has no flat parameter buffer");
  return flat_params_;
}

const Tensor& ParameterStore::flat_grads() const {
  MT_CHECK(!placed(), "a store built in ZeRO-2/3 blocks has no flat gradient buffer");
  return flat_grads_;
}

const Tensor& ParameterStore::flat_compute_params() const {
  MT_CHECK(!placed(), "a store built in ZeRO-2/3 blocks has no flat compute buffer");
  return flat_compute_;
}

void ParameterStore::zero_grads(DeviceContext& ctx) {
  MT_CHECK(!placed(), "zero_grads on a store built in blocks (ZeRO-2/3 zero each unit's gradients)");
  kernels::fill(ctx, flat_grads_, 0.0);
}

void ParameterStore::refresh_compute_params(DeviceContext& ctx) {
  if (compute_dtype_ == DType::F32) return;  // the compute views are the parameters themselves
  if (!placed()) {
    kernels::cast(ctx, flat_params_, flat_compute_);
    return;
  }
  for (std::size_t b = 0; b < refresh_blocks_.size(); ++b)
    if (refresh_blocks_[b]) kernels::cast(ctx, block_params_[b], block_compute_[b]);
}

void ParameterStore::set_refresh_blocks(std::vector<char> which) {
  MT_CHECK(which.empty() || which.size() == blocks_.size(), "set_refresh_blocks: ", which.size(), " flags for ",
           blocks_.size(), " blocks");
  refresh_blocks_ = std::move(which);
}

}  // namespace mt
