// The CUDA backend against the CPU backend: kernels bit for bit on every dtype, cuBLAS GEMM against
// OpenBLAS, the caching allocator and its cap on a GPU, tensor copies between host and device, and
// stream/event ordering. Compiled in every build; every GPU test skips where no GPU is usable
// (built without CUDA, no driver, no device), and the discovery tests check that such a machine
// gets a reason instead of a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/allocator.h"       // defines: MemoryStats
#include "runtime/backend.h"
#include "runtime/context.h"         // defines: DeviceContext, DeviceOptions
#include "runtime/cuda_api.h"        // defines: cuda::device_count, cuda::properties, cuda::malloc_device
#include "runtime/device.h"          // defines: Device
#include "runtime/error.h"           // defines: Error, OutOfMemoryError
#include "runtime/gemm.h"            // defines: GemmArgs, gemm, matmul, matmul_batched
#include "runtime/kernels.h"         // defines: kernels::fill, binary, scale, cast, reduce
#include "runtime/nn_kernels.h"      // defines: nn::rmsnorm_forward, nn::rmsnorm_backward_input, nn::rmsnorm_backward_params, nn::rope_forward, nn::rope_backward, nn::swiglu_forward, nn::swiglu_backward, nn::attention_forward, nn::attention_backward
#include "runtime/stream.h"          // defines: Stream, Event
#include "runtime/tensor.h"          // defines: Tensor
#include "tests/gpu_skip.h"  // defines: MT_SKIP_WITHOUT_GPU
#include "tests/random_values.h"  // defines: random_values

namespace mt {
namespace {

using i64 = std::int64_t;
using testing::random_values;


DeviceOptions cpu_options() { return DeviceOptions{Device::cpu(), 0, 2}; }
DeviceOptions gpu_options(std::size_t limit = 0) { return DeviceOptions{Device::cuda(0), limit, 1}; }

constexpr DType kDTypes[] = {DType::F32, DType::BF16, DType::I32};

// ---------------------------------------------------------------------------------------------
// Without a GPU: discovery reports why, and asking for a GPU throws instead of crashing.

TEST(CudaDiscovery, ReportsNoGpuWithAReasonInsteadOfFailing) {
  std::string why = "unset";
  int count = -1;
  EXPECT_NO_THROW(count = cuda::device_count(&why));
  EXPECT_EQ(static_cast<std::size_t>(count), testing::test_device_discovery().gpus.size());
  if (count == 0) {
    EXPECT_FALSE(why.empty());
    // Compiled in, the reason names the failing call (no driver: cudaErrorInsufficientDriver).
    if (cuda::compiled()) {
      EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
    }
    EXPECT_EQ(testing::test_device_discovery().cuda_unavailable_reason.empty(), !cuda::compiled());
    std::printf("no usable GPU here: %s\n", testing::no_gpu_reason().c_str());
  } else {
    EXPECT_TRUE(why.empty()) << why;
  }
}

TEST(CudaDiscovery, CudaContextWithoutGpuThrows) {
  if (!testing::test_device_discovery().gpus.empty()) GTEST_SKIP() << "a GPU is usable here";
  EXPECT_THROW(DeviceContext ctx(gpu_options()), Error);
}

// ---------------------------------------------------------------------------------------------
// Properties and raw device memory.

TEST(CudaDevice, PropertiesDescribeTheGpu) {
  MT_SKIP_WITHOUT_GPU();
  for (std::size_t i = 0; i < testing::test_device_discovery().gpus.size(); ++i) {
    const DeviceProperties p = cuda::properties(static_cast<int>(i));
    EXPECT_EQ(p.device, Device::cuda(static_cast<int>(i)));
    EXPECT_FALSE(p.name.empty());
    EXPECT_GT(p.total_memory, 0u);
    EXPECT_EQ(p.free_memory, 0u);  // not queried: it would create a context on every GPU
    EXPECT_GT(p.compute_units, 0);
    EXPECT_FALSE(p.pci_bus_id.empty());
  }
}

TEST(CudaDevice, OutOfMemoryIsNullptrAndLeavesNoStickyError) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext ctx(gpu_options());
  EXPECT_EQ(cuda::malloc_device(2 * testing::test_device_discovery().gpus[0].total_memory), nullptr);  // twice the GPU
  // The failed cudaMalloc must not surface in the next launch check.
  Tensor x = Tensor::empty({1000}, DType::F32, ctx);
  EXPECT_NO_THROW(kernels::fill(ctx, x, 2.0));
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, x), 2000.0);
}

// ---------------------------------------------------------------------------------------------
// Kernels: CUDA against CPU, bit for bit.
//
// Why the results must be identical, not merely close: both backends evaluate the same MT_HD
// functors (functors.h) element by element, in the same precision (bf16 widened to float, scale
// and reductions in double), and every operation involved is a correctly rounded IEEE operation
// on both (nvcc keeps denormals without --use_fast_math; mul_rounded keeps nvcc from fusing the
// sum of squares into an FMA; the host compiler contracts nothing in ISO C++ mode). Reductions
// follow one fixed order on both: chunks of kReduceChunk summed in index order, then the chunk
// results folded in order. Inputs are finite and small (|x| <= 1000) so that no NaN is produced
// (x86 and GPUs write different NaN bit patterns) and no float->int32 cast is out of range
// (undefined in C++, saturating on the GPU).

const i64 kSizes[] = {0, 1, 1000, kReduceChunk + 1, 3 * kReduceChunk + 123,
                      (i64{1} << 21) + 77};  // the last one exceeds one grid: exercises the grid-stride loop

// Values in [-1000, 1000) with fractions, plus exact zeros of both signs, a subnormal fp32 and
// small integers at fixed places.
std::vector<double> sample_values(i64 n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1000.0, 1000.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = dist(rng);
  const double special[] = {0.0, -0.0, 1e-40, -1e-40, 0.5, -1.5, 3.0, 999.99};
  for (std::size_t i = 0; i < std::size(special) && i < v.size(); ++i) v[i * 7 % v.size()] = special[i];
  return v;
}

// The bytes of `values` stored as dtype t (bf16 rounded to nearest even; int32 truncated).
std::vector<unsigned char> encode(DType t, const std::vector<double>& values) {
  std::vector<unsigned char> out(values.size() * dtype_size(t));
  for (std::size_t i = 0; i < values.size(); ++i) {
    unsigned char* dst = out.data() + i * dtype_size(t);
    switch (t) {
      case DType::F32: {
        const float f = static_cast<float>(values[i]);
        std::memcpy(dst, &f, sizeof(f));
        break;
      }
      case DType::BF16: {
        const bf16 b = bf16::from_float(static_cast<float>(values[i]));
        std::memcpy(dst, &b.bits, sizeof(b.bits));
        break;
      }
      case DType::I32: {
        const auto v = static_cast<std::int32_t>(values[i]);
        std::memcpy(dst, &v, sizeof(v));
        break;
      }
    }
  }
  return out;
}

Tensor upload(const std::vector<unsigned char>& bytes, DType t, DeviceContext& ctx) {
  Tensor x = Tensor::empty({static_cast<i64>(bytes.size() / dtype_size(t))}, t, ctx);
  x.copy_from_host(bytes.data(), bytes.size(), ctx.stream());  // synchronous from pageable memory
  return x;
}

// Read-back ordered after everything queued on ctx's stream.
std::vector<unsigned char> download(const Tensor& x, DeviceContext& ctx) {
  std::vector<unsigned char> out(x.nbytes());
  x.copy_to_host(out.data(), out.size(), ctx.stream());
  return out;
}

std::string hex(const unsigned char* p, std::size_t n) {
  std::ostringstream out;
  out << "0x";
  for (std::size_t i = n; i-- > 0;) {
    static const char* digits = "0123456789abcdef";
    out << digits[p[i] >> 4] << digits[p[i] & 15];
  }
  return out.str();
}

::testing::AssertionResult same_bytes(const std::vector<unsigned char>& cpu, const std::vector<unsigned char>& gpu,
                                      DType t) {
  if (cpu.size() != gpu.size()) {
    return ::testing::AssertionFailure() << "sizes differ: cpu " << cpu.size() << " bytes, gpu " << gpu.size();
  }
  const std::size_t es = dtype_size(t);
  for (std::size_t i = 0; i < cpu.size() / es; ++i) {
    if (std::memcmp(cpu.data() + i * es, gpu.data() + i * es, es) != 0) {
      return ::testing::AssertionFailure() << dtype_name(t) << " element " << i << " of " << cpu.size() / es
                                           << ": cpu " << hex(cpu.data() + i * es, es) << ", gpu "
                                           << hex(gpu.data() + i * es, es);
    }
  }
  return ::testing::AssertionSuccess();
}

// A CPU and a GPU context side by side.
struct Pair {
  DeviceContext cpu{cpu_options()};
  DeviceContext gpu{gpu_options()};
};

TEST(CudaKernels, FillMatchesCpu) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  for (DType t : kDTypes) {
    for (i64 n : kSizes) {
      for (double value : {0.0, -2.5, 1e-40, 123456.789, -7.0, 1.0 / 3.0}) {
        Tensor c = Tensor::empty({n}, t, ctx.cpu);
        Tensor g = Tensor::empty({n}, t, ctx.gpu);
        kernels::fill(ctx.cpu, c, value);
        kernels::fill(ctx.gpu, g, value);
        EXPECT_TRUE(same_bytes(download(c, ctx.cpu), download(g, ctx.gpu), t)) << "n=" << n << " value=" << value;
      }
    }
  }
}

TEST(CudaKernels, BinaryMatchesCpu) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Min};
  for (DType t : kDTypes) {
    for (i64 n : kSizes) {
      const auto a = encode(t, sample_values(n, 1));
      const auto b = encode(t, sample_values(n, 2));
      Tensor ca = upload(a, t, ctx.cpu), cb = upload(b, t, ctx.cpu);
      Tensor ga = upload(a, t, ctx.gpu), gb = upload(b, t, ctx.gpu);
      for (BinaryOp op : ops) {
        Tensor co = Tensor::empty({n}, t, ctx.cpu), go = Tensor::empty({n}, t, ctx.gpu);
        kernels::binary(ctx.cpu, op, ca, cb, co);
        kernels::binary(ctx.gpu, op, ga, gb, go);
        EXPECT_TRUE(same_bytes(download(co, ctx.cpu), download(go, ctx.gpu), t))
            << "op " << static_cast<int>(op) << " n=" << n;
      }
      // In place (out is a): each element is read before it is written, by the same thread.
      kernels::binary(ctx.cpu, BinaryOp::Mul, ca, cb, ca);
      kernels::binary(ctx.gpu, BinaryOp::Mul, ga, gb, ga);
      EXPECT_TRUE(same_bytes(download(ca, ctx.cpu), download(ga, ctx.gpu), t)) << "in place, n=" << n;
    }
  }
}

TEST(CudaKernels, ScaleMatchesCpu) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  for (DType t : kDTypes) {
    for (i64 n : kSizes) {
      const auto x = encode(t, sample_values(n, 3));
      for (double alpha : {0.37, -3.0, 1e-3, 1.0 / 3.0}) {
        Tensor c = upload(x, t, ctx.cpu), g = upload(x, t, ctx.gpu);
        kernels::scale(ctx.cpu, c, alpha);
        kernels::scale(ctx.gpu, g, alpha);
        EXPECT_TRUE(same_bytes(download(c, ctx.cpu), download(g, ctx.gpu), t)) << "alpha=" << alpha << " n=" << n;
      }
    }
  }
}

TEST(CudaKernels, CastMatchesCpuForEveryPairOfDTypes) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  for (DType from : kDTypes) {
    for (DType to : kDTypes) {
      for (i64 n : kSizes) {
        const auto x = encode(from, sample_values(n, 4));
        Tensor cs = upload(x, from, ctx.cpu), gs = upload(x, from, ctx.gpu);
        Tensor cd = Tensor::empty({n}, to, ctx.cpu), gd = Tensor::empty({n}, to, ctx.gpu);
        kernels::cast(ctx.cpu, cs, cd);
        kernels::cast(ctx.gpu, gs, gd);
        EXPECT_TRUE(same_bytes(download(cd, ctx.cpu), download(gd, ctx.gpu), to))
            << dtype_name(from) << " -> " << dtype_name(to) << " n=" << n;
      }
    }
  }
}

TEST(CudaKernels, ReduceMatchesCpuBitForBit) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  const ReduceKind kinds[] = {ReduceKind::Sum, ReduceKind::SumSquares, ReduceKind::Max, ReduceKind::Min,
                              ReduceKind::AbsMax};
  for (DType t : kDTypes) {
    for (i64 n : kSizes) {
      const auto x = encode(t, sample_values(n, 5));
      Tensor c = upload(x, t, ctx.cpu), g = upload(x, t, ctx.gpu);
      for (ReduceKind kind : kinds) {
        const double on_cpu = kernels::reduce(ctx.cpu, kind, c);
        const double on_gpu = kernels::reduce(ctx.gpu, kind, g);
        EXPECT_EQ(std::bit_cast<std::uint64_t>(on_cpu), std::bit_cast<std::uint64_t>(on_gpu))
            << dtype_name(t) << " kind " << static_cast<int>(kind) << " n=" << n << ": cpu " << on_cpu << ", gpu "
            << on_gpu;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GEMM: cuBLAS against OpenBLAS.
//
// Tolerance: each element is an fp32 dot product of length k; the two libraries sum in different
// orders (blocking, split-k, FMA), each within about k * 2^-24 of the exact value relative to the
// sum of the |terms|. We accept |gpu - cpu| <= 1e-4 * (|alpha| * sum_p |a_ip b_pj| + |beta c_ij|),
// i.e. 1e-4 relative to the magnitude of the terms: loose enough for any correct order with k up
// to a few hundred (k * 6e-8 * 2 ~ 3e-5 at k = 256), tight enough that a wrong element, a wrong
// transpose or a wrong leading dimension fails at once. bf16 (GPU only) is held to 1e-2, since
// its output is rounded to 8 significant bits (2^-9 = 2e-3 relative).

struct GemmCase {
  bool trans_a, trans_b;
  i64 m, n, k;
  i64 pad = 0;    // added to every leading dimension (submatrices)
  i64 batch = 1;
  i64 gap = 0;    // extra elements between the matrices of a batch
  float alpha = 1.25f, beta = 0.5f;
};

std::string describe(const GemmCase& g) {
  std::ostringstream out;
  out << (g.trans_a ? "A^T" : "A") << " " << (g.trans_b ? "B^T" : "B") << " m=" << g.m << " n=" << g.n
      << " k=" << g.k << " pad=" << g.pad << " batch=" << g.batch;
  return out.str();
}

// Runs one case on both devices through the raw GemmArgs API and compares every element of C,
// and checks that the padding between rows and between matrices is left untouched.
void check_gemm_case(const GemmCase& g, Pair& ctx) {
  SCOPED_TRACE(describe(g));
  const i64 a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const i64 b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const i64 lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
  const i64 stride_a = a_rows * lda + g.gap, stride_b = b_rows * ldb + g.gap, stride_c = g.m * ldc + g.gap;
  const auto a = random_values(static_cast<std::size_t>(std::max<i64>(stride_a * g.batch, 1)), 11);
  const auto b = random_values(static_cast<std::size_t>(std::max<i64>(stride_b * g.batch, 1)), 12);
  const auto c0 = random_values(static_cast<std::size_t>(std::max<i64>(stride_c * g.batch, 1)), 13);

  std::vector<float> results[2];
  DeviceContext* contexts[2] = {&ctx.cpu, &ctx.gpu};
  for (int side = 0; side < 2; ++side) {
    DeviceContext& dc = *contexts[side];
    Tensor ta = Tensor::from_host(a, {static_cast<i64>(a.size())}, dc);
    Tensor tb = Tensor::from_host(b, {static_cast<i64>(b.size())}, dc);
    Tensor tc = Tensor::from_host(c0, {static_cast<i64>(c0.size())}, dc);
    GemmArgs args;
    args.trans_a = g.trans_a;
    args.trans_b = g.trans_b;
    args.m = g.m;
    args.n = g.n;
    args.k = g.k;
    args.alpha = g.alpha;
    args.beta = g.beta;
    args.a = ta.data();
    args.lda = lda;
    args.b = tb.data();
    args.ldb = ldb;
    args.c = tc.data();
    args.ldc = ldc;
    args.batch = g.batch;
    args.stride_a = stride_a;
    args.stride_b = stride_b;
    args.stride_c = stride_c;
    gemm(dc, args);
    dc.synchronize();
    results[side] = tc.to_host<float>();
  }

  const std::vector<float>& cpu = results[0];
  const std::vector<float>& gpu = results[1];
  int reported = 0;
  for (i64 batch = 0; batch < g.batch; ++batch) {
    const float* pa = a.data() + batch * stride_a;
    const float* pb = b.data() + batch * stride_b;
    for (i64 i = 0; i < g.m; ++i) {
      for (i64 j = 0; j < g.n; ++j) {
        double magnitude = 0;
        for (i64 p = 0; p < g.k; ++p) {
          const float av = g.trans_a ? pa[p * lda + i] : pa[i * lda + p];
          const float bv = g.trans_b ? pb[j * ldb + p] : pb[p * ldb + j];
          magnitude += std::fabs(static_cast<double>(av) * bv);
        }
        const std::size_t at = static_cast<std::size_t>(batch * stride_c + i * ldc + j);
        const double bound =
            1e-4 * (std::fabs(g.alpha) * magnitude + std::fabs(static_cast<double>(g.beta) * c0[at])) + 1e-30;
        const double diff = std::fabs(static_cast<double>(gpu[at]) - cpu[at]);
        if (diff > bound && reported++ < 5) {
          ADD_FAILURE() << "C[" << batch << "][" << i << "][" << j << "]: cpu " << cpu[at] << ", gpu " << gpu[at]
                        << ", allowed difference " << bound;
        }
      }
    }
  }
  // Padding: neither backend may write outside the m x n matrices.
  for (std::size_t at = 0; at < c0.size(); ++at) {
    const i64 in_batch = static_cast<i64>(at) % stride_c;
    const bool inside = static_cast<i64>(at) / stride_c < g.batch && in_batch < g.m * ldc && in_batch % ldc < g.n;
    if (!inside && (cpu[at] != c0[at] || gpu[at] != c0[at]) && reported++ < 5) {
      ADD_FAILURE() << "padding element " << at << " changed: was " << c0[at] << ", cpu " << cpu[at] << ", gpu "
                    << gpu[at];
    }
  }
}

TEST(CudaGemm, MatchesCpuForEveryTransposeCombination) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      check_gemm_case({ta, tb, 37, 29, 53}, ctx);          // odd shapes
      check_gemm_case({ta, tb, 1, 1, 1}, ctx);
      check_gemm_case({ta, tb, 5, 130, 3}, ctx);           // wide and short
      check_gemm_case({ta, tb, 64, 64, 256, 0, 1, 0, 1.0f, 0.0f}, ctx);  // beta = 0: C is not read
      check_gemm_case({ta, tb, 33, 17, 9, 3}, ctx);        // leading dimensions larger than the rows
    }
  }
}

TEST(CudaGemm, KZeroScalesCByBeta) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) check_gemm_case({ta, tb, 7, 5, 0}, ctx);
  }
}

TEST(CudaGemm, StridedBatchedMatchesCpu) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      check_gemm_case({ta, tb, 19, 23, 31, 0, 3, 0}, ctx);  // packed batch
      check_gemm_case({ta, tb, 19, 23, 31, 2, 4, 5}, ctx);  // padded rows and gaps between matrices
    }
  }
}

TEST(CudaGemm, MatmulBatchedOnTensorsMatchesCpu) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  const i64 batch = 3, m = 12, k = 20, n = 9;
  const auto a = random_values(batch * k * m, 21);  // stored as [batch, k, m]: used transposed
  const auto b = random_values(batch * k * n, 22);
  std::vector<float> out[2];
  DeviceContext* contexts[2] = {&ctx.cpu, &ctx.gpu};
  for (int side = 0; side < 2; ++side) {
    DeviceContext& dc = *contexts[side];
    Tensor ta = Tensor::from_host(a, {batch, k, m}, dc);
    Tensor tb = Tensor::from_host(b, {batch, k, n}, dc);
    Tensor tc = Tensor::zeros({batch, m, n}, DType::F32, dc);
    matmul_batched(dc, ta, true, tb, false, tc);
    dc.synchronize();
    out[side] = tc.to_host<float>();
  }
  for (std::size_t i = 0; i < out[0].size(); ++i) {
    // |terms| <= 1 each, k = 20 of them: 1e-4 * 20 bounds the allowed difference.
    EXPECT_NEAR(out[1][i], out[0][i], 1e-4 * k) << "element " << i;
  }
}

TEST(CudaGemm, Bf16MatchesCpuFp32OnTheSameValues) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  const i64 m = 24, k = 40, n = 16;
  std::vector<bf16> a, b;
  std::vector<float> a32, b32;
  for (float x : random_values(m * k, 31)) {
    a.push_back(bf16::from_float(x));
    a32.push_back(a.back().to_float());
  }
  for (float x : random_values(k * n, 32)) {
    b.push_back(bf16::from_float(x));
    b32.push_back(b.back().to_float());
  }
  Tensor ga = Tensor::from_host(a, {m, k}, ctx.gpu), gb = Tensor::from_host(b, {k, n}, ctx.gpu);
  Tensor gc = Tensor::zeros({m, n}, DType::BF16, ctx.gpu);
  matmul(ctx.gpu, ga, false, gb, false, gc);
  ctx.gpu.synchronize();
  Tensor ca = Tensor::from_host(a32, {m, k}, ctx.cpu), cb = Tensor::from_host(b32, {k, n}, ctx.cpu);
  Tensor cc = Tensor::zeros({m, n}, DType::F32, ctx.cpu);
  matmul(ctx.cpu, ca, false, cb, false, cc);
  const auto gpu = gc.to_host<bf16>();
  const auto cpu = cc.to_host<float>();
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i].to_float(), cpu[i], 1e-2 * std::max(1.0f, std::fabs(cpu[i]))) << "element " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// The caching allocator on a GPU.

TEST(CudaAllocator, ReusesFreedBlocksWithoutCallingCudaMalloc) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext ctx(gpu_options());
  { Tensor first = Tensor::empty({1000}, DType::F32, ctx); }
  const MemoryStats after_first = ctx.allocator().stats();
  EXPECT_EQ(after_first.raw_calls, 1u);
  EXPECT_EQ(after_first.in_use, 0u);
  EXPECT_GE(after_first.cached, 4000u);
  for (int i = 0; i < 10; ++i) {
    Tensor again = Tensor::empty({1000}, DType::F32, ctx);
    kernels::fill(ctx, again, i);
    EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, again), 1000.0 * i);
    EXPECT_EQ(ctx.allocator().stats().raw_calls, after_first.raw_calls) << "re-allocation " << i;
  }
  ctx.allocator().release_cached();
  EXPECT_EQ(ctx.allocator().stats().cached, 0u);
}

TEST(CudaAllocator, RefusesPastTheMemoryLimit) {
  MT_SKIP_WITHOUT_GPU();
  constexpr std::size_t kLimit = 4u << 20;  // 4 MiB
  DeviceContext ctx(gpu_options(kLimit));
  Tensor half = Tensor::empty({static_cast<i64>(kLimit / 2 / sizeof(float))}, DType::F32, ctx);
  EXPECT_THROW(Tensor::empty({static_cast<i64>(kLimit / sizeof(float))}, DType::F32, ctx), OutOfMemoryError);
  try {
    Tensor::empty({static_cast<i64>(kLimit / sizeof(float))}, DType::F32, ctx);
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  // Within the cap it still works after the refusal.
  Tensor quarter = Tensor::empty({static_cast<i64>(kLimit / 4 / sizeof(float))}, DType::F32, ctx);
  EXPECT_LE(ctx.allocator().stats().in_use, kLimit);
}

TEST(CudaAllocator, DeviceOutOfMemoryIsAnOutOfMemoryError) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext ctx(gpu_options());  // no cap: the device itself refuses
  const auto twice_the_gpu = static_cast<i64>(2 * testing::test_device_discovery().gpus[0].total_memory / sizeof(float));
  EXPECT_THROW(Tensor::empty({twice_the_gpu}, DType::F32, ctx), OutOfMemoryError);
  Tensor fine = Tensor::empty({16}, DType::F32, ctx);
  EXPECT_NO_THROW(kernels::fill(ctx, fine, 1.0));
}

// ---------------------------------------------------------------------------------------------
// Tensor copies between host and device.

TEST(CudaTensor, CopiesRoundTripBetweenHostAndDevice) {
  MT_SKIP_WITHOUT_GPU();
  Pair ctx;
  const i64 n = 10007;
  for (DType t : kDTypes) {
    const auto bytes = encode(t, sample_values(n, 41));
    Tensor host = upload(bytes, t, ctx.cpu);
    Tensor dev = Tensor::empty({n}, t, ctx.gpu);
    dev.copy_from(host, ctx.gpu.stream());  // host -> device
    Tensor dev2 = Tensor::empty({n}, t, ctx.gpu);
    dev2.copy_from(dev, ctx.gpu.stream());  // device -> device, ordered on the stream
    Tensor back = Tensor::zeros({n}, t, ctx.cpu);
    back.copy_from(dev2, ctx.gpu.stream());  // device -> host, synchronous
    EXPECT_TRUE(same_bytes(bytes, download(back, ctx.cpu), t));
    EXPECT_TRUE(same_bytes(bytes, download(dev2, ctx.gpu), t));

    // Into the middle of a device tensor through a view; the rest stays zero.
    Tensor big = Tensor::zeros({3 * n}, t, ctx.gpu);
    big.flat_slice(n, n).copy_from(host, ctx.gpu.stream());
    const auto whole = download(big, ctx.gpu);
    const std::size_t es = dtype_size(t);
    EXPECT_TRUE(same_bytes(bytes, std::vector<unsigned char>(whole.begin() + n * es, whole.begin() + 2 * n * es), t));
    EXPECT_TRUE(std::all_of(whole.begin(), whole.begin() + n * es, [](unsigned char c) { return c == 0; }));
    EXPECT_TRUE(std::all_of(whole.begin() + 2 * n * es, whole.end(), [](unsigned char c) { return c == 0; }));
  }
}

// ---------------------------------------------------------------------------------------------
// The llama family's transformer ops (RMSNorm, RoPE, SwiGLU, grouped-query attention): CUDA
// against the CPU. Both run the same ops (runtime/ops/), but not bit for bit: nvcc
// contracts a * b + c into FMAs, and RoPE's powf, cosf and sinf are CUDA's (within 2 ulp), not
// glibc's. fp32 outputs agree within 1e-5 of the tensor's largest element plus 1e-5 of each;
// bf16 outputs within 2^-7 (one bf16 ulp: an fp32 difference can move a rounding) of the same.

// Every llama op once, forward and backward, on `ctx`, from the same host inputs (rounded to bf16
// when dtype is bf16), outputs read back as fp32 by name. Sizes leave partial blocks and several
// units per thread; the attention is grouped (6 q heads on 2 kv heads) after RoPE.
std::map<std::string, std::vector<float>> run_llama_ops(DeviceContext& ctx, DType dtype) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  const auto input = [&](Shape shape, DType t) {
    std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
    for (float& x : v) x = dist(rng);
    const Tensor f = Tensor::from_host(v, std::move(shape), ctx);
    if (t == DType::F32) return f;
    Tensor out = Tensor::empty(f.shape(), t, ctx);
    kernels::cast(ctx, f, out);
    return out;
  };
  const auto read = [&](const Tensor& t) {
    if (t.dtype() == DType::F32) return t.to_host<float>();
    Tensor f = Tensor::empty(t.shape(), DType::F32, ctx);
    kernels::cast(ctx, t, f);
    return f.to_host<float>();
  };
  const i64 B = 2, T = 67, N = B * T, C = 200, F = 150, hs = 32, H = 6, KV = 2, row = (H + 2 * KV) * hs;
  const nn::AttentionHeads heads{H, KV, 0, H / KV, 0};
  std::map<std::string, std::vector<float>> r;

  const Tensor x = input({N, C}, dtype), w = input({C}, DType::F32), dout = input({N, C}, dtype);
  Tensor out = Tensor::empty({N, C}, dtype, ctx), rstd = Tensor::empty({N}, DType::F32, ctx);
  nn::rmsnorm_forward(ctx, x, w, 1e-5f, out, rstd);
  Tensor dx = input({N, C}, dtype), dw = input({C}, DType::F32);
  nn::rmsnorm_backward_input(ctx, dout, x, w, rstd, dx);
  nn::rmsnorm_backward_params(ctx, dout, x, rstd, dw);
  r["rmsnorm.out"] = read(out);
  r["rmsnorm.rstd"] = read(rstd);
  r["rmsnorm.dx"] = read(dx);
  r["rmsnorm.dweight"] = read(dw);

  Tensor qkv = input({B, T, row}, dtype);
  nn::rope_forward(ctx, qkv, H, KV, 500000.0f);
  r["rope.forward"] = read(qkv);
  Tensor aout = Tensor::empty({B, T, H * hs}, dtype, ctx), att = Tensor::empty({B, H, T, T}, DType::F32, ctx);
  nn::attention_forward(ctx, qkv, heads, aout, att);
  Tensor dqkv = Tensor::empty({B, T, row}, dtype, ctx);
  nn::attention_backward(ctx, input({B, T, H * hs}, dtype), qkv, att, heads, dqkv);
  r["attention.out"] = read(aout);
  r["attention.att"] = read(att);
  r["attention.dqkv"] = read(dqkv);
  nn::rope_backward(ctx, dqkv, H, KV, 500000.0f);
  r["rope.backward"] = read(dqkv);

  const Tensor gu = input({N, 2 * F}, dtype);
  Tensor sout = Tensor::empty({N, F}, dtype, ctx);
  nn::swiglu_forward(ctx, gu, sout);
  Tensor dgu = gu;  // in place, as the header allows
  nn::swiglu_backward(ctx, gu, input({N, F}, dtype), dgu);
  r["swiglu.out"] = read(sout);
  r["swiglu.dgate_up"] = read(dgu);
  return r;
}

TEST(CudaNnKernels, LlamaOpsMatchTheCpuWithinRounding) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext cpu(cpu_options()), gpu(gpu_options());
  for (DType dtype : {DType::F32, DType::BF16}) {
    const auto want = run_llama_ops(cpu, dtype), got = run_llama_ops(gpu, dtype);
    ASSERT_EQ(want.size(), got.size());
    for (const auto& [name, w] : want) {
      const std::vector<float>& g = got.at(name);
      ASSERT_EQ(g.size(), w.size()) << name;
      // Outputs stored in bf16 get a bf16 ulp; fp32 ones (rstd, att, dweight) fp32 rounding.
      const bool rounded = dtype == DType::BF16 && name != "rmsnorm.rstd" && name != "attention.att" &&
                           name != "rmsnorm.dweight";
      const double tol = rounded ? 1.0 / 128 : 1e-5;
      double scale = 0.0;
      for (float v : w) scale = std::max(scale, std::abs(static_cast<double>(v)));
      std::size_t bad = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        const double err = std::abs(static_cast<double>(g[i]) - w[i]);
        if (!(err <= tol * (scale + std::abs(static_cast<double>(w[i])))) && bad++ < 3)
          ADD_FAILURE() << dtype_name(dtype) << " " << name << "[" << i << "]: cpu " << w[i] << ", gpu " << g[i];
      }
      EXPECT_EQ(bad, 0u) << dtype_name(dtype) << " " << name;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Streams and events.

TEST(CudaStream, EventOrdersWorkAcrossStreams) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext ctx(gpu_options());
  const Device gpu = Device::cuda(0);
  Stream producer(gpu), consumer(gpu);
  Event ready(gpu);
  EXPECT_FALSE(ready.query());  // never recorded
  const i64 n = i64{1} << 22;
  Tensor x = Tensor::empty({n}, DType::F32, ctx);
  // Enough work on the producer that the consumer would overtake it without the event.
  backend::Cuda::fill(x.data(), DType::F32, n, 1.0, producer.handle());
  for (int i = 0; i < 20; ++i) backend::Cuda::scale(x.data(), DType::F32, n, 2.0, producer.handle());
  ready.record(producer);
  ready.block(consumer);  // the host does not wait here
  backend::Cuda::scale(x.data(), DType::F32, n, 0.5, consumer.handle());
  consumer.synchronize();
  EXPECT_TRUE(ready.query());  // the consumer waited for it, so it has completed
  ready.synchronize();
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Min, x), 524288.0);  // 2^20 / 2 everywhere
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Max, x), 524288.0);
}

TEST(CudaStream, QueryAndSynchronize) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext ctx(gpu_options());
  Event done(ctx.device());
  Tensor x = Tensor::empty({1 << 20}, DType::F32, ctx);
  kernels::fill(ctx, x, 3.0);
  done.record(ctx.stream());
  done.synchronize();
  EXPECT_TRUE(done.query());
  ctx.stream().synchronize();
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, x), 3.0 * (1 << 20));
}

}  // namespace
}  // namespace mt
