#include "optim/grad_norm.h"

#include <cmath>
#include <limits>

#include "runtime/kernels.h"  // defines: kernels::sum_of_squares_tree

namespace mt {

double sum_of_squares(DeviceContext& ctx, std::span<const Tensor> tensors, std::span<const float> weights) {
  Tensor total = Tensor::empty({1}, DType::F32, ctx);
  kernels::sum_of_squares_tree(ctx, tensors, weights, total);
  return static_cast<double>(total.to_host<float>()[0]);
}

double clip_scale(double global_norm, double max_norm) {
  MT_CHECK(!std::isnan(max_norm), "gradient clipping max_norm is NaN");
  if (!std::isfinite(global_norm) || global_norm < 0.0) return std::numeric_limits<double>::quiet_NaN();
  if (!(max_norm > 0.0) || global_norm <= max_norm) return 1.0;
  return max_norm / global_norm;
}

}  // namespace mt
