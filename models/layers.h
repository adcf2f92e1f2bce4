// The parametrized layers a model is built from. Each holds views of its own parameters and
// gradients (owned by a ParameterStore) and knows its shape, so a tensor-parallel split can hand
// it a shard: a column-parallel Linear gets rows [out/tp] of W, a row-parallel one columns [in/tp].
// defines: Linear, Norm
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace mt {

class ParameterStore;

// y = x W^T + b with W [out, in] and b [out] (bias optional).
//
// The activations x, y and their gradients are of the compute dtype (fp32 or bf16); so is
// `compute_weight`, the weight as the GEMMs read it: `weight` itself in fp32, the store's bf16 copy
// of it otherwise. `weight`, `bias` and the gradients are the fp32 masters: dweight accumulates in
// fp32 (a bf16 x bf16 -> fp32 GEMM). The bias, its gradient and a following GELU ride on the GEMMs
// as epilogues (runtime/gemm.h): the fp32 bias is added to the GEMM's fp32 result before it is
// rounded to y's dtype, and dbias is summed in fp32 next to dweight.
struct Linear {
  Tensor weight, bias, dweight, dbias;
  Tensor compute_weight;

  static Linear from_store(ParameterStore& store, const std::string& prefix, bool has_bias = true);
  std::int64_t in_features() const { return weight.dim(1); }
  std::int64_t out_features() const { return weight.dim(0); }

  // x [N, in] -> y [N, out] (overwritten). add_bias false: y = x W^T alone (a row-parallel layer
  // adds its bias on one rank of the group only, before the partial outputs are summed).
  void forward(DeviceContext& ctx, const Tensor& x, Tensor& y, bool add_bias = true) const;
  // The same with a GELU after it, in the GEMM's epilogue: pre = x W^T + b, post = gelu(pre), both
  // [N, out] (post as gelu_forward(pre) would give it, bit for bit).
  void forward_gelu(DeviceContext& ctx, const Tensor& x, Tensor& pre, Tensor& post) const;
  // dweight += dy^T x; dbias += column sums of dy; and when dx is given, dx = dy W (or += with
  // accumulate_dx).
  void backward(DeviceContext& ctx, const Tensor& dy, const Tensor& x, Tensor* dx, bool accumulate_dx = false);
  // backward() in two halves, for a backward split in time (zero-bubble pipelines): together, on
  // the same dy, exactly backward()'s bits. dx = dy W (or += with accumulate_dx):
  void backward_input(DeviceContext& ctx, const Tensor& dy, Tensor& dx, bool accumulate_dx = false) const;
  // The input gradient through the GELU that made this layer's input from `pre`: dpre =
  // gelu'(pre) * (dy W), in the GEMM's epilogue (one rounding, of the product). dpre may be pre.
  void backward_input_dgelu(DeviceContext& ctx, const Tensor& dy, const Tensor& pre, Tensor& dpre) const;
  // dweight += dy^T x; dbias += column sums of dy.
  void backward_weights(DeviceContext& ctx, const Tensor& dy, const Tensor& x);

  // The same three on columns [col, col + out) of a wider y / dy [N, width] (no bias): projections
  // that write their parts of one activation (llama's q and [k | v] into [q | k | v]).
  void forward_columns(DeviceContext& ctx, const Tensor& x, Tensor& y, std::int64_t col) const;
  // dx may be fp32 whatever dy's dtype (a sum over several calls, rounded once by the caller).
  void backward_input_columns(DeviceContext& ctx, const Tensor& dy, std::int64_t col, Tensor& dx,
                              bool accumulate_dx) const;
  // dweight (or *into, fp32 of dweight's shape) += dy[:, cols]^T x; = without `accumulate`.
  void backward_weights_columns(DeviceContext& ctx, const Tensor& dy, std::int64_t col, const Tensor& x,
                                Tensor* into = nullptr, bool accumulate = true);
};

// Per-row normalization over the last dimension with a weight [C]: LayerNorm (gpt2: mean and
// variance, a bias [C]) or RMSNorm (llama: the root mean square, no bias, no mean statistic: `mean`
// arguments are ignored and may be undefined).
struct Norm {
  Tensor weight, bias, dweight, dbias;
  bool rms = false;
  float eps = 1e-5f;  // RMSNorm's; LayerNorm's kernel fixes GPT-2's 1e-5

  static Norm from_store(ParameterStore& store, const std::string& prefix, bool rms = false, float eps = 1e-5f);
  void forward(DeviceContext& ctx, const Tensor& x, Tensor& out, Tensor& mean, Tensor& rstd) const;
  // sum = x + y, then forward(sum, ...) in one pass: the bits of kernels::binary's Add and forward.
  // out may be y.
  void add_forward(DeviceContext& ctx, const Tensor& x, const Tensor& y, Tensor& sum, Tensor& out, Tensor& mean,
                   Tensor& rstd) const;
  // dx += ...; dweight, dbias += ...
  void backward(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                Tensor& dx);
  // Its two halves (see Linear): dx += ... ; then dweight, dbias += ...
  void backward_input(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                      Tensor& dx) const;
  void backward_params(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean, const Tensor& rstd);
};

// A 2-D view [rows, cols] of a contiguous tensor.
Tensor as_matrix(const Tensor& t, std::int64_t cols);

}  // namespace mt
