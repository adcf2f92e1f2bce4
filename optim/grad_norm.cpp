#include "optim/grad_norm.h"

#include <cmath>
#include <limits>

#include "runtime/kernels.h"  // defines: kernels::reduce

namespace mt {

double sum_of_squares(DeviceContext& ctx, std::span<const Tensor> tensors) {
  double total = 0.0;
  for (const Tensor& t : tensors) {
    MT_CHECK(t.defined(), "gradient norm of an undefined tensor");
    total += kernels::reduce(ctx, ReduceKind::SumSquares, t);
  }
  return total;
}

double clip_scale(double global_norm, double max_norm) {
  MT_CHECK(!std::isnan(max_norm), "gradient clipping max_norm is NaN");
  if (!std::isfinite(global_norm) || global_norm < 0.0) return std::numeric_limits<double>::quiet_NaN();
  if (!(max_norm > 0.0) || global_norm <= max_norm) return 1.0;
  return max_norm / global_norm;
}

}  // namespace mt
