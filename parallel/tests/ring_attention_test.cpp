// Ring attention (parallel/ring_attention.h) with the world as the cp group (np 1: no group, plain
// causal attention of both chunks). Every rank builds the whole sequence's qkv and output gradient
// (the same values everywhere) and runs the full causal Reference attention (runtime/attention.h)
// on its copy; then ring attention over the load-balanced split, each rank holding its two chunks.
// Checked, for gpt2-like multi-head and llama-like grouped-query heads, fp32 and bf16, B = 2:
//  - the output and dqkv rows against the Reference's rows at the rank's global positions;
//  - the same bits on a second call, from a second object and at 1 and 2 OpenMP threads;
//  - no device allocation in a call after the first, and the transfers the ring makes.
//
// Tolerances against the Reference, relative to the largest magnitude of its result (plus the same
// of each element), as runtime/tests/block_attention_test.cpp's (which derives them):
//   fp32  2e-6: the same math grouped by block (each block's maximum, the merge's rescaling, dq and
//         dk, dv summed block by block, delta from the output);
//   bf16  2e-6 + one bf16 step: results rounded to bf16 once from fp32 values a few roundings
//         apart, and delta read from the rounded output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/ring_attention.h"
#include "runtime/attention.h"
#include "runtime/device_counters.h"
#include "tests/float_bits.h"
#include "tests/random_values.h"
#include "tests/test_env.h"

namespace mt {
namespace {

using i64 = std::int64_t;
using nn::AttentionHeads;
using testing::same_bits;
using testing::test_world;

struct Case {
  std::string name;
  i64 B, T, head_size;  // T divides into 2 x cp chunks at cp 1, 2 and 4
  AttentionHeads heads;
  i64 row() const { return (heads.q_heads + 2 * heads.kv_heads) * head_size; }
  i64 out_row() const { return heads.q_heads * head_size; }
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"gpt2_like", 2, 40, 16, {3, 3, 0, 1, 0}},
      {"llama_like", 2, 56, 8, {6, 2, 0, 3, 0}},
  };
  return all;
}

double tolerance(DType dtype) { return 2e-6 + (dtype == DType::BF16 ? nn_math::kBf16Step : 0.0); }

// Values as the activation dtype holds them (bf16 rounded once), the same on every rank.
std::vector<float> activations(i64 n, unsigned seed, float range, DType dtype) {
  std::vector<float> v = testing::random_values(static_cast<std::size_t>(n), seed, -range, range);
  if (dtype == DType::BF16)
    for (float& x : v) x = bf16::from_float(x).to_float();
  return v;
}

Tensor device_tensor(DeviceContext& ctx, const std::vector<float>& v, Shape shape, DType dtype) {
  if (dtype == DType::F32) return Tensor::from_host(v, std::move(shape), ctx);
  std::vector<bf16> b;
  for (float x : v) b.push_back(bf16::from_float(x));
  return Tensor::from_host(b, std::move(shape), ctx);
}

std::vector<float> widened(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.to_host<float>();
  std::vector<float> v;
  for (bf16 x : t.to_host<bf16>()) v.push_back(x.to_float());
  return v;
}

struct Inputs {
  std::vector<float> qkv, dout;  // the whole sequence's [B, T, row], [B, T, out_row]
};
Inputs inputs(const Case& c, DType dtype) {
  return {activations(c.B * c.T * c.row(), 11, 1.5f, dtype), activations(c.B * c.T * c.out_row(), 12, 1.0f, dtype)};
}

struct Rows {
  std::vector<float> out, dqkv;
};

Rows reference(DeviceContext& ctx, const Case& c, DType dtype) {
  const Inputs in = inputs(c, dtype);
  const Tensor qkv = device_tensor(ctx, in.qkv, {c.B, c.T, c.row()}, dtype);
  const Tensor dout = device_tensor(ctx, in.dout, {c.B, c.T, c.out_row()}, dtype);
  Tensor out = Tensor::empty({c.B, c.T, c.out_row()}, dtype, ctx);
  Tensor att = Tensor::empty({c.B, c.heads.q_heads, c.T, c.T}, DType::F32, ctx);
  nn::attention_forward(ctx, qkv, c.heads, out, att);
  Tensor dqkv = Tensor::empty({c.B, c.T, c.row()}, dtype, ctx);
  nn::attention_backward(ctx, dout, qkv, att, c.heads, dqkv);
  return {widened(out), widened(dqkv)};
}

// The rows of a whole-sequence [B, T, width] array at the given positions: [B, positions, width].
std::vector<float> rows_at(const std::vector<float>& full, i64 B, i64 T, i64 width, const std::vector<i64>& positions) {
  std::vector<float> local;
  for (i64 b = 0; b < B; ++b)
    for (i64 p : positions)
      for (i64 x = 0; x < width; ++x) local.push_back(full[static_cast<std::size_t>((b * T + p) * width + x)]);
  return local;
}

Communicator* cp_group() { return test_world().size() > 1 ? &test_world() : nullptr; }

// The ring over the world: its local tensors, then forward and backward `calls` times (the last
// call's results are returned; `each` sees the object after every call).
class Ring {
 public:
  Ring(DeviceContext& ctx, const Case& c, DType dtype)
      : c_(c), split_(c.T, test_world().size()),
        ring_(cp_group(), ctx, {c.B, split_.chunk(), c.head_size, c.heads, dtype}) {
    const Inputs in = inputs(c, dtype);
    const std::vector<i64> pos = split_.positions(test_world().rank());
    const i64 L = split_.local_rows();
    qkv_ = device_tensor(ctx, rows_at(in.qkv, c.B, c.T, c.row(), pos), {c.B, L, c.row()}, dtype);
    dout_ = device_tensor(ctx, rows_at(in.dout, c.B, c.T, c.out_row(), pos), {c.B, L, c.out_row()}, dtype);
    out_ = Tensor::empty({c.B, L, c.out_row()}, dtype, ctx);
    dqkv_ = Tensor::empty({c.B, L, c.row()}, dtype, ctx);
  }
  Rows run() {
    ring_.forward(qkv_, out_);
    ring_.backward(dout_, dqkv_);
    return {widened(out_), widened(dqkv_)};
  }
  const RingAttention& ring() const { return ring_; }

 private:
  Case c_;
  CausalSplit split_;
  RingAttention ring_;
  Tensor qkv_, dout_, out_, dqkv_;
};

void expect_near(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::abs(w)));
  EXPECT_GT(scale, 0.0) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * (scale + std::abs(want[i]))) && bad++ == 0)
      ADD_FAILURE() << what << ": first difference at " << i << ": " << got[i] << " vs " << want[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": of " << want.size() << " elements, rank " << test_world().rank();
}

DeviceContext cpu_context(int threads) { return DeviceContext(DeviceOptions{Device::cpu(), 0, threads}); }

class RingAttentionTest : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Dtypes, RingAttentionTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

TEST_P(RingAttentionTest, AgreesWithFullCausalAttentionAtTheRanksPositions) {
  const DType dtype = GetParam();
  DeviceContext& ctx = testing::test_context();
  for (const Case& c : cases()) {
    const Rows full = reference(ctx, c, dtype);
    const std::vector<i64> pos = CausalSplit(c.T, test_world().size()).positions(test_world().rank());
    const Rows got = Ring(ctx, c, dtype).run();
    expect_near(got.out, rows_at(full.out, c.B, c.T, c.out_row(), pos), tolerance(dtype), c.name + " output");
    expect_near(got.dqkv, rows_at(full.dqkv, c.B, c.T, c.row(), pos), tolerance(dtype), c.name + " dqkv");
  }
}

TEST_P(RingAttentionTest, SameBitsOnRerunsAndAtAnyThreadCount) {
  for (const Case& c : cases()) {
    DeviceContext one = cpu_context(1), two = cpu_context(2);
    Ring ring(two, c, GetParam());
    const Rows first = ring.run(), second = ring.run();
    const Rows other = Ring(two, c, GetParam()).run(), single = Ring(one, c, GetParam()).run();
    EXPECT_TRUE(same_bits(first.out, second.out) && same_bits(first.dqkv, second.dqkv)) << c.name << ": a rerun";
    EXPECT_TRUE(same_bits(first.out, other.out) && same_bits(first.dqkv, other.dqkv)) << c.name << ": a new object";
    EXPECT_TRUE(same_bits(first.out, single.out) && same_bits(first.dqkv, single.dqkv)) << c.name << ": 1 thread";
  }
}

// Buffers are the constructor's: a later forward and backward allocate nothing. The ring makes
// cp-1 kv transfers in the forward, cp-1 kv and cp dkv ones in the backward, and sends the packed
// kv heads only.
TEST_P(RingAttentionTest, NoAllocationAfterTheFirstCallAndTheTransfersExpected) {
  const Case& c = cases()[1];  // grouped-query heads: packing matters
  DeviceContext& ctx = testing::test_context();
  Ring ring(ctx, c, GetParam());
  ring.run();
  const RingAttentionStats before = ring.ring().stats();
  const DeviceCounters counted = device_counters();
  ring.run();
  EXPECT_EQ((device_counters() - counted).allocations, 0u);
  const i64 cp = test_world().size(), chunk = c.T / (2 * cp), dsize = GetParam() == DType::F32 ? 4 : 2;
  const i64 kv_block = c.B * 2 * chunk * 2 * c.heads.kv_heads * c.head_size;  // elements
  const RingAttentionStats& after = ring.ring().stats();
  EXPECT_EQ(after.transfers - before.transfers, cp == 1 ? 0 : 3 * cp - 2);
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, 2 * (cp - 1) * kv_block * dsize + (cp == 1 ? 0 : cp * kv_block * 4));
  EXPECT_GE(after.wait_seconds, before.wait_seconds);
}

TEST(RingAttentionChecks, RefusesWrongShapesAndBackwardFirst) {
  DeviceContext& ctx = testing::test_context();
  const Case& c = cases()[0];
  const i64 L = 2 * (c.T / (2 * test_world().size()));
  RingAttention ring(cp_group(), ctx, {c.B, L / 2, c.head_size, c.heads, DType::F32});
  Tensor dout = Tensor::zeros({c.B, L, c.out_row()}, DType::F32, ctx);
  Tensor dqkv = Tensor::empty({c.B, L, c.row()}, DType::F32, ctx);
  EXPECT_THROW(ring.backward(dout, dqkv), Error);
  Tensor qkv = Tensor::zeros({c.B, L + 1, c.row()}, DType::F32, ctx);
  EXPECT_THROW(ring.forward(qkv, dout), Error);  // checked before anything is sent: no hang
}

}  // namespace
}  // namespace mt
