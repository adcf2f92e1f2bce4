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
  matmul(ctx, x2, false, compute_weight, true, y2, 1.0f, 0.0f,
         bias.defined() && add_bias ? MatmulEpilogue::with_bias(bias) : MatmulEpilogue{});
}

void Linear::forward_gelu(DeviceContext& ctx, const Tensor& x, Tensor& pre, Tensor& post) const {
  Tensor x2 = as_matrix(x, in_features());
  Tensor pre2 = as_matrix(pre, out_features());
  Tensor post2 = as_matrix(post, out_features());
  MT_CHECK(x2.dim(0) == pre2.dim(0) && pre.numel() == post.numel(), "linear+gelu: input ", x.describe(),
           ", pre-activation ", pre.describe(), " and output ", post.describe(), " differ in rows");
  matmul(ctx, x2, false, compute_weight, true, post2, 1.0f, 0.0f,
         MatmulEpilogue::bias_gelu(bias.defined() ? &bias : nullptr, pre2));
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

void Linear::backward_input_dgelu(DeviceContext& ctx, const Tensor& dy, const Tensor& pre, Tensor& dpre) const {
  Tensor dy2 = as_matrix(dy, out_features());
  Tensor dpre2 = as_matrix(dpre, in_features());
  Tensor pre2 = as_matrix(pre, in_features());
  MT_CHECK(pre.numel() == dpre.numel(), "linear dgelu: pre-activation ", pre.describe(), " and its gradient ",
           dpre.describe(), " differ");
  matmul(ctx, dy2, false, compute_weight, false, dpre2, 1.0f, 0.0f, MatmulEpilogue::dgelu(pre2));
}

void Linear::backward_weights(DeviceContext& ctx, const Tensor& dy, const Tensor& x) {
  Tensor dy2 = as_matrix(dy, out_features());
  Tensor x2 = as_matrix(x, in_features());
  matmul(ctx, dy2, true, x2, false, dweight, 1.0f, 1.0f,
         dbias.defined() ? MatmulEpilogue::bias_grad_of_a(dbias) : MatmulEpilogue{});
}

namespace {

// C[:, col : col + n] of a row-major [rows, width] tensor, as a GEMM operand with its row stride.
const void* column_address(const Tensor& t, std::int64_t col) {
  return static_cast<const char*>(t.data()) + col * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

}  // namespace

void Linear::forward_columns(DeviceContext& ctx, const Tensor& x, Tensor& y, std::int64_t col) const {
  const Tensor x2 = as_matrix(x, in_features());
  const std::int64_t width = y.shape().back(), rows = y.numel() / width;
  MT_CHECK(!bias.defined() && col >= 0 && col + out_features() <= width && rows == x2.dim(0), "linear: columns ", col,
           "+", out_features(), " of ", y.describe(), " from ", x.describe());
  GemmArgs g;
  g.trans_b = true;
  g.m = rows, g.n = out_features(), g.k = in_features();
  g.a = x2.data(), g.lda = g.k;
  g.b = compute_weight.data(), g.ldb = g.k;
  g.c = const_cast<void*>(column_address(y, col)), g.ldc = width;
  g.dtype = x2.dtype();
  gemm(ctx, g);
}

void Linear::backward_input_columns(DeviceContext& ctx, const Tensor& dy, std::int64_t col, Tensor& dx,
                                    bool accumulate_dx) const {
  Tensor dx2 = as_matrix(dx, in_features());
  const std::int64_t width = dy.shape().back();
  MT_CHECK(col >= 0 && col + out_features() <= width && dy.numel() / width == dx2.dim(0), "linear: columns ", col,
           "+", out_features(), " of ", dy.describe(), " into ", dx.describe());
  GemmArgs g;  // dx = dy[:, cols] W
  g.m = dx2.dim(0), g.n = in_features(), g.k = out_features();
  g.a = column_address(dy, col), g.lda = width;
  g.b = compute_weight.data(), g.ldb = g.n;
  g.c = dx2.data(), g.ldc = g.n;
  g.beta = accumulate_dx ? 1.0f : 0.0f;
  g.dtype = dy.dtype();
  g.c_dtype = dx2.dtype();  // fp32 for a sum over several calls, rounded once after
  gemm(ctx, g);
}

void Linear::backward_weights_columns(DeviceContext& ctx, const Tensor& dy, std::int64_t col, const Tensor& x,
                                      Tensor* into, bool accumulate) {
  const Tensor x2 = as_matrix(x, in_features());
  Tensor& dw = into ? *into : dweight;
  const std::int64_t width = dy.shape().back();
  MT_CHECK(col >= 0 && col + out_features() <= width && dy.numel() / width == x2.dim(0) &&
               dw.numel() == weight.numel(), "linear: weight gradient from columns ", col, " of ", dy.describe());
  GemmArgs g;  // dw (+)= dy[:, cols]^T x
  g.trans_a = true;
  g.m = out_features(), g.n = in_features(), g.k = x2.dim(0);
  g.a = column_address(dy, col), g.lda = width;
  g.b = x2.data(), g.ldb = g.n;
  g.c = dw.data(), g.ldc = g.n;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.dtype = dy.dtype();
  g.c_dtype = DType::F32;
  gemm(ctx, g);
}

Norm Norm::from_store(ParameterStore& store, const std::string& prefix, bool rms, float eps) {
  Norm n;
  n.weight = store.param(prefix + ".weight");
  n.dweight = store.grad(prefix + ".weight");
  if (!rms) {
    n.bias = store.param(prefix + ".bias");
    n.dbias = store.grad(prefix + ".bias");
  }
  n.rms = rms;
  n.eps = eps;
  return n;
}

void Norm::forward(DeviceContext& ctx, const Tensor& x, Tensor& out, Tensor& mean, Tensor& rstd) const {
  if (rms) {
    nn::rmsnorm_forward(ctx, x, weight, eps, out, rstd);
    return;
  }
  nn::layernorm_forward(ctx, x, weight, bias, out, mean, rstd);
}

void Norm::add_forward(DeviceContext& ctx, const Tensor& x, const Tensor& y, Tensor& sum, Tensor& out, Tensor& mean,
                       Tensor& rstd) const {
  if (rms) {
    nn::add_rmsnorm_forward(ctx, x, y, weight, eps, sum, out, rstd);
    return;
  }
  nn::add_layernorm_forward(ctx, x, y, weight, bias, sum, out, mean, rstd);
}

void Norm::backward(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                    Tensor& dx) {
  if (rms) {
    backward_input(ctx, dout, x, mean, rstd, dx);
    backward_params(ctx, dout, x, mean, rstd);
    return;
  }
  nn::layernorm_backward(ctx, dout, x, weight, mean, rstd, dx, dweight, dbias);
}

void Norm::backward_input(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx) const {
  if (rms) {
    nn::rmsnorm_backward_input(ctx, dout, x, weight, rstd, dx);
    return;
  }
  nn::layernorm_backward_input(ctx, dout, x, weight, mean, rstd, dx);
}

void Norm::backward_params(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean,
                           const Tensor& rstd) {
  if (rms) {
    nn::rmsnorm_backward_params(ctx, dout, x, rstd, dweight);
    return;
  }
  nn::layernorm_backward_params(ctx, dout, x, mean, rstd, dweight, dbias);
}

}  // namespace mt
