// Elementwise and reduction kernels on tensors, dispatched to the CPU or CUDA backend by the
// tensor's device. Work is ordered on the context's stream.
// defines: fill, binary, scale, cast, reduce, accumulate_mean, mean_workspace, sum_of_squares_tree
#pragma once

#include <span>

#include "runtime/ops/elementwise.h"
#include "runtime/tensor.h"

namespace mt::kernels {

void fill(DeviceContext& ctx, Tensor& x, double value);
// out = a (op) b, elementwise; out may be a or b.
void binary(DeviceContext& ctx, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void scale(DeviceContext& ctx, Tensor& x, double alpha);  // x *= alpha
// dst = src converted to dst's dtype (rounding to nearest even into bf16; truncation into int32).
void cast(DeviceContext& ctx, const Tensor& src, Tensor& dst);
// One number from all elements, reduced in a fixed order (see functors.h). Blocks until done.
double reduce(DeviceContext& ctx, ReduceKind kind, const Tensor& x);
// acc (fp32 [1], on ctx's device) = fp32(acc + the sum of x / x.numel()), the sum as reduce(Sum)
// takes it (ChunkSums, AddMeanOfChunks): a mean kept on the device, with no host wait. Into a zero
// acc it gives exactly fp32(reduce(Sum) / numel). fp32 x. The chunks' sums go to `workspace`, the
// caller's (fp32, at least mean_workspace(x.numel()) elements), so that a call allocates nothing.
void accumulate_mean(DeviceContext& ctx, const Tensor& x, Tensor& acc, Tensor& workspace);
std::int64_t mean_workspace(std::int64_t n);
// out (fp32 [1], on ctx's device) = the sum over i of weights[i] x the sum of squares of tensors[i]
// (weights empty: all 1), by the fp32 tree of runtime/ops/elementwise.h (SquaresByBlock, then one
// FoldPartials over every tensor's blocks). No host wait; the same bits at any thread count and on
// every run, and the CPU's bits on CUDA's unit kernels. fp32 or bf16 tensors.
void sum_of_squares_tree(DeviceContext& ctx, std::span<const Tensor> tensors, std::span<const float> weights,
                         Tensor& out);

}  // namespace mt::kernels
