// CPU kernels against values computed here: fill, elementwise ops, scale and casts per dtype
// (with bf16 rounding and int32 truncation), reductions on sizes around the chunk boundary, and
// the promise of functors.h that a reduction never depends on the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/context.h"  // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"    // defines: Error
#include "runtime/kernels.h"  // defines: kernels::fill, binary, scale, cast, reduce
#include "runtime/tensor.h"   // defines: Tensor
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

DeviceOptions cpu_options(int threads = 2) { return DeviceOptions{Device::cpu(), 0, threads}; }

// A tensor of dtype t holding `values`, each exactly representable in t (checked).
Tensor tensor_of(DType t, const std::vector<double>& values, DeviceContext& ctx) {
  const Shape shape{static_cast<std::int64_t>(values.size())};
  switch (t) {
    case DType::F32: {
      std::vector<float> v;
      for (double x : values) v.push_back(static_cast<float>(x));
      return Tensor::from_host(v, shape, ctx);
    }
    case DType::BF16: {
      std::vector<bf16> v;
      for (double x : values) {
        v.push_back(bf16::from_float(static_cast<float>(x)));
        EXPECT_EQ(static_cast<double>(v.back().to_float()), x) << "not a bf16 value";
      }
      return Tensor::from_host(v, shape, ctx);
    }
    case DType::I32: {
      std::vector<std::int32_t> v;
      for (double x : values) v.push_back(static_cast<std::int32_t>(x));
      return Tensor::from_host(v, shape, ctx);
    }
  }
  return {};
}

// Read-back of any dtype as doubles.
std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  switch (t.dtype()) {
    case DType::F32:
      for (float x : t.to_host<float>()) out.push_back(x);
      break;
    case DType::BF16:
      for (bf16 x : t.to_host<bf16>()) out.push_back(x.to_float());
      break;
    case DType::I32:
      for (std::int32_t x : t.to_host<std::int32_t>()) out.push_back(x);
      break;
  }
  return out;
}

std::vector<std::uint16_t> bf16_bits(const Tensor& t) {
  std::vector<std::uint16_t> out;
  for (bf16 x : t.to_host<bf16>()) out.push_back(x.bits);
  return out;
}

const DType kAllTypes[] = {DType::F32, DType::BF16, DType::I32};

TEST(Fill, EveryDtypeRoundsTheValueItsWay) {
  DeviceContext ctx(cpu_options());
  Tensor f = Tensor::empty({1001}, DType::F32, ctx);
  kernels::fill(ctx, f, 2.5);
  EXPECT_EQ(f.to_host<float>(), std::vector<float>(1001, 2.5f));
  kernels::fill(ctx, f, 0.1);
  EXPECT_EQ(f.to_host<float>(), std::vector<float>(1001, 0.1f));

  Tensor b = Tensor::empty({33}, DType::BF16, ctx);
  kernels::fill(ctx, b, 1.0 + 1.0 / 256);  // halfway between 1 and 1 + 1/128: even is 1
  EXPECT_EQ(bf16_bits(b), std::vector<std::uint16_t>(33, 0x3F80));
  kernels::fill(ctx, b, 1.0 + 3.0 / 256);  // halfway between 1 + 1/128 and 1 + 2/128: even is 1 + 2/128
  EXPECT_EQ(values_of(b), std::vector<double>(33, 1.0 + 2.0 / 128));
  kernels::fill(ctx, b, -3.0);
  EXPECT_EQ(bf16_bits(b), std::vector<std::uint16_t>(33, 0xC040));

  Tensor i = Tensor::empty({17}, DType::I32, ctx);
  kernels::fill(ctx, i, 2.7);
  EXPECT_EQ(i.to_host<std::int32_t>(), std::vector<std::int32_t>(17, 2));
  kernels::fill(ctx, i, -2.7);
  EXPECT_EQ(i.to_host<std::int32_t>(), std::vector<std::int32_t>(17, -2));

  Tensor base = Tensor::zeros({10}, DType::F32, ctx);
  Tensor middle = base.flat_slice(3, 4);
  kernels::fill(ctx, middle, 7.0);  // only the view's elements
  EXPECT_EQ(base.to_host<float>(), (std::vector<float>{0, 0, 0, 7, 7, 7, 7, 0, 0, 0}));
}

double reference_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Max: return std::max(a, b);
    case BinaryOp::Min: return std::min(a, b);
  }
  return 0;
}

// Inputs whose exact results the dtype holds: integers in [-15, 15] (products up to 225 <= 256
// are exact in bf16), and for fp32 also values with fractions, where a single fp32 operation
// rounds the exact (double) result once.
TEST(Binary, AllOpsAllDtypesAgainstExactResults) {
  DeviceContext ctx(cpu_options());
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Min};
  std::vector<double> a, b;
  for (int i = 0; i < 5000; ++i) {
    a.push_back((i * 7) % 31 - 15);
    b.push_back((i * 13 + 5) % 31 - 15);
  }
  for (DType t : kAllTypes) {
    for (BinaryOp op : ops) {
      Tensor ta = tensor_of(t, a, ctx);
      Tensor tb = tensor_of(t, b, ctx);
      Tensor out = Tensor::empty({static_cast<std::int64_t>(a.size())}, t, ctx);
      kernels::binary(ctx, op, ta, tb, out);
      const std::vector<double> got = values_of(out);
      int bad = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (got[i] != reference_binary(op, a[i], b[i]) && ++bad <= 3) {
          ADD_FAILURE() << dtype_name(t) << " op " << static_cast<int>(op) << " at " << i << ": " << a[i] << ", "
                        << b[i] << " -> " << got[i];
        }
      }
    }
  }

  std::vector<float> fa, fb;
  for (int i = 0; i < 3000; ++i) {
    fa.push_back(static_cast<float>(i) * 0.37f - 500.0f);
    fb.push_back(1.0f / static_cast<float>(i + 3));
  }
  for (BinaryOp op : ops) {
    Tensor ta = Tensor::from_host(fa, {3000}, ctx);
    Tensor tb = Tensor::from_host(fb, {3000}, ctx);
    Tensor out = Tensor::empty({3000}, DType::F32, ctx);
    kernels::binary(ctx, op, ta, tb, out);
    const std::vector<float> got = out.to_host<float>();
    for (std::size_t i = 0; i < fa.size(); ++i) {
      ASSERT_EQ(got[i], static_cast<float>(reference_binary(op, fa[i], fb[i]))) << static_cast<int>(op) << " at " << i;
    }
  }
}

TEST(Binary, Bf16ResultsRoundToNearestEven) {
  DeviceContext ctx(cpu_options());
  // 1 + 1/256, 1 + 3/256 and 3 + 1/128 are halfway cases; 255 + 2 = 257 is halfway between 256
  // and 258. Each goes to the even neighbour.
  Tensor a = tensor_of(DType::BF16, {1.0, 1.0, 255.0, 3.0, 0.5}, ctx);
  Tensor b = tensor_of(DType::BF16, {1.0 / 256, 3.0 / 256, 2.0, 1.0 / 128, 0.5}, ctx);
  Tensor out = Tensor::empty({5}, DType::BF16, ctx);
  kernels::binary(ctx, BinaryOp::Add, a, b, out);
  EXPECT_EQ(values_of(out), (std::vector<double>{1.0, 1.0 + 2.0 / 128, 256.0, 3.0, 1.0}));
  kernels::binary(ctx, BinaryOp::Mul, a, b, out);
  EXPECT_EQ(values_of(out), (std::vector<double>{1.0 / 256, 3.0 / 256, 510.0, 3.0 / 128, 0.25}));
}

TEST(Binary, OutputMayBeAnInput) {
  DeviceContext ctx(cpu_options());
  Tensor a = tensor_of(DType::I32, {1, 2, 3, -4}, ctx);
  Tensor b = tensor_of(DType::I32, {10, 20, 30, 40}, ctx);
  kernels::binary(ctx, BinaryOp::Add, a, b, a);
  EXPECT_EQ(a.to_host<std::int32_t>(), (std::vector<std::int32_t>{11, 22, 33, 36}));
  kernels::binary(ctx, BinaryOp::Mul, a, a, a);
  EXPECT_EQ(a.to_host<std::int32_t>(), (std::vector<std::int32_t>{121, 484, 1089, 1296}));
}

TEST(Binary, MismatchedSizesOrTypesThrow) {
  DeviceContext ctx(cpu_options());
  Tensor a = Tensor::zeros({4}, DType::F32, ctx);
  Tensor b = Tensor::zeros({5}, DType::F32, ctx);
  Tensor c = Tensor::zeros({4}, DType::F32, ctx);
  Tensor i = Tensor::zeros({4}, DType::I32, ctx);
  const std::string msg = error_of([&] { kernels::binary(ctx, BinaryOp::Add, a, b, c); });
  EXPECT_NE(msg.find("elementwise op on fp32[4] on cpu, fp32[5] on cpu into fp32[4] on cpu"), std::string::npos) << msg;
  EXPECT_THROW(kernels::binary(ctx, BinaryOp::Add, a, c, b), Error);  // output size
  EXPECT_THROW(kernels::binary(ctx, BinaryOp::Add, a, i, c), Error);  // input dtype
  EXPECT_THROW(kernels::binary(ctx, BinaryOp::Add, a, c, i), Error);  // output dtype
  Tensor f = Tensor::zeros({4}, DType::F32, ctx);
  EXPECT_THROW(kernels::cast(ctx, b, f), Error);  // cast sizes
  Tensor undefined;
  EXPECT_THROW(kernels::fill(ctx, undefined, 1.0), Error);
}

TEST(Scale, PerDtypeWithInt32Truncation) {
  DeviceContext ctx(cpu_options());
  Tensor f = tensor_of(DType::F32, {1.0, 2.0, -3.0, 0.1f}, ctx);
  kernels::scale(ctx, f, 0.5);
  const float tenth_halved = static_cast<float>(static_cast<double>(0.1f) * 0.5);
  EXPECT_EQ(f.to_host<float>(), (std::vector<float>{0.5f, 1.0f, -1.5f, tenth_halved}));

  Tensor b = tensor_of(DType::BF16, {3.0, 1.0, 255.0}, ctx);
  kernels::scale(ctx, b, 1.0 / 3.0);  // computed in double: 3 * (1/3) is exactly 1 after rounding
  // 1/3 in bf16 is 0x3EAB; 85 exact.
  EXPECT_EQ(bf16_bits(b), (std::vector<std::uint16_t>{0x3F80, 0x3EAB, 0x42AA}));

  Tensor i = tensor_of(DType::I32, {7, -7, 5, 100, 1}, ctx);
  kernels::scale(ctx, i, 0.5);  // 3.5 -> 3, -3.5 -> -3 (toward zero), 2.5 -> 2, 50, 0.5 -> 0
  EXPECT_EQ(i.to_host<std::int32_t>(), (std::vector<std::int32_t>{3, -3, 2, 50, 0}));
  kernels::scale(ctx, i, -1.5);  // -4.5 -> -4, 4.5 -> 4, -3, -75, 0
  EXPECT_EQ(i.to_host<std::int32_t>(), (std::vector<std::int32_t>{-4, 4, -3, -75, 0}));
}

TEST(Cast, Fp32ToBf16RoundsAndBackIsExact) {
  DeviceContext ctx(cpu_options());
  const std::vector<float> src = {1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 3.14159265f,
                                  257.0f, std::numeric_limits<float>::infinity()};
  Tensor f = Tensor::from_host(src, {7}, ctx);
  Tensor b = Tensor::empty({7}, DType::BF16, ctx);
  kernels::cast(ctx, f, b);
  // pi = 0x40490FDB: the low half 0x0FDB is below halfway, so it truncates to 0x4049 = 3.140625.
  EXPECT_EQ(bf16_bits(b), (std::vector<std::uint16_t>{0x3F80, 0x3F80, 0x3F82, 0xC020, 0x4049, 0x4380, 0x7F80}));
  Tensor back = Tensor::empty({7}, DType::F32, ctx);
  kernels::cast(ctx, b, back);
  EXPECT_EQ(back.to_host<float>(), (std::vector<float>{1.0f, 1.0f, 1.0f + 2.0f / 128, -2.5f, 3.140625f, 256.0f,
                                                       std::numeric_limits<float>::infinity()}));
}

TEST(Cast, ToInt32TruncatesTowardZeroAndIntToFloatRounds) {
  DeviceContext ctx(cpu_options());
  Tensor f = Tensor::from_host(std::vector<float>{2.9f, -2.9f, 0.5f, -0.5f, 1000000.5f, -7.0f}, {6}, ctx);
  Tensor i = Tensor::empty({6}, DType::I32, ctx);
  kernels::cast(ctx, f, i);
  EXPECT_EQ(i.to_host<std::int32_t>(), (std::vector<std::int32_t>{2, -2, 0, 0, 1000000, -7}));

  Tensor b = tensor_of(DType::BF16, {2.5, -2.5, 384.0}, ctx);
  Tensor ib = Tensor::empty({3}, DType::I32, ctx);
  kernels::cast(ctx, b, ib);
  EXPECT_EQ(ib.to_host<std::int32_t>(), (std::vector<std::int32_t>{2, -2, 384}));

  Tensor big = Tensor::from_host(std::vector<std::int32_t>{16777217, 257, 259, -3}, {4}, ctx);
  Tensor fb = Tensor::empty({4}, DType::F32, ctx);
  kernels::cast(ctx, big, fb);
  EXPECT_EQ(fb.to_host<float>(), (std::vector<float>{16777216.0f, 257.0f, 259.0f, -3.0f}));
  Tensor bb = Tensor::empty({4}, DType::BF16, ctx);
  kernels::cast(ctx, big, bb);
  EXPECT_EQ(values_of(bb), (std::vector<double>{16777216.0, 256.0, 260.0, -3.0}));

  Tensor same = Tensor::empty({4}, DType::I32, ctx);
  kernels::cast(ctx, big, same);  // same dtype: a copy
  EXPECT_EQ(same.to_host<std::int32_t>(), (std::vector<std::int32_t>{16777217, 257, 259, -3}));
}

TEST(Cast, ToInt32SaturatesAndMapsNanToZero) {
  // A plain float-to-int cast is undefined for these; every backend defines them the same way.
  DeviceContext ctx(cpu_options());
  const float inf = std::numeric_limits<float>::infinity();
  Tensor f = Tensor::from_host(std::vector<float>{std::nanf(""), inf, -inf, 3e9f, -3e9f, 2147483520.0f}, {6}, ctx);
  Tensor i = Tensor::empty({6}, DType::I32, ctx);
  kernels::cast(ctx, f, i);
  EXPECT_EQ(i.to_host<std::int32_t>(), (std::vector<std::int32_t>{0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN,
                                                                  2147483520}));
}

// Values that are multiples of 1/4 with small magnitudes: sums and squares are exact in double
// in any order, so the expected results below do not depend on the summation order; all are exact
// in bf16 too. The largest element is the last one (a lost chunk tail shows) and the smallest sits
// in the middle with a larger magnitude, so AbsMax differs from Max.
std::vector<double> reduce_input(std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<double>((i * 37) % 101 - 50) * 0.25;
  if (n >= 2) v[static_cast<std::size_t>(n / 2)] = -99.5;
  if (n >= 1) v[static_cast<std::size_t>(n - 1)] = 98.5;
  return v;
}

TEST(Reduce, AllKindsOnSizesAroundTheChunk) {
  DeviceContext ctx(cpu_options(3));
  ASSERT_EQ(kReduceChunk, 4096);
  for (std::int64_t n : {0, 1, 4095, 4096, 4097, 100003}) {
    const std::vector<double> v = reduce_input(n);
    double sum = 0, squares = 0, max = -INFINITY, min = INFINITY, absmax = 0;
    for (double x : v) {
      sum += x;
      squares += x * x;
      max = std::max(max, x);
      min = std::min(min, x);
      absmax = std::max(absmax, std::fabs(x));
    }
    for (DType t : {DType::F32, DType::BF16}) {
      Tensor x = tensor_of(t, v, ctx);
      EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, x), sum) << dtype_name(t) << " n=" << n;
      EXPECT_EQ(kernels::reduce(ctx, ReduceKind::SumSquares, x), squares) << dtype_name(t) << " n=" << n;
      EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Max, x), max) << dtype_name(t) << " n=" << n;
      EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Min, x), min) << dtype_name(t) << " n=" << n;
      EXPECT_EQ(kernels::reduce(ctx, ReduceKind::AbsMax, x), absmax) << dtype_name(t) << " n=" << n;
    }
    std::vector<double> ints(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) ints[i] = v[i] * 4;  // integers, same positions
    Tensor xi = tensor_of(DType::I32, ints, ctx);
    EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, xi), sum * 4) << "int32 n=" << n;
    EXPECT_EQ(kernels::reduce(ctx, ReduceKind::SumSquares, xi), squares * 16) << "int32 n=" << n;
    EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Max, xi), max * 4) << "int32 n=" << n;
    EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Min, xi), min * 4) << "int32 n=" << n;
    EXPECT_EQ(kernels::reduce(ctx, ReduceKind::AbsMax, xi), absmax * 4) << "int32 n=" << n;
  }
}

TEST(Reduce, EmptyTensorGivesTheIdentity) {
  DeviceContext ctx(cpu_options());
  Tensor x = Tensor::empty({0}, DType::F32, ctx);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, x), 0.0);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::SumSquares, x), 0.0);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Max, x), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Min, x), std::numeric_limits<double>::infinity());
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::AbsMax, x), 0.0);
}

TEST(Reduce, SeesOnlyTheView) {
  DeviceContext ctx(cpu_options());
  std::vector<std::int32_t> v(100);
  for (int i = 0; i < 100; ++i) v[static_cast<std::size_t>(i)] = i;
  Tensor base = Tensor::from_host(v, {10, 10}, ctx);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, base.flat_slice(5, 10)), 95.0);  // 5 + ... + 14
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Max, base.narrow(2, 3)), 49.0);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Min, base.narrow(2, 3)), 20.0);
}

TEST(Reduce, AbsMaxAndSquaresOfNegatives) {
  DeviceContext ctx(cpu_options());
  Tensor x = tensor_of(DType::F32, {-7.5, 3.0, -1.0, 6.0}, ctx);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::AbsMax, x), 7.5);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Max, x), 6.0);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::SumSquares, x), 56.25 + 9 + 1 + 36);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, x), 0.5);
}

// The documented order (functors.h): each chunk of kReduceChunk elements summed in double from
// zero in index order, then the chunk results summed from zero in chunk order.
double documented_sum(const std::vector<float>& x, bool squares) {
  double total = 0;
  for (std::size_t start = 0; start < x.size(); start += kReduceChunk) {
    const std::size_t end = std::min(x.size(), start + static_cast<std::size_t>(kReduceChunk));
    double chunk = 0;
    for (std::size_t i = start; i < end; ++i) {
      const double v = x[i];
      chunk += squares ? v * v : v;
    }
    total += chunk;
  }
  return total;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

TEST(ReduceDeterminism, SameBitsForAnyThreadCount) {
  // Values spread over six decades with both signs, so that the rounding of a double sum
  // depends on the order of the additions.
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> decade(-3, 3);
  std::vector<float> x(1000000);
  for (float& v : x) v = mantissa(rng) * std::pow(10.0f, static_cast<float>(decade(rng)));

  const double expected_sum = documented_sum(x, false);
  const double expected_squares = documented_sum(x, true);
  // The test would notice a change of order: the plain left-to-right sum already differs.
  double plain = 0;
  for (float v : x) plain += v;
  EXPECT_FALSE(same_bits(plain, expected_sum)) << "input too benign to tell orders apart";

  for (int threads : {1, 2, 3, 7}) {
    DeviceContext ctx(cpu_options(threads));
    Tensor t = Tensor::from_host(x, {1000, 1000}, ctx);
    const double sum = kernels::reduce(ctx, ReduceKind::Sum, t);
    const double squares = kernels::reduce(ctx, ReduceKind::SumSquares, t);
    EXPECT_TRUE(same_bits(sum, expected_sum)) << threads << " threads: " << sum << " vs " << expected_sum;
    EXPECT_TRUE(same_bits(squares, expected_squares)) << threads << " threads";
  }
}

}  // namespace
}  // namespace mt
