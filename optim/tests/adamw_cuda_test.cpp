// AdamW on a GPU against the CPU: the same bits for parameters, m and v over several steps (decay
// on and off, views into a flat buffer, grad_scale), the one-launch kernel (op family `optimizer`)
// against the per-slot reference launches with bf16 copies, plus the device check. Compiled in every
// build; the GPU cases skip where no GPU is usable, and a build without CUDA checks that the
// backend says so.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "optim/adamw.h"           // defines: AdamW
#include "optim/grad_norm.h"       // defines: sum_of_squares
#include "runtime/backend.h"
#include "runtime/context.h"             // defines: DeviceContext, DeviceOptions
#include "runtime/cuda_kernel_choice.h"  // defines: CudaKernels, OpFamily
#include "runtime/cuda_api.h"            // defines: cuda::compiled
#include "runtime/device.h"              // defines: Device
#include "runtime/error.h"
#include "runtime/tensor.h"              // defines: Tensor
#include "tests/float_bits.h"            // defines: same_bits
#include "tests/gpu_skip.h"  // defines: MT_SKIP_WITHOUT_GPU
#include "tests/random_values.h"         // defines: random_values
#include "tests/test_helpers.h"          // defines: error_of, contains

namespace mt {
namespace {

using testing::contains;
using testing::error_of;
using testing::random_values;
using testing::same_bits;
using i64 = std::int64_t;

// Runs the same steps on one device: slots "w" [n0] with decay and "b" [n1] without, both views
// into one flat parameter buffer and one flat gradient buffer. Returns params, m and v.
std::vector<float> run_steps(DeviceContext& ctx, i64 n0, i64 n1, int steps) {
  const i64 n = n0 + n1;
  Tensor flat_p = Tensor::from_host(random_values(static_cast<std::size_t>(n), 1), {n}, ctx);
  Tensor flat_g = Tensor::zeros({n}, DType::F32, ctx);
  AdamW opt(ctx, {{"w", flat_p.flat_slice(0, n0), flat_g.flat_slice(0, n0), true},
                  {"b", flat_p.flat_slice(n0, n1), flat_g.flat_slice(n0, n1), false}});
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> g = random_values(static_cast<std::size_t>(n), 10 + s);
    flat_g.copy_from_host(g.data(), g.size() * sizeof(float), ctx.stream());
    opt.step(1e-3f * static_cast<float>(s + 1), s % 2 == 0 ? 1.0f : 0.37f);
  }
  std::vector<float> out = flat_p.to_host<float>();
  for (std::size_t i = 0; i < opt.size(); ++i) {
    for (const Tensor& t : {opt.m(i), opt.v(i)}) {
      const std::vector<float> more = t.to_host<float>();
      out.insert(out.end(), more.begin(), more.end());
    }
  }
  return out;
}

TEST(AdamWCuda, MatchesTheCpuBitForBit) {
  MT_SKIP_WITHOUT_GPU();
  // More elements than one grid covers (4096 blocks x 256 threads), so the grid-stride loop runs.
  const i64 n0 = 1100000, n1 = 4097;
  DeviceContext cpu(DeviceOptions{Device::cpu(), 0, 2});
  DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
  EXPECT_TRUE(same_bits(run_steps(gpu, n0, n1, 5), run_steps(cpu, n0, n1, 5)));
}

// Many slots with bf16 copies on one device with the given kernels: sizes past one chunk, below
// one, an empty slot, decay mixed, every other slot with a copy. Returns params, m, v and the copies'
// bits (as floats: a bf16 is the top half of one).
std::vector<float> run_multi(DeviceContext& ctx, CudaKernels kernels, int steps) {
  ctx.set_cuda_kernels(kernels);
  const std::vector<i64> sizes = {5, 3 * kAdamWChunk + 1, 0, 4097, kAdamWChunk, 1};
  i64 n = 0;
  for (const i64 k : sizes) n += k;
  Tensor p = Tensor::from_host(random_values(static_cast<std::size_t>(n), 7), {n}, ctx);
  Tensor g = Tensor::zeros({n}, DType::F32, ctx);
  Tensor copy = Tensor::zeros({n}, DType::BF16, ctx);
  std::vector<ParamSlot> slots;
  std::vector<Tensor> copies;
  i64 at = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    slots.push_back({"s" + std::to_string(k), p.flat_slice(at, sizes[k]), g.flat_slice(at, sizes[k]), k % 3 != 1});
    copies.push_back(k % 2 == 0 ? copy.flat_slice(at, sizes[k]) : Tensor{});
    at += sizes[k];
  }
  AdamW opt(ctx, std::move(slots), AdamWConfig{}, std::move(copies));
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> gs = random_values(static_cast<std::size_t>(n), 20 + s);
    g.copy_from_host(gs.data(), gs.size() * sizeof(float), ctx.stream());
    opt.step(2e-3f * static_cast<float>(s + 1), s % 2 == 0 ? 1.0f : 0.61f);
  }
  std::vector<float> out = p.to_host<float>();
  for (std::size_t i = 0; i < opt.size(); ++i) {
    for (const Tensor& t : {opt.m(i), opt.v(i)}) {
      const std::vector<float> more = t.to_host<float>();
      out.insert(out.end(), more.begin(), more.end());
    }
  }
  for (const bf16 x : copy.to_host<bf16>()) out.push_back(x.to_float());
  return out;
}

// The optimizer family's one launch over the table against the reference launches on the same GPU
// and against the CPU: the same bits, twice.
TEST(AdamWCuda, OneLaunchOverTheTableMatchesTheReferenceAndTheCpuAndRepeats) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext cpu(DeviceOptions{Device::cpu(), 0, 3});
  DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
  const CudaKernels multi = CudaKernels::of({OpFamily::Optimizer});
  const std::vector<float> fast = run_multi(gpu, multi, 4);
  EXPECT_TRUE(same_bits(fast, run_multi(gpu, CudaKernels{}, 4))) << "against the reference launches";
  EXPECT_TRUE(same_bits(fast, run_multi(cpu, CudaKernels{}, 4))) << "against the CPU";
  EXPECT_TRUE(same_bits(fast, run_multi(gpu, multi, 4))) << "a second run";
}

TEST(AdamWCuda, SumOfSquaresMatchesTheCpu) {
  MT_SKIP_WITHOUT_GPU();
  const std::vector<float> values = random_values(300001, 3);
  DeviceContext cpu(DeviceOptions{Device::cpu(), 0, 2});
  DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
  const std::vector<Tensor> on_cpu = {Tensor::from_host(values, {300001}, cpu)};
  const std::vector<Tensor> on_gpu = {Tensor::from_host(values, {300001}, gpu)};
  EXPECT_EQ(sum_of_squares(gpu, on_gpu), sum_of_squares(cpu, on_cpu));
}

TEST(AdamWCuda, RejectsTensorsOnAnotherDevice) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext cpu(DeviceOptions{Device::cpu(), 0, 1});
  DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
  const std::string e = error_of([&] {
    AdamW opt(gpu, {{"w", Tensor::zeros({4}, DType::F32, cpu), Tensor::zeros({4}, DType::F32, gpu), true}});
  });
  EXPECT_TRUE(contains(e, "'w'") && contains(e, "fp32[4] on cpu") && contains(e, "context on cuda:0")) << e;
}

TEST(AdamWCuda, BackendWithoutCudaSaysHowToBuildIt) {
  if (cuda::compiled()) GTEST_SKIP() << "the CUDA backend is built";
  float x = 0;
  const std::string e = error_of([&] { backend::Cuda::adamw(AdamWStepArgs{}, &x, &x, &x, &x, 1, nullptr); });
  EXPECT_TRUE(contains(e, "-DMESHTRAIN_CUDA=ON")) << e;
}

}  // namespace
}  // namespace mt
