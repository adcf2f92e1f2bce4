#include "models/layers.h"

#include "models/parameter_store.h"
#include "runtime/gemm.h"
#include "runtime/nn_kernels.h"

namespace mt {

Tensor as_matrix(const Tensor& t, std::int64_t cols) {
  MT_CHECK(cols > 0 && t.numel() % cols == 0, t.describe(), " is not rows of ", cols);
  return t.reshape({t.numel() / cols, cols});
}

Linear Linear::from_store(ParameterStore& store, const std::string& prefix, bool has_bias) {
  Linear l;
  l.weight = store.param(prefix + ".weight");
  l.dweight = store.grad(prefix + ".weight");
  l.compute_weight = store.compute_param(prefix + ".weight");
  if (has_bias) {
    l.bias = store.param(prefix + ".bias");
    l.dbias = store.grad(prefix + ".bias");
  }
  return l;
}

void Linear::forward(DeviceContext& ctx, const Tensor& x, Tensor& y, bool add_bias) const {
  Tensor x2 = as_matrix(x, in_features());
  Tensor y2 = as_matrix(y, out_features());
  MT_CHECK(x2.dim(0) == y2.dim(0), "linear: input ", x.describe(), " and output ", y.describe(), " differ in rows");
  if (bias.defined() && add_bias) {
    nn::broadcast_rows(ctx, bias, y2);
    matmul(ctx, x2, false, compute_weight, true, y2, 1.0f, 1.0f);
  } else {
    matmul(ctx, x2, false, compute_weight, true, y2);
  }
}

void Linear::backward(DeviceContext& ctx, const Tensor& dy, const Tensor& x, Tensor* dx, bool accumulate_dx) {
  backward_weights(ctx, dy, x);
  if (dx != nullptr) backward_input(ctx, dy, *dx, accumulate_dx);
}

void Linear::backward_input(DeviceContext& ctx, const Tensor& dy, Tensor& dx, bool accumulate_dx) const {
  Tensor dy2 = as_matrix(dy, out_features());
  Tensor dx2 = as_matrix(dx, in_features());
  matmul(ctx, dy2, false, compute_weight, false, dx2, 1.0f, accumulate_dx ? 1.0f : 0.0f);
}

void Linear::backward_weights(DeviceContext& ctx, const Tensor& dy, const Tensor& x) {
  Tensor dy2 = as_matrix(dy, out_features());
  Tensor x2 = as_matrix(x, in_features());
  matmul(ctx, dy2, true, x2, false, dweight, 1.0f, 1.0f);
  if (dbias.defined()) nn::bias_backward(ctx, dy2, dbias);
}

LayerNorm LayerNorm::from_store(ParameterStore& store, const std::string& prefix) {
  return {store.param(prefix + ".weight"), store.param(prefix + ".bias"), store.grad(prefix + ".weight"),
          store.grad(prefix + ".bias")};
}

void LayerNorm::forward(DeviceContext& ctx, const Tensor& x, Tensor& out, Tensor& mean, Tensor& rstd) const {
  nn::layernorm_forward(ctx, x, weight, bias, out, mean, rstd);
}

void LayerNorm::backward(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx) {
  nn::layernorm_backward(ctx, dout, x, weight, mean, rstd, dx, dweight, dbias);
}

void LayerNorm::backward_input(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, Tensor& dx) const {
  nn::layernorm_backward_input(ctx, dout, x, weight, mean, rstd, dx);
}

void LayerNorm::backward_params(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean,
                                const Tensor& rstd) {
  nn::layernorm_backward_params(ctx, dout, x, mean, rstd, dweight, dbias);
}

}  // namespace mt
