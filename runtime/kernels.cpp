#include "runtime/kernels.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "runtime/backend.h"
#include "runtime/device_counters.h"
#include "runtime/op_profile.h"
#include "runtime/nn_run.h"

namespace mt::kernels {
namespace {
void check_device(const DeviceContext& ctx, const Tensor& t) {
  MT_CHECK(t.device() == ctx.device(), t.describe(), " used with a context on ", ctx.device().str());
}
}  // namespace

void fill(DeviceContext& ctx, Tensor& x, double value) {
  const OpScope scope(ctx, "fill");
  check_device(ctx, x);
  if (ctx.device().is_cpu()) {
    backend::Cpu::fill(x.data(), x.dtype(), x.numel(), value, ctx.cpu_threads());
  } else {
    backend::Cuda::fill(x.data(), x.dtype(), x.numel(), value, ctx.stream().handle());
  }
}

void binary(DeviceContext& ctx, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const OpScope scope(ctx, "binary");
  check_device(ctx, a);
  check_device(ctx, b);
  check_device(ctx, out);
  MT_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype() && a.numel() == b.numel() &&
               a.numel() == out.numel(),
           "elementwise op on ", a.describe(), ", ", b.describe(), " into ", out.describe());
  if (ctx.device().is_cpu()) {
    backend::Cpu::binary(op, a.dtype(), a.data(), b.data(), out.data(), a.numel(), ctx.cpu_threads());
  } else {
    backend::Cuda::binary(op, a.dtype(), a.data(), b.data(), out.data(), a.numel(), ctx.stream().handle());
  }
}

void scale(DeviceContext& ctx, Tensor& x, double alpha) {
  const OpScope scope(ctx, "scale");
  check_device(ctx, x);
  if (ctx.device().is_cpu()) {
    backend::Cpu::scale(x.data(), x.dtype(), x.numel(), alpha, ctx.cpu_threads());
  } else {
    backend::Cuda::scale(x.data(), x.dtype(), x.numel(), alpha, ctx.stream().handle());
  }
}

void cast(DeviceContext& ctx, const Tensor& src, Tensor& dst) {
  const OpScope scope(ctx, "cast");
  check_device(ctx, src);
  check_device(ctx, dst);
  MT_CHECK(src.numel() == dst.numel(), "cast from ", src.describe(), " into ", dst.describe());
  if (ctx.device().is_cpu()) {
    backend::Cpu::cast(src.data(), src.dtype(), dst.data(), dst.dtype(), src.numel(), ctx.cpu_threads());
  } else {
    backend::Cuda::cast(src.data(), src.dtype(), dst.data(), dst.dtype(), src.numel(), ctx.stream().handle());
  }
}

double reduce(DeviceContext& ctx, ReduceKind kind, const Tensor& x) {
  const OpScope scope(ctx, "reduce");
  count_host_sync();  // the result comes back to the host
  check_device(ctx, x);
  if (ctx.device().is_cpu()) return backend::Cpu::reduce(kind, x.data(), x.dtype(), x.numel(), ctx.cpu_threads());
  return backend::Cuda::reduce(kind, x.data(), x.dtype(), x.numel(), ctx.stream().handle());
}

// The chunks' double sums, two fp32 slots each (tensors hold no fp64).
std::int64_t mean_workspace(std::int64_t n) { return 2 * nn_math::blocks_of(n, kReduceChunk); }

void accumulate_mean(DeviceContext& ctx, const Tensor& x, Tensor& acc, Tensor& workspace) {
  nn::expect_f32(ctx, x, "mean input");
  nn::expect_f32(ctx, acc, "mean accumulator");
  nn::expect_numel(acc, 1, "mean accumulator");
  nn::expect_f32(ctx, workspace, "mean workspace");
  MT_CHECK(x.numel() > 0, "the mean of no elements");
  MT_CHECK(workspace.numel() >= mean_workspace(x.numel()), "mean workspace ", workspace.describe(), " for ",
           x.numel(), " elements: ", mean_workspace(x.numel()), " needed");
  MT_CHECK(reinterpret_cast<std::uintptr_t>(workspace.data()) % alignof(double) == 0, "mean workspace ",
           workspace.describe(), " is not aligned for doubles");
  const std::int64_t chunks = nn_math::blocks_of(x.numel(), kReduceChunk);
  auto* sums = static_cast<double*>(workspace.data());
  nn::run<nn_math::ChunkSums>(ctx, DType::F32, [&](auto& op) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(op.x)>>;
    op = {nn::ptr<const T>(x), sums, x.numel()};
  });
  nn::run<nn_math::AddMeanOfChunks>(ctx, DType::F32, [&](auto& op) {
    op = {sums, nn::ptr<float>(acc), chunks, static_cast<double>(x.numel())};
  });
}

void sum_of_squares_tree(DeviceContext& ctx, std::span<const Tensor> tensors, std::span<const float> weights,
                         Tensor& out) {
  MT_CHECK(weights.empty() || weights.size() == tensors.size(), "sum of squares: ", weights.size(),
           " weights for ", tensors.size(), " tensors");
  nn::expect_f32(ctx, out, "sum of squares");
  nn::expect_numel(out, 1, "sum of squares");
  std::int64_t blocks = 0;
  for (const Tensor& t : tensors) {
    MT_CHECK(t.defined(), "sum of squares of an undefined tensor");
    nn::expect_on(ctx, t, "sum of squares input");
    blocks += nn_math::blocks_of(t.numel(), nn_math::kNormBlock);
  }
  Tensor partial = Tensor::empty({std::max<std::int64_t>(blocks, 1)}, DType::F32, ctx);
  std::int64_t first = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const float weight = weights.empty() ? 1.0f : weights[i];
    nn::run<nn_math::SquaresByBlock>(ctx, t.dtype(), [&](auto& op) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(op.x)>>;
      op = {nn::ptr<const T>(t), nn::ptr<float>(partial) + first, t.numel(), weight};
    });
    first += nn_math::blocks_of(t.numel(), nn_math::kNormBlock);
  }
  nn::run<nn_math::FoldPartials>(ctx, DType::F32, [&](auto& op) { op = {nn::ptr<float>(partial), nn::ptr<float>(out), blocks}; });
}

}  // namespace mt::kernels
