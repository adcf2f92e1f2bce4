// Ring attention (parallel/ring_attention.h) with the world as the cp group (np 1: no group, plain
// causal attention of both chunks). Every rank builds the whole sequence's qkv and output gradient
// (the same values everywhere) and runs the full causal Reference attention (runtime/attention.h)
// on its copy; then ring attention over the load-balanced split, each rank holding its two chunks.
// Checked, for gpt2-like multi-head and llama-like grouped-query heads (also a tensor-parallel slice
// of them), fp32 and bf16, B = 2:
//  - the output and dqkv rows against the Reference's rows at the rank's global positions;
//  - the same bits on a second call, from a second object and at 1 and 2 OpenMP threads;
//  - one object (the explicit form, lse kept by the caller) serving two interleaved calls (two
//    layers or microbatches: forward, forward, backward, backward) gives each the bits of its own;
//  - no device allocation in a call after the first, and the transfers the ring makes;
//  - the overlap, on rank 1 of a recorded ring of 4 (no peers): each batch goes to r+1 and comes
//    from r-1, and attention runs between its start and its wait, except for the backward's last
//    (the accumulators' return to their owners);
//  - where a GPU is usable, the ring on device tensors (the world's backend moving them) against
//    the CPU's ring, and the same bits twice on the GPU.
//
// Tolerances against the Reference, relative to the largest magnitude of its result (plus the same
// of each element), as runtime/tests/block_attention_test.cpp's for the unit ops (which derives them):
//   fp32  2e-6: the same math grouped by block (each block's maximum, the merge's rescaling, dq and
//         dk, dv summed block by block, delta from the output);
//   bf16  2e-6 + one bf16 step: results rounded to bf16 once from fp32 values a few roundings
//         apart, and delta read from the rounded output.
// The CPU's pairs run by batched GEMMs by default (runtime/block_attention_gemm.h), whose own bounds
// against the unit ops are 2e-5 and 2e-2 (bf16 P and dS); at these sizes they stay within the unit
// ops' bounds above (2.7e-7 fp32, 3.7e-3 bf16 seen at np 2), which are kept: a looser bound would
// hide a ring bug. GPU against CPU: twice those (CUDA's expf and logf are within 2 ulp of the
// host's, and each result folds a few of them), as block_attention_test holds its GPU case, with the
// CPU's ring on the unit ops too (MESHTRAIN_ATTENTION=reference), the math the GPU runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "parallel/ring_attention.h"
#include "runtime/attention.h"
#include "runtime/device_counters.h"
#include "tests/float_bits.h"
#include "tests/gpu_skip.h"  // defines: MT_SKIP_WITHOUT_GPU
#include "tests/random_values.h"
#include "tests/test_env.h"
#include "tests/test_helpers.h"
#include "tests/dtype_values.h"

namespace mt {
namespace {

using testing::rounded_random_values;
using testing::tensor_of;
using testing::widened;

using testing::expect_near;

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
      // A tensor-parallel slice: q heads 2-5 of 8 (groups of 2) over all 4 kv heads, reading kv heads
      // 1 and 2 only; the others get zero gradients, as from the Reference.
      {"llama_tp_slice", 2, 32, 8, {4, 4, 2, 2, 0}},
  };
  return all;
}

double tolerance(DType dtype) { return 2e-6 + (dtype == DType::BF16 ? nn_math::kBf16Step : 0.0); }

struct Inputs {
  std::vector<float> qkv, dout;  // the whole sequence's [B, T, row], [B, T, out_row]
};
Inputs inputs(const Case& c, DType dtype, unsigned seed = 11) {
  return {rounded_random_values(static_cast<std::size_t>(c.B * c.T * c.row()), seed, 1.5f, dtype),
          rounded_random_values(static_cast<std::size_t>(c.B * c.T * c.out_row()), seed + 1, 1.0f, dtype)};
}

struct Rows {
  std::vector<float> out, dqkv;
};

Rows reference(DeviceContext& ctx, const Case& c, DType dtype) {
  const Inputs in = inputs(c, dtype);
  const Tensor qkv = tensor_of(ctx, in.qkv, {c.B, c.T, c.row()}, dtype);
  const Tensor dout = tensor_of(ctx, in.dout, {c.B, c.T, c.out_row()}, dtype);
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

// This rank's local tensors of the split: its rows of the inputs, room for the results.
struct Local {
  Tensor qkv, dout, out, dqkv;
};
Local local(DeviceContext& ctx, const Case& c, DType dtype, unsigned seed = 11) {
  const Inputs in = inputs(c, dtype, seed);
  const CausalSplit split(c.T, test_world().size());
  const std::vector<i64> pos = split.positions(test_world().rank());
  const i64 L = split.local_rows();
  return {tensor_of(ctx, rows_at(in.qkv, c.B, c.T, c.row(), pos), {c.B, L, c.row()}, dtype),
          tensor_of(ctx, rows_at(in.dout, c.B, c.T, c.out_row(), pos), {c.B, L, c.out_row()}, dtype),
          Tensor::empty({c.B, L, c.out_row()}, dtype, ctx), Tensor::empty({c.B, L, c.row()}, dtype, ctx)};
}

RingAttentionShape shape_of(const Case& c, DType dtype) {
  return {c.B, c.T / (2 * test_world().size()), c.head_size, c.heads, dtype};
}

// The ring over the world with its local tensors; run() is a forward and a backward (short form).
class Ring {
 public:
  Ring(DeviceContext& ctx, const Case& c, DType dtype, unsigned seed = 11)
      : ring_(cp_group(), ctx, shape_of(c, dtype)), t_(local(ctx, c, dtype, seed)) {}
  Rows run() {
    ring_.forward(t_.qkv, t_.out);
    ring_.backward(t_.dout, t_.dqkv);
    return {widened(t_.out), widened(t_.dqkv)};
  }
  const RingAttention& ring() const { return ring_; }

 private:
  RingAttention ring_;
  Local t_;
};

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
    const std::string where = ", rank " + std::to_string(test_world().rank());
    expect_near(got.out, rows_at(full.out, c.B, c.T, c.out_row(), pos), tolerance(dtype), c.name + " output" + where);
    expect_near(got.dqkv, rows_at(full.dqkv, c.B, c.T, c.row(), pos), tolerance(dtype), c.name + " dqkv" + where);
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

TEST_P(RingAttentionTest, OneObjectServesInterleavedCalls) {
  const DType dtype = GetParam();
  DeviceContext& ctx = testing::test_context();
  for (const Case& c : cases()) {
    const Rows want_a = Ring(ctx, c, dtype, 11).run(), want_b = Ring(ctx, c, dtype, 21).run();
    RingAttention ring(cp_group(), ctx, shape_of(c, dtype));
    Local a = local(ctx, c, dtype, 11), b = local(ctx, c, dtype, 21);
    Tensor lse_a = Tensor::empty(ring.lse_shape(), DType::F32, ctx);
    Tensor lse_b = Tensor::empty(ring.lse_shape(), DType::F32, ctx);
    ring.forward(a.qkv, a.out, lse_a);
    ring.forward(b.qkv, b.out, lse_b);
    ring.backward(b.qkv, b.out, lse_b, b.dout, b.dqkv);
    ring.backward(a.qkv, a.out, lse_a, a.dout, a.dqkv);
    EXPECT_TRUE(same_bits(widened(a.out), want_a.out) && same_bits(widened(a.dqkv), want_a.dqkv)) << c.name;
    EXPECT_TRUE(same_bits(widened(b.out), want_b.out) && same_bits(widened(b.dqkv), want_b.dqkv)) << c.name;
  }
}

// The ring with CUDA tensors: block attention's unit ops on the GPU and the transfers through the
// world's backend (MPI stages device tensors through the host), against the CPU ring's rows.
TEST_P(RingAttentionTest, GpuAgreesWithTheCpuAndRepeatsItsBits) {
  MT_SKIP_WITHOUT_GPU();
  const DType dtype = GetParam();
  DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
  for (const Case& c : cases()) {
    // The CPU's ring on the unit ops, as the GPU's (its default); the environment put back after.
    const char* env = std::getenv("MESHTRAIN_ATTENTION");
    const std::string saved = env ? env : "";
    ::setenv("MESHTRAIN_ATTENTION", "reference", 1);
    const Rows cpu = Ring(testing::test_context(), c, dtype).run();
    if (env) ::setenv("MESHTRAIN_ATTENTION", saved.c_str(), 1); else ::unsetenv("MESHTRAIN_ATTENTION");
    const Rows got = Ring(gpu, c, dtype).run();
    const Rows again = Ring(gpu, c, dtype).run();
    const std::string where = ", rank " + std::to_string(test_world().rank());
    expect_near(got.out, cpu.out, 2 * tolerance(dtype), c.name + " GPU vs CPU output" + where);
    expect_near(got.dqkv, cpu.dqkv, 2 * tolerance(dtype), c.name + " GPU vs CPU dqkv" + where);
    EXPECT_TRUE(same_bits(again.out, got.out) && same_bits(again.dqkv, got.dqkv)) << c.name << ": a second GPU run";
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
  // The workspace is what parallel/ring_buffers.h lists (the memory model's arithmetic): its
  // construction takes those buffers from the allocator, each rounded to the allocator's 256 bytes.
  DeviceContext fresh(DeviceOptions{Device::cpu(), 0, 1});
  const std::size_t before_ring = fresh.allocator().stats().in_use;
  const RingAttention counted_ring(cp_group(), fresh, shape_of(c, GetParam()));
  i64 listed = 0, rounded = 0;
  for (const i64 bytes : ring_attention_buffer_bytes(counted_ring.buffer_shape())) {
    listed += bytes;
    rounded += (bytes + 255) / 256 * 256;
  }
  EXPECT_EQ(static_cast<i64>(fresh.allocator().stats().in_use - before_ring), rounded);
  EXPECT_EQ(counted_ring.workspace_bytes(), listed);
  const i64 cp = test_world().size(), chunk = c.T / (2 * cp), dsize = GetParam() == DType::F32 ? 4 : 2;
  const i64 kv_block = c.B * 2 * chunk * 2 * c.heads.kv_heads * c.head_size;  // elements
  const RingAttentionStats& after = ring.ring().stats();
  EXPECT_EQ(after.transfers - before.transfers, cp == 1 ? 0 : 3 * cp - 2);
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, 2 * (cp - 1) * kv_block * dsize + (cp == 1 ? 0 : cp * kv_block * 4));
  EXPECT_GE(after.wait_seconds, before.wait_seconds);
}

// Rank `rank` of a ring whose peers are not there: every batch completes at once (receives leave
// their buffers as they are), recorded as "S2:0 R0:0" (send to 2 tag 0, receive from 0 tag 0) with
// the device launches so far when it starts and when it is first waited for.
class RecordingRing final : public Communicator {
 public:
  struct Batch {
    std::string messages;
    std::uint64_t launches_at_start = 0, launches_at_wait = 0;
    bool waited = false;
  };
  RecordingRing(int rank, int size) : Communicator(rank, size, CommOptions{}) {}
  std::string backend_name() const override { return "recording"; }
  CommCapabilities capabilities() const override { return {}; }
  std::vector<int> world_ranks() const override {
    std::vector<int> all;
    for (int r = 0; r < size(); ++r) all.push_back(r);
    return all;
  }
  std::deque<Batch> batches;  // a deque: each Work keeps a pointer to its entry

 protected:
  class Recorded final : public Work {
   public:
    Recorded(CollectiveDesc desc, Batch* batch) : Work(std::move(desc), std::chrono::seconds(1)), batch_(batch) {
      complete();
    }
    void wait(std::chrono::milliseconds timeout) override {
      if (!batch_->waited) batch_->launches_at_wait = device_counters().launches;
      batch_->waited = true;
      Work::wait(timeout);
    }

   private:
    Batch* batch_;
  };
  WorkPtr launch(CollectiveDesc desc) override {
    MT_CHECK(desc.kind == CollectiveKind::Batch, "ring attention sends batches only, not ", desc.describe());
    std::string text;
    for (const PointToPoint& m : desc.messages)
      text += (text.empty() ? "" : " ") + std::string(m.kind == PointToPoint::Kind::Send ? "S" : "R") +
              std::to_string(m.peer) + ":" + std::to_string(m.tag);
    batches.push_back({text, device_counters().launches});
    return std::make_shared<Recorded>(std::move(desc), &batches.back());
  }
  std::unique_ptr<Communicator> split_by_color(int, int, const std::vector<int>&) override {
    MT_FAIL("no split expected");
  }
  void allgather_host_bytes(const void*, void*, std::size_t) override { MT_FAIL("no allgather expected"); }
};

TEST(RingAttentionOverlap, EachTransferStartsBeforeTheAttentionItOverlaps) {
  DeviceContext ctx = cpu_context(1);
  const Case& c = cases()[1];
  RecordingRing group(1, 4);
  RingAttention ring(&group, ctx, {c.B, c.T / 8, c.head_size, c.heads, DType::F32});
  const i64 L = c.T / 4;
  Tensor qkv = Tensor::zeros({c.B, L, c.row()}, DType::F32, ctx);
  Tensor out = Tensor::empty({c.B, L, c.out_row()}, DType::F32, ctx);
  Tensor dout = Tensor::zeros({c.B, L, c.out_row()}, DType::F32, ctx);
  Tensor dqkv = Tensor::empty({c.B, L, c.row()}, DType::F32, ctx);
  ring.forward(qkv, out);
  ring.backward(dout, dqkv);
  const std::string kv = "S2:0 R0:0", dkv = "S2:1 S2:1 R0:1 R0:1";
  const std::vector<std::string> expected = {kv, kv, kv, kv, dkv, kv, dkv, kv, dkv, dkv};
  ASSERT_EQ(group.batches.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const RecordingRing::Batch& b = group.batches[i];
    EXPECT_EQ(b.messages, expected[i]) << "batch " << i;
    EXPECT_TRUE(b.waited) << "batch " << i;
    if (i + 1 < expected.size()) {
      EXPECT_GT(b.launches_at_wait, b.launches_at_start) << "batch " << i << ": nothing computed under it";
    }
  }
}

TEST(RingAttentionChecks, RefusesWrongShapesAndBackwardFirst) {
  DeviceContext& ctx = testing::test_context();
  const Case& c = cases()[0];
  RingAttention ring(cp_group(), ctx, shape_of(c, DType::F32));
  Local t = local(ctx, c, DType::F32);
  EXPECT_THROW(ring.backward(t.dout, t.dqkv), Error);
  // Checked before anything is sent: every rank throws, none hangs.
  Tensor longer = Tensor::zeros({c.B, t.qkv.dim(1) + 1, c.row()}, DType::F32, ctx);
  EXPECT_THROW(ring.forward(longer, t.out), Error);
  Tensor small_lse = Tensor::empty({2, c.B, c.heads.q_heads, 1}, DType::F32, ctx);
  EXPECT_THROW(ring.forward(t.qkv, t.out, small_lse), Error);
}

}  // namespace
}  // namespace mt
