// A model's parameters and gradients, each in one contiguous fp32 buffer on the device, handed out
// as per-parameter views in the order of the specs. One buffer makes the gradient norm one
// reduction, and lets data parallelism cut the gradients into contiguous buckets.
//
// With a bf16 compute dtype the fp32 parameters and gradients stay the master copy (what the
// optimizer updates, checkpoints save and gradients accumulate into), and a third flat buffer
// holds the parameters rounded to bf16 for the GEMMs: refresh_compute_params() casts the master
// into it in one kernel. With fp32 compute there is no copy: the compute views are the parameters.
//
// ZeRO-2/3 (zero/unit_shards.h) build the store in blocks instead: each block of consecutive
// parameters gets buffers of its own (parameters, compute copy, gradients), created without
// memory, so that a unit's buffers exist only while it is used and no buffer ever holds the whole
// stage. Such a store has no flat buffers.
//
// A flat store may instead be laid out in regions (ZeRO-1 under bf16, zero/flat_zero_engine.h):
// each parameter names its region, the regions follow each other in increasing order, each
// starting at a multiple of the pad multiple, and keep their parameters in spec order. The
// offsets then follow the regions, not the specs: read them from offset().
// defines: ParameterStore, StoreBlock
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt_parameters.h"
#include "runtime/tensor.h"

namespace mt {

// A run of parameters with buffers of its own (a ZeRO-2/3 shard block, zero/unit_shards.h).
struct StoreBlock {
  std::size_t first = 0, count = 0;  // parameters [first, first + count)
  std::int64_t padded = 0;           // the buffers' elements: the parameters' and zero padding after
  bool operator==(const StoreBlock&) const = default;
};

class ParameterStore {
 public:
  // pad_multiple: the flat buffers are padded with zeros to a multiple of it (data parallelism
  // cuts them into dp equal blocks); the padding belongs to no parameter.
  // blocks (ZeRO-2/3): if not empty, they tile the parameters in order and the store is built in
  // blocks, every buffer without memory until its owner acquires it (Tensor::acquire_memory).
  // flat_regions (flat stores only): per parameter its region, 0 to R-1; empty: one region.
  ParameterStore(DeviceContext& ctx, std::vector<ParamSpec> specs, DType compute = DType::F32,
                 std::int64_t pad_multiple = 1, std::vector<StoreBlock> blocks = {},
                 std::vector<int> flat_regions = {});

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
  std::int64_t offset(std::size_t i) const { return offsets_.at(i); }  // elements into the flat order

  // The flat buffers: Error for a store built in blocks.
  const Tensor& flat_params() const;
  const Tensor& flat_grads() const;
  std::int64_t numel() const { return numel_; }              // the flat order's, padding included
  std::int64_t param_numel() const { return param_numel_; }  // without the padding
  // Where each region of the flat order starts, ascending, the first at 0 (one region: {0}).
  const std::vector<std::int64_t>& region_starts() const { return region_starts_; }

  void zero_grads(DeviceContext& ctx);  // Error in blocks (ZeRO-2/3 zero each unit's gradients)

  // Built in blocks: their buffers, each [padded] (compute: the bf16 copy; the parameters for fp32).
  bool placed() const { return !blocks_.empty(); }
  const std::vector<StoreBlock>& blocks() const { return blocks_; }
  const Tensor& block_params(std::size_t b) const { return block_params_.at(b); }
  const Tensor& block_compute(std::size_t b) const { return block_compute_.at(b); }
  const Tensor& block_grads(std::size_t b) const { return block_grads_.at(b); }
  // In blocks, refresh_compute_params() casts the blocks marked here (ZeRO-2: those whose fp32
  // parameters stay resident), none by default (ZeRO-3 casts each unit as it gathers it; ZeRO-2's
  // GEMM weights under bf16 get their copy from AdamW's step and a bf16 gather).
  void set_refresh_blocks(std::vector<char> which);

  // The parameters in the compute dtype (fp32 or bf16), as the GEMMs read them; the same offsets.
  DType compute_dtype() const { return compute_dtype_; }
  const Tensor& compute_param(std::size_t i) const { return compute_.at(i); }
  const Tensor& compute_param(const std::string& name) const { return compute_.at(index_of(name)); }
  const Tensor& flat_compute_params() const;  // Error in blocks
  // Rounds the master parameters into the bf16 copy (to nearest even); nothing to do for fp32.
  // Call after every change of the parameters and before the next forward.
  void refresh_compute_params(DeviceContext& ctx);

 private:
  void build_blocks(DeviceContext& ctx);

  std::vector<ParamSpec> specs_;
  std::vector<std::int64_t> offsets_;
  DType compute_dtype_ = DType::F32;
  Tensor flat_params_, flat_grads_, flat_compute_;  // flat_compute_ shares flat_params_ for fp32
  std::vector<Tensor> params_, grads_, compute_;
  std::int64_t param_numel_ = 0, numel_ = 0;
  std::vector<std::int64_t> region_starts_;
  std::vector<StoreBlock> blocks_;
  std::vector<Tensor> block_params_, block_compute_, block_grads_;
  std::vector<char> refresh_blocks_;  // per block, or empty: none
};

}  // namespace mt
