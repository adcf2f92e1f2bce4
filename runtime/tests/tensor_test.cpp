// Tensors on the CPU: creation and read-back per dtype, views sharing storage (reshape, flat
// slices, row ranges), copies, type-checked access; and CPU streams and events.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/context.h"  // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"    // defines: Error
#include "runtime/stream.h"   // defines: Stream, Event
#include "runtime/tensor.h"   // defines: Tensor, Shape, shape_numel, shape_str
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

DeviceOptions cpu_options() { return DeviceOptions{Device::cpu(), 0, 2}; }

std::vector<std::uint16_t> bits_of(const std::vector<bf16>& v) {
  std::vector<std::uint16_t> out;
  for (bf16 x : v) out.push_back(x.bits);
  return out;
}

TEST(Shape, ElementCountOverflowIsAnError) {
  EXPECT_TRUE(contains(error_of([] { shape_numel({std::int64_t{1} << 32, std::int64_t{1} << 32}); }), "2^63"));
}

TEST(Shape, NumelAndText) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({0}), 0);
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({5, 0, 7}), 0);
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(shape_str({4, 8}), "[4, 8]");
  EXPECT_TRUE(contains(error_of([] { shape_numel({2, -1}); }), "negative dimension in shape [2, -1]"));
}

TEST(Tensor, EmptyHasShapeTypeAndBytes) {
  DeviceContext ctx(cpu_options());
  Tensor t = Tensor::empty({4, 8}, DType::BF16, ctx);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (Shape{4, 8}));
  EXPECT_EQ(t.rank(), 2u);
  EXPECT_EQ(t.dim(0), 4);
  EXPECT_EQ(t.dim(1), 8);
  EXPECT_THROW(t.dim(2), std::out_of_range);
  EXPECT_EQ(t.numel(), 32);
  EXPECT_EQ(t.nbytes(), 64u);
  EXPECT_EQ(t.dtype(), DType::BF16);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.describe(), "bf16[4, 8] on cpu");
  EXPECT_EQ(Tensor::empty({3}, DType::F32, ctx).describe(), "fp32[3] on cpu");
  EXPECT_EQ(Tensor::empty({}, DType::I32, ctx).describe(), "int32[] on cpu");
  EXPECT_EQ(Tensor::empty({}, DType::I32, ctx).numel(), 1);
}

// 2^62 fp32 elements are 2^64 bytes: the byte count must not wrap to 0 and yield a tensor that
// claims 2^62 elements over a 256-byte block.
TEST(Tensor, ByteCountOverflowIsRefused) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 1 << 20, 1});
  EXPECT_THROW(Tensor::empty({std::int64_t{1} << 62}, DType::F32, ctx), Error);
  EXPECT_EQ(ctx.allocator().stats().in_use, 0u);
}

TEST(Tensor, UndefinedTensorRefusesAccess) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.describe(), "undefined tensor");
  EXPECT_TRUE(contains(error_of([&] { (void)t.data(); }), "undefined tensor"));
  EXPECT_TRUE(contains(error_of([&] { (void)t.device(); }), "undefined tensor"));
}

TEST(Tensor, ZerosForEveryDtype) {
  DeviceContext ctx(cpu_options());
  EXPECT_EQ(Tensor::zeros({3, 5}, DType::F32, ctx).to_host<float>(), std::vector<float>(15, 0.0f));
  EXPECT_EQ(bits_of(Tensor::zeros({7}, DType::BF16, ctx).to_host<bf16>()), std::vector<std::uint16_t>(7, 0));
  EXPECT_EQ(Tensor::zeros({2, 2, 2}, DType::I32, ctx).to_host<std::int32_t>(), std::vector<std::int32_t>(8, 0));
  EXPECT_TRUE(Tensor::zeros({0}, DType::F32, ctx).to_host<float>().empty());
}

TEST(Tensor, HostRoundTripPerDtype) {
  DeviceContext ctx(cpu_options());
  const std::vector<float> f = {1.5f, -2.25f, 3.0e-8f, 1.0e30f, -0.0f, 7.0f};
  Tensor tf = Tensor::from_host(f, {2, 3}, ctx);
  EXPECT_EQ(tf.dtype(), DType::F32);
  EXPECT_EQ(tf.shape(), (Shape{2, 3}));
  EXPECT_EQ(tf.to_host<float>(), f);

  const std::vector<bf16> b = {bf16{0x3F80}, bf16{0xC020}, bf16{0x7F80}, bf16{0x0001}, bf16{0x8000}};
  Tensor tb = Tensor::from_host(b, {5}, ctx);
  EXPECT_EQ(tb.dtype(), DType::BF16);
  EXPECT_EQ(bits_of(tb.to_host<bf16>()), bits_of(b));

  const std::vector<std::int32_t> i = {0, -1, 2147483647, -2147483647 - 1};
  Tensor ti = Tensor::from_host(i, {2, 2}, ctx);
  EXPECT_EQ(ti.dtype(), DType::I32);
  EXPECT_EQ(ti.to_host<std::int32_t>(), i);

  EXPECT_TRUE(contains(error_of([&] { Tensor::from_host(f, {4}, ctx); }), "shape [4] does not hold 6 values"));
}

TEST(Tensor, WrongElementTypeThrows) {
  DeviceContext ctx(cpu_options());
  Tensor t = Tensor::zeros({4}, DType::F32, ctx);
  EXPECT_EQ(t.data_as<float>(), static_cast<float*>(t.data()));
  EXPECT_TRUE(contains(error_of([&] { t.data_as<std::int32_t>(); }), "tensor is fp32, read as int32"));
  EXPECT_TRUE(contains(error_of([&] { t.data_as<bf16>(); }), "tensor is fp32, read as bf16"));
  EXPECT_TRUE(contains(error_of([&] { t.to_host<std::int32_t>(); }), "tensor is fp32, read as int32"));
}

TEST(Tensor, ReshapeSharesStorage) {
  DeviceContext ctx(cpu_options());
  Tensor t = Tensor::from_host(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}, {2, 3}, ctx);
  Tensor r = t.reshape({3, 2});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_TRUE(r.same_storage(t));
  EXPECT_EQ(r.data(), t.data());
  r.data_as<std::int32_t>()[5] = 50;
  EXPECT_EQ(t.to_host<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 2, 3, 4, 50}));
  EXPECT_EQ(t.reshape({6}).numel(), 6);
  EXPECT_EQ(t.reshape({1, 2, 3, 1}).rank(), 4u);
  const std::string msg = error_of([&] { t.reshape({4}); });
  EXPECT_TRUE(contains(msg, "cannot reshape int32[2, 3] on cpu to [4]")) << msg;
  EXPECT_THROW(t.reshape({7}), Error);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));  // the original is untouched
}

TEST(Tensor, FlatSliceIsAViewAtAnOffset) {
  DeviceContext ctx(cpu_options());
  std::vector<float> values(10);
  for (int i = 0; i < 10; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(i);
  Tensor base = Tensor::from_host(values, {2, 5}, ctx);
  Tensor s = base.flat_slice(3, 4);
  EXPECT_EQ(s.shape(), (Shape{4}));
  EXPECT_EQ(s.nbytes(), 16u);
  EXPECT_TRUE(s.same_storage(base));
  EXPECT_EQ(s.data_as<float>(), base.data_as<float>() + 3);
  EXPECT_EQ(s.to_host<float>(), (std::vector<float>{3, 4, 5, 6}));

  s.data_as<float>()[0] = 42.0f;
  Tensor inner = s.flat_slice(1, 2);  // offsets add up: elements 4 and 5 of the base
  inner.data_as<float>()[1] = -5.0f;
  EXPECT_EQ(base.to_host<float>(), (std::vector<float>{0, 1, 2, 42, 4, -5, 6, 7, 8, 9}));
  EXPECT_EQ(inner.to_host<float>(), (std::vector<float>{4, -5}));

  EXPECT_EQ(base.flat_slice(10, 0).numel(), 0);  // empty at the end is fine
  EXPECT_TRUE(contains(error_of([&] { base.flat_slice(8, 3); }), "slice [8, 11) out of range for fp32[2, 5] on cpu"));
  EXPECT_THROW(base.flat_slice(-1, 1), Error);
  EXPECT_THROW(base.flat_slice(0, -1), Error);
  EXPECT_THROW(base.flat_slice(11, 0), Error);
  EXPECT_THROW(s.flat_slice(1, 4), Error);  // checked against the view, not the storage
}

TEST(Tensor, NarrowTakesRows) {
  DeviceContext ctx(cpu_options());
  std::vector<std::int32_t> values(12);
  for (int i = 0; i < 12; ++i) values[static_cast<std::size_t>(i)] = i;
  Tensor base = Tensor::from_host(values, {4, 3}, ctx);
  Tensor rows = base.narrow(1, 2);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_TRUE(rows.same_storage(base));
  EXPECT_EQ(rows.to_host<std::int32_t>(), (std::vector<std::int32_t>{3, 4, 5, 6, 7, 8}));
  rows.data_as<std::int32_t>()[4] = 100;  // row 2, column 1 of the base
  Tensor last = rows.narrow(1, 1);        // row 2 of the base
  EXPECT_EQ(last.shape(), (Shape{1, 3}));
  EXPECT_EQ(last.to_host<std::int32_t>(), (std::vector<std::int32_t>{6, 100, 8}));
  EXPECT_EQ(base.to_host<std::int32_t>()[7], 100);

  Tensor cube = base.reshape({2, 2, 3});
  Tensor second = cube.narrow(1, 1);
  EXPECT_EQ(second.shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(second.to_host<std::int32_t>(), (std::vector<std::int32_t>{6, 100, 8, 9, 10, 11}));

  EXPECT_EQ(base.narrow(4, 0).numel(), 0);
  EXPECT_TRUE(contains(error_of([&] { base.narrow(3, 2); }), "rows [3, 5) out of range for int32[4, 3] on cpu"));
  EXPECT_THROW(base.narrow(-1, 1), Error);
  EXPECT_TRUE(contains(error_of([&] { Tensor::zeros({}, DType::F32, ctx).narrow(0, 1); }), "scalar"));
}

TEST(Tensor, CopyFromAnotherTensor) {
  DeviceContext ctx(cpu_options());
  Tensor src = Tensor::from_host(std::vector<float>{1, 2, 3, 4}, {2, 2}, ctx);
  Tensor dst = Tensor::zeros({4}, DType::F32, ctx);  // shapes may differ, sizes may not
  dst.copy_from(src, ctx.stream());
  EXPECT_EQ(dst.to_host<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_FALSE(dst.same_storage(src));
  src.data_as<float>()[0] = 9.0f;
  EXPECT_EQ(dst.to_host<float>()[0], 1.0f);  // a copy, not a view

  Tensor big = Tensor::zeros({8}, DType::F32, ctx);
  Tensor window = big.flat_slice(2, 4);
  window.copy_from(src, ctx.stream());
  EXPECT_EQ(big.to_host<float>(), (std::vector<float>{0, 0, 9, 2, 3, 4, 0, 0}));

  Tensor wrong_type = Tensor::zeros({4}, DType::I32, ctx);
  EXPECT_TRUE(contains(error_of([&] { wrong_type.copy_from(src, ctx.stream()); }),
                       "copy from fp32[2, 2] on cpu into int32[4] on cpu"));
  EXPECT_THROW(big.copy_from(src, ctx.stream()), Error);
  std::vector<float> three(3);
  EXPECT_THROW(dst.copy_from_host(three.data(), 12, ctx.stream()), Error);
  EXPECT_THROW(dst.copy_to_host(three.data(), 12, ctx.stream()), Error);
}

TEST(StreamEvent, CpuEventsCompleteOnRecord) {
  Stream stream(Device::cpu());
  EXPECT_EQ(stream.device(), Device::cpu());
  EXPECT_EQ(stream.handle(), nullptr);
  EXPECT_NO_THROW(stream.synchronize());

  Event event(Device::cpu());
  EXPECT_FALSE(event.query());
  EXPECT_TRUE(contains(error_of([&] { event.synchronize(); }), "never recorded"));
  EXPECT_TRUE(contains(error_of([&] { event.block(stream); }), "never recorded"));
  event.record(stream);
  EXPECT_TRUE(event.query());
  EXPECT_NO_THROW(event.synchronize());
  EXPECT_NO_THROW(event.block(stream));

  Event moved(std::move(event));
  EXPECT_TRUE(moved.query());  // the recorded state travels with the event
  Event fresh(Device::cpu());
  fresh = std::move(moved);
  EXPECT_TRUE(fresh.query());

  Stream other(std::move(stream));
  EXPECT_EQ(other.device(), Device::cpu());
  Event second(Device::cpu());
  second.record(other);
  EXPECT_TRUE(second.query());
}

}  // namespace
}  // namespace mt
