// The global gradient norm and the clip scale it gives.
//
// Distributed use: each rank calls sum_of_squares on the gradients it owns (after the gradient
// reduction, each element counted on exactly one rank), the ranks sum the results (allreduce of
// one double), and every rank takes norm = sqrt(total) and scale = clip_scale(norm, max_norm),
// which it passes to AdamW::step as grad_scale. Every rank then gets the same scale.
// defines: sum_of_squares, clip_scale
#pragma once

#include <span>

#include "runtime/context.h"  // defines: DeviceContext
#include "runtime/tensor.h"   // defines: Tensor

namespace mt {

// Sum of x^2 over every element of every tensor (any dtype, all on ctx's device), accumulated in
// double: kernels::reduce(SumSquares) per tensor, whose result never depends on the thread count
// or the device, added in the order given. So the same tensors always give the same bits.
// Blocks until the device has finished (one read-back per tensor). NaN or inf in any gradient
// makes the result NaN or inf; nothing is thrown.
double sum_of_squares(DeviceContext& ctx, std::span<const Tensor> tensors);

// The factor to multiply gradients by so that their global norm is at most max_norm:
// 1 when max_norm <= 0 (clipping off) or global_norm <= max_norm, else max_norm / global_norm.
// A non-finite (NaN, inf) or negative global_norm returns NaN, whatever max_norm is: the caller
// must check std::isfinite on the norm (or the scale) and report/stop or skip the step;
// AdamW::step refuses a NaN grad_scale with an Error, so an unchecked one cannot corrupt the
// parameters. A NaN max_norm is a configuration error (Error).
double clip_scale(double global_norm, double max_norm);

}  // namespace mt
