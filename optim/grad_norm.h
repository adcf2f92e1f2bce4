// The global gradient norm and the clip scale it gives.
//
// Distributed use: each rank calls sum_of_squares on the gradients it owns (after the gradient
// reduction, each element counted on exactly one rank; a replica weighted 0), the ranks sum the
// results (one allreduce), and every rank takes norm = sqrt(total) and scale = clip_scale(norm,
// max_norm), which it passes to AdamW::step as grad_scale. Every rank then gets the same scale.
// defines: sum_of_squares, clip_scale
#pragma once

#include <span>

#include "runtime/context.h"  // defines: DeviceContext
#include "runtime/tensor.h"   // defines: Tensor

namespace mt {

// The sum over i of weights[i] x (the sum of x^2 over tensors[i]) (weights empty: all 1; fp32 or
// bf16 tensors on ctx's device), by kernels::sum_of_squares_tree: fp32 block sums in lane order and
// one fold of every block in a fixed tree, so the same tensors always give the same bits, at any
// thread count and on every run of a device (within about 1e-6 of an exact sum: the test states
// why). One host wait, for the result. NaN or inf in any gradient makes the result NaN or inf;
// nothing is thrown.
double sum_of_squares(DeviceContext& ctx, std::span<const Tensor> tensors, std::span<const float> weights = {});

// The factor to multiply gradients by so that their global norm is at most max_norm:
// 1 when max_norm <= 0 (clipping off) or global_norm <= max_norm, else max_norm / global_norm.
// A non-finite (NaN, inf) or negative global_norm returns NaN, whatever max_norm is: the caller
// must check std::isfinite on the norm (or the scale) and report/stop or skip the step;
// AdamW::step refuses a NaN grad_scale with an Error, so an unchecked one cannot corrupt the
// parameters. A NaN max_norm is a configuration error (Error).
double clip_scale(double global_norm, double max_norm);

}  // namespace mt
