// Runs an op of an op family (runtime/ops/<family>.h) on the context's device:
// builds Op<T> for the activation dtype, lets `fill` set its fields, and hands it to the CPU or CUDA
// backend (runtime/backend.h; on CUDA its fast kernel where the context asks for it). Shared
// by the files that implement the op families, with the checks and pointers their entry points share.
// defines: nn::run, expect_on, expect_f32, expect_numel, check_ids, ptr, unit_width
#pragma once

#include <cstdint>
#include <string>
#include <typeinfo>

#include "runtime/backend.h"
#include "runtime/op_profile.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace mt::nn {

// Builds Op<T> for the activation dtype and runs it. fp32 or bf16 on either backend: bf16 on the
// CPU is slow (no vector bf16 arithmetic) and meant for testing the bf16 path without a GPU.
template <template <class> class Op, class Fill>
void run(DeviceContext& ctx, DType activations, Fill&& fill) {
  const OpScope scope = OpScope::named(ctx, [] {
    static const std::string name = op_type_name(typeid(Op<float>).name());
    return name;
  });
  auto go = [&](auto tag) {
    using T = decltype(tag);
    Op<T> op{};
    fill(op);
    if (ctx.device().is_cpu()) {
      backend::Cpu::run(op, ctx.cpu_threads());
    } else if constexpr (backend::FastKernelOf<Op>::exists) {
      // The kernel cut for the GPU where the context turned its family on (runtime/cuda_kernel_choice.h).
      if (ctx.cuda_kernels().uses(backend::FastKernelOf<Op>::family)) {
        backend::Cuda::run_fast(op, ctx.stream().handle());
      } else {
        backend::Cuda::run(op, ctx.stream().handle());
      }
    } else {
      backend::Cuda::run(op, ctx.stream().handle());
    }
  };
  if (activations == DType::F32) {
    go(float{});
  } else {
    MT_CHECK(activations == DType::BF16, "activations must be fp32 or bf16, got ", dtype_name(activations));
    go(bf16{});
  }
}

inline void expect_on(const DeviceContext& ctx, const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), what, " is not allocated");
  MT_CHECK(t.device() == ctx.device(), what, " is ", t.describe(), ", the context is on ", ctx.device().str());
}

inline void expect_f32(const DeviceContext& ctx, const Tensor& t, const char* what) {
  expect_on(ctx, t, what);
  MT_CHECK(t.dtype() == DType::F32, what, " must be fp32, got ", t.describe());
}

inline void expect_numel(const Tensor& t, std::int64_t numel, const char* what) {
  MT_CHECK(t.numel() == numel, what, " has ", t.numel(), " elements (", t.describe(), "), expected ", numel);
}

// Token ids are checked against the vocabulary once, where they enter (the data loader as it reads
// a batch, Gpt's host-id API), never per kernel: here only their type.
inline void check_ids(const Tensor& ids, const char* what) {
  MT_CHECK(ids.dtype() == DType::I32, what, " must be int32, got ", ids.describe());
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

// Columns per unit of the ops that take a `width` (runtime/ops/math.h): a vector's worth for a
// CPU unit's inner loop, one per CUDA thread. The results are the same bits either way.
inline std::int64_t unit_width(const DeviceContext& ctx) { return ctx.device().is_cpu() ? nn_math::kColumnBlock : 1; }

}  // namespace mt::nn
