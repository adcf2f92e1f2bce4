// One transformer layer: its parameters (views into the model's store) and what its family does
// inside the layer. The layer's flow is the model's and the same for every family (pre-norm;
// [q | k | v], attention, output projection, residual; norm, MLP up, activation, MLP down,
// residual), with its recomputation and split backward (models/gpt.h); a block says how its
// family makes [q | k | v] and the MLP's activation, and undoes them. Its linears own their
// tensor-parallel communication (models/tp_linear.h): column-parallel qkv and fc, row-parallel
// attn_proj and fc_proj.
// defines: Block, make_block
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "models/gpt_config.h"
#include "models/tp_linear.h"
#include "runtime/nn_kernels.h"  // defines: nn::AttentionHeads

namespace mt {

class ParameterStore;

class Block {
 public:
  virtual ~Block() = default;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  Norm ln1, ln2;
  ColumnParallelLinear qkv;    // into [q | k | v] of this rank's heads
  RowParallelLinear attn_proj;
  ColumnParallelLinear fc;     // the MLP's up projection
  RowParallelLinear fc_proj;   // and its down projection
  std::size_t first_param = 0;  // the layer's parameters are consecutive in the store
  std::size_t params = 0;       // how many
  int attn_unit = -1, mlp_unit = -1;  // its two halves' parameter units (the model's indices)

  // [q | k | v] as attention reads it, from the first norm's output x (entering the tensor-parallel
  // region through `full`). positions: int32 [T], the global position of each row of a sequence
  // (context parallelism: models/layer_attention.h), or undefined for 0..T-1.
  virtual void qkv_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& qkv,
                           const Tensor& positions) const = 0;
  // From the gradient at attention's input to the gradient at the projections' outputs, in place:
  // what their input and weight gradients read.
  virtual void qkv_output_backward(DeviceContext& ctx, Tensor& dqkv, const Tensor& positions) const = 0;
  // The MLP's up projection from the second norm's output x into fch, and its activation into act.
  virtual void mlp_up_forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& fch, Tensor& act) const = 0;
  // The activation alone from the fch mlp_up_forward made: its bits again (recomputation).
  virtual void mlp_activation(DeviceContext& ctx, const Tensor& fch, Tensor& act) const = 0;
  // dfch from dy (fc_proj's output gradient, as its output_grad gives it) through the down
  // projection and the activation. dact: room for the activation's output gradient where the
  // family needs one; dfch may be fch.
  virtual void mlp_down_backward_input(DeviceContext& ctx, const Tensor& dy, const Tensor& fch, Tensor& dact,
                                       Tensor& dfch) const = 0;

 protected:
  // The parts every family has: the norms, fc, the row-parallel projections; `prefix` "h.<l>.".
  Block(ParameterStore& store, const std::string& prefix, const GptConfig& config, const TpRegion& region);
};

// Layer `layer` of the config's family over this rank's shard of its parameters in `store`. heads:
// this rank's attention heads; kv_replicated: the kv heads are whole on every rank of the group.
std::unique_ptr<Block> make_block(const GptConfig& config, ParameterStore& store, int layer, const TpRegion& region,
                                  const nn::AttentionHeads& heads, bool kv_replicated);

}  // namespace mt
