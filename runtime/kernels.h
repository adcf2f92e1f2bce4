// Elementwise and reduction kernels on tensors, dispatched to the CPU or CUDA backend by the
// tensor's device. Work is ordered on the context's stream.
// defines: fill, binary, scale, cast, reduce
#pragma once

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

}  // namespace mt::kernels
