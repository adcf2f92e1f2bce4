// AdamW on the CPU: against a scalar double-precision reference over several steps (decay on and
// off, changing lr and grad_scale, bias correction from a restored step count), the first-step
// and zero-gradient cases worked out by hand, grad_scale as scaled gradients, the same bits with
// 1 and 3 threads, slots as views into one flat buffer, checkpoint state round trip, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/context.h"       // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"         // defines: Error
#include "runtime/tensor.h"        // defines: Tensor
#include "tests/float_bits.h"      // defines: same_bits
#include "tests/random_values.h"   // defines: random_values
#include "tests/test_helpers.h"    // defines: error_of, contains
#include "optim/adamw.h"     // defines: AdamW, AdamWConfig, ParamSlot
#include "optim/grad_norm.h"  // defines: clip_scale
#include "runtime/backend.h"    // defines: backend::Cpu::adamw
#include "runtime/kernels.h"    // defines: kernels::cast

namespace mt {
namespace {

using testing::contains;
using testing::error_of;
using testing::random_values;
using testing::same_bits;
using i64 = std::int64_t;

DeviceOptions cpu_options(int threads = 2) { return DeviceOptions{Device::cpu(), 0, threads}; }

void set_values(Tensor& t, const std::vector<float>& values, DeviceContext& ctx) {
  t.copy_from_host(values.data(), values.size() * sizeof(float), ctx.stream());
}

// The update of one slot in double precision, element by element, straight from the formula.
struct Reference {
  std::vector<double> p, m, v;

  explicit Reference(const std::vector<float>& param)
      : p(param.begin(), param.end()), m(param.size(), 0.0), v(param.size(), 0.0) {}

  void step(const AdamWConfig& c, bool decay, const std::vector<float>& grad, double lr, double grad_scale,
            std::int64_t t) {
    const double b1 = c.beta1, b2 = c.beta2, eps = c.eps, wd = decay ? c.weight_decay : 0.0;
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = static_cast<double>(grad[i]) * grad_scale;
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      const double m_hat = m[i] / bc1, v_hat = v[i] / bc2;
      p[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * p[i]);
    }
  }
};

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, double abs,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::abs(want[i]) + abs) << what << " element " << i;
  }
}

TEST(AdamW, MatchesDoublePrecisionReferenceOverSeveralSteps) {
  DeviceContext ctx(cpu_options());
  const AdamWConfig config{0.9f, 0.95f, 1e-8f, 0.1f};
  const Shape shape_a{3, 5}, shape_b{7};
  const std::vector<float> pa = random_values(15, 1), pb = random_values(7, 2);
  Tensor param_a = Tensor::from_host(pa, shape_a, ctx), param_b = Tensor::from_host(pb, shape_b, ctx);
  Tensor grad_a = Tensor::zeros(shape_a, DType::F32, ctx), grad_b = Tensor::zeros(shape_b, DType::F32, ctx);
  AdamW opt(ctx, {{"a", param_a, grad_a, true}, {"b", param_b, grad_b, false}}, config);
  Reference ref_a(pa), ref_b(pb);

  const float lrs[] = {1e-2f, 3e-2f, 2e-2f, 5e-3f, 1e-2f, 0.0f, 4e-2f};
  const float scales[] = {1.0f, 0.5f, 1.0f, 0.25f, 2.0f, 1.0f, 0.8f};
  for (int s = 0; s < 7; ++s) {
    // Gradients of different sizes per step, with sign changes, so m passes near zero.
    const std::vector<float> ga = random_values(15, 100 + s, -2.0f, 2.0f);
    const std::vector<float> gb = random_values(7, 200 + s, -0.1f, 0.1f);
    set_values(grad_a, ga, ctx);
    set_values(grad_b, gb, ctx);
    opt.step(lrs[s], scales[s]);
    ref_a.step(config, true, ga, lrs[s], scales[s], s + 1);
    ref_b.step(config, false, gb, lrs[s], scales[s], s + 1);
    ASSERT_EQ(opt.step_count(), s + 1);
    const std::string at = " after step " + std::to_string(s + 1);
    expect_close(param_a.to_host<float>(), ref_a.p, 1e-6, 1e-6, "a.param" + at);
    expect_close(opt.m(0).to_host<float>(), ref_a.m, 1e-5, 1e-7, "a.m" + at);
    expect_close(opt.v(0).to_host<float>(), ref_a.v, 1e-5, 1e-9, "a.v" + at);
    expect_close(param_b.to_host<float>(), ref_b.p, 1e-6, 1e-6, "b.param" + at);
    expect_close(opt.m(1).to_host<float>(), ref_b.m, 1e-5, 1e-9, "b.m" + at);
    expect_close(opt.v(1).to_host<float>(), ref_b.v, 1e-5, 1e-11, "b.v" + at);
  }
}

// Step 1 with bias correction: m_hat = g and v_hat = g^2, so each parameter moves by lr * sign(g)
// (plus lr * wd * p with decay), whatever the gradient's size.
TEST(AdamW, FirstStepMovesEachParameterByLrTimesTheGradientSign) {
  DeviceContext ctx(cpu_options());
  const std::vector<float> p0 = {0.5f, -0.25f, 1.0f, 2.0f};
  const std::vector<float> g = {3.0f, -0.001f, 1e-3f, -40.0f};
  Tensor pd = Tensor::from_host(p0, {4}, ctx), pn = Tensor::from_host(p0, {4}, ctx);
  Tensor gd = Tensor::from_host(g, {4}, ctx), gn = Tensor::from_host(g, {4}, ctx);
  const AdamWConfig config{0.9f, 0.95f, 1e-8f, 0.1f};
  AdamW opt(ctx, {{"decayed", pd, gd, true}, {"plain", pn, gn, false}}, config);
  const float lr = 0.01f;
  opt.step(lr);
  const std::vector<float> got_d = pd.to_host<float>(), got_n = pn.to_host<float>();
  for (std::size_t i = 0; i < p0.size(); ++i) {
    const double sign = g[i] > 0 ? 1.0 : -1.0;
    EXPECT_NEAR(got_n[i], p0[i] - lr * sign, 1e-6) << i;
    EXPECT_NEAR(got_d[i], p0[i] - lr * (sign + config.weight_decay * p0[i]), 1e-6) << i;
  }
}

TEST(AdamW, ZeroGradientLeavesUndecayedParametersExactlyAndShrinksDecayedOnes) {
  DeviceContext ctx(cpu_options());
  const std::vector<float> p0 = random_values(33, 7);
  Tensor pd = Tensor::from_host(p0, {33}, ctx), pn = Tensor::from_host(p0, {33}, ctx);
  AdamW opt(ctx,
            {{"d", pd, Tensor::zeros({33}, DType::F32, ctx), true},
             {"n", pn, Tensor::zeros({33}, DType::F32, ctx), false}},
            AdamWConfig{0.9f, 0.95f, 1e-8f, 0.5f});
  opt.step(0.1f);
  EXPECT_TRUE(same_bits(pn.to_host<float>(), p0));
  const std::vector<float> got = pd.to_host<float>();
  for (std::size_t i = 0; i < p0.size(); ++i) EXPECT_NEAR(got[i], p0[i] * (1.0 - 0.1 * 0.5), 1e-7) << i;
  EXPECT_TRUE(same_bits(opt.m(1).to_host<float>(), std::vector<float>(33, 0.0f)));
}

// grad_scale multiplies the gradient before anything else: a power-of-two scale is exact, so it
// must give the same bits as gradients scaled beforehand.
TEST(AdamW, GradScaleIsTheSameAsScaledGradients) {
  DeviceContext ctx(cpu_options());
  const std::vector<float> p0 = random_values(50, 11);
  Tensor p1 = Tensor::from_host(p0, {5, 10}, ctx), p2 = Tensor::from_host(p0, {5, 10}, ctx);
  Tensor g1 = Tensor::zeros({5, 10}, DType::F32, ctx), g2 = Tensor::zeros({5, 10}, DType::F32, ctx);
  AdamW scaled(ctx, {{"w", p1, g1, true}});
  AdamW prescaled(ctx, {{"w", p2, g2, true}});
  const float scales[] = {0.5f, 0.25f, 4.0f};
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> g = random_values(50, 300 + s);
    std::vector<float> gs = g;
    for (float& x : gs) x *= scales[s];
    set_values(g1, g, ctx);
    set_values(g2, gs, ctx);
    scaled.step(1e-2f, scales[s]);
    prescaled.step(1e-2f, 1.0f);
  }
  EXPECT_TRUE(same_bits(p1.to_host<float>(), p2.to_host<float>()));
  EXPECT_TRUE(same_bits(scaled.m(0).to_host<float>(), prescaled.m(0).to_host<float>()));
  EXPECT_TRUE(same_bits(scaled.v(0).to_host<float>(), prescaled.v(0).to_host<float>()));
}

TEST(AdamW, SameBitsWithOneAndThreeThreads) {
  const i64 n = 100003;  // several OpenMP blocks, not a multiple of the thread count
  const std::vector<float> p0 = random_values(n, 21);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 3}) {
    DeviceContext ctx(cpu_options(threads));
    Tensor p = Tensor::from_host(p0, {n}, ctx);
    Tensor g = Tensor::zeros({n}, DType::F32, ctx);
    AdamW opt(ctx, {{"w", p, g, true}});
    for (int s = 0; s < 3; ++s) {
      set_values(g, random_values(n, 400 + s), ctx);
      opt.step(1e-3f, 0.9f);
    }
    std::vector<float> all = p.to_host<float>();
    for (const Tensor& t : {opt.m(0), opt.v(0)}) {
      const std::vector<float> more = t.to_host<float>();
      all.insert(all.end(), more.begin(), more.end());
    }
    results.push_back(std::move(all));
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
}

// Parameters and gradients as views into one flat buffer each (as a bucketed or ZeRO-sharded
// layout gives them) update exactly like separate tensors, and elements of the buffer outside
// every slot are left alone.
TEST(AdamW, SlotsAsViewsIntoOneFlatBufferMatchSeparateTensors) {
  DeviceContext ctx(cpu_options());
  const std::vector<float> flat0 = random_values(40, 31);
  Tensor flat_p = Tensor::from_host(flat0, {40}, ctx);
  Tensor flat_g = Tensor::zeros({40}, DType::F32, ctx);
  // [0, 12): a [3, 4]; [12, 32): b [20]; [32, 40): in no slot.
  AdamW viewed(ctx, {{"a", flat_p.flat_slice(0, 12).reshape({3, 4}), flat_g.flat_slice(0, 12).reshape({3, 4}), true},
                     {"b", flat_p.flat_slice(12, 20), flat_g.flat_slice(12, 20), false}});

  Tensor pa = Tensor::from_host(std::vector<float>(flat0.begin(), flat0.begin() + 12), {3, 4}, ctx);
  Tensor pb = Tensor::from_host(std::vector<float>(flat0.begin() + 12, flat0.begin() + 32), {20}, ctx);
  Tensor ga = Tensor::zeros({3, 4}, DType::F32, ctx), gb = Tensor::zeros({20}, DType::F32, ctx);
  AdamW separate(ctx, {{"a", pa, ga, true}, {"b", pb, gb, false}});

  for (int s = 0; s < 4; ++s) {
    const std::vector<float> g = random_values(40, 500 + s);
    set_values(flat_g, g, ctx);
    set_values(ga, std::vector<float>(g.begin(), g.begin() + 12), ctx);
    set_values(gb, std::vector<float>(g.begin() + 12, g.begin() + 32), ctx);
    viewed.step(2e-2f, 0.75f);
    separate.step(2e-2f, 0.75f);
  }
  const std::vector<float> flat = flat_p.to_host<float>();
  EXPECT_TRUE(same_bits(std::vector<float>(flat.begin(), flat.begin() + 12), pa.to_host<float>()));
  EXPECT_TRUE(same_bits(std::vector<float>(flat.begin() + 12, flat.begin() + 32), pb.to_host<float>()));
  EXPECT_TRUE(same_bits(std::vector<float>(flat.begin() + 32, flat.end()),
                        std::vector<float>(flat0.begin() + 32, flat0.end())));
  EXPECT_EQ(viewed.m(0).shape(), (Shape{3, 4}));
  EXPECT_TRUE(same_bits(viewed.m(1).to_host<float>(), separate.m(1).to_host<float>()));
}

// A restored optimizer (step count, m and v copied in) continues with the same bits, and the
// bias correction follows the restored step count.
TEST(AdamW, RestoredStateContinuesExactlyAndSetsTheBiasCorrection) {
  DeviceContext ctx(cpu_options());
  const AdamWConfig config{0.8f, 0.9f, 1e-6f, 0.05f};
  const std::vector<float> p0 = random_values(24, 41);
  Tensor p1 = Tensor::from_host(p0, {2, 12}, ctx);
  Tensor g = Tensor::zeros({2, 12}, DType::F32, ctx);
  AdamW original(ctx, {{"w", p1, g, true}}, config);
  for (int s = 0; s < 3; ++s) {
    set_values(g, random_values(24, 600 + s), ctx);
    original.step(1e-2f);
  }

  Tensor p2 = Tensor::zeros({2, 12}, DType::F32, ctx);
  p2.copy_from(p1, ctx.stream());
  AdamW restored(ctx, {{"w", p2, g, true}}, config);
  const std::size_t i = restored.index_of("w");
  Tensor m = restored.m(i), v = restored.v(i);
  m.copy_from(original.m(0), ctx.stream());
  v.copy_from(original.v(0), ctx.stream());
  restored.set_step_count(original.step_count());

  set_values(g, random_values(24, 700), ctx);
  original.step(5e-3f, 0.5f);
  restored.step(5e-3f, 0.5f);
  EXPECT_EQ(restored.step_count(), 4);
  EXPECT_TRUE(same_bits(p1.to_host<float>(), p2.to_host<float>()));
  EXPECT_TRUE(same_bits(original.v(0).to_host<float>(), restored.v(0).to_host<float>()));

  // From zero moments at t = 1001 the bias correction is ~1 for both betas: m_hat = 0.2 g and
  // v_hat = 0.1 g^2, unlike step 1 where m_hat = g and v_hat = g^2.
  const std::vector<float> q0 = random_values(24, 42);
  const std::vector<float> grad = random_values(24, 800);
  Tensor q = Tensor::from_host(q0, {24}, ctx);
  AdamW late(ctx, {{"q", q, Tensor::from_host(grad, {24}, ctx), false}}, config);
  late.set_step_count(1000);
  late.step(1e-2f);
  Reference ref(q0);
  ref.step(config, false, grad, 1e-2, 1.0, 1001);
  expect_close(q.to_host<float>(), ref.p, 1e-6, 1e-6, "param at t = 1001");
  EXPECT_EQ(late.step_count(), 1001);
}

TEST(AdamW, AccessorsDescribeTheSlots) {
  DeviceContext ctx(cpu_options());
  AdamW opt(ctx,
            {{"wte", Tensor::zeros({4, 2}, DType::F32, ctx), Tensor::zeros({4, 2}, DType::F32, ctx), true},
             {"ln.bias", Tensor::zeros({2}, DType::F32, ctx), Tensor::zeros({2}, DType::F32, ctx), false}});
  EXPECT_EQ(opt.size(), 2u);
  EXPECT_EQ(opt.slots()[1].name, "ln.bias");
  EXPECT_EQ(opt.slot(0).decay, true);
  EXPECT_EQ(opt.index_of("ln.bias"), 1u);
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_EQ(opt.v(0).shape(), (Shape{4, 2}));
  EXPECT_TRUE(same_bits(opt.v(0).to_host<float>(), std::vector<float>(8, 0.0f)));
  EXPECT_FLOAT_EQ(opt.config().beta2, 0.95f);
  EXPECT_TRUE(contains(error_of([&] { opt.index_of("wpe"); }), "no slot named 'wpe'"));
  EXPECT_THROW(opt.m(2), Error);
  EXPECT_THROW(opt.slot(2), Error);
  EXPECT_TRUE(contains(error_of([&] { opt.set_step_count(-1); }), "step count"));
}

TEST(AdamW, EmptySlotsAndNoSlotsAreFine) {
  DeviceContext ctx(cpu_options());
  AdamW none(ctx, {});
  none.step(1e-3f);
  EXPECT_EQ(none.step_count(), 1);
  AdamW empty(ctx, {{"e", Tensor::zeros({0}, DType::F32, ctx), Tensor::zeros({0}, DType::F32, ctx), true}});
  empty.step(1e-3f);
  EXPECT_EQ(empty.m(0).numel(), 0);
}

TEST(AdamW, RejectsBadSlots) {
  DeviceContext ctx(cpu_options());
  auto f32 = [&](Shape s) { return Tensor::zeros(std::move(s), DType::F32, ctx); };
  auto make = [&](std::vector<ParamSlot> slots) { return error_of([&] { AdamW opt(ctx, std::move(slots)); }); };

  std::string e = make({{"w", f32({2, 3}), f32({3, 2}), true}});
  EXPECT_TRUE(contains(e, "'w'") && contains(e, "not shaped like") && contains(e, "fp32[3, 2]")) << e;
  e = make({{"w", f32({4}), Tensor::zeros({4}, DType::BF16, ctx), true}});
  EXPECT_TRUE(contains(e, "needs fp32") && contains(e, "bf16[4]")) << e;
  e = make({{"w", Tensor::zeros({4}, DType::I32, ctx), f32({4}), true}});
  EXPECT_TRUE(contains(e, "needs fp32") && contains(e, "int32[4]")) << e;
  e = make({{"w", Tensor(), f32({4}), true}});
  EXPECT_TRUE(contains(e, "undefined tensor")) << e;
  e = make({{"", f32({4}), f32({4}), true}});
  EXPECT_TRUE(contains(e, "without a name")) << e;
  e = make({{"w", f32({4}), f32({4}), true}, {"w", f32({1}), f32({1}), false}});
  EXPECT_TRUE(contains(e, "'w' given twice")) << e;
  Tensor same = f32({4});
  e = make({{"w", same, same, true}});
  EXPECT_TRUE(contains(e, "same memory")) << e;
}

TEST(AdamW, RejectsBadConfig) {
  DeviceContext ctx(cpu_options());
  auto make = [&](AdamWConfig c) { return error_of([&] { AdamW opt(ctx, {}, c); }); };
  EXPECT_TRUE(contains(make({1.0f, 0.95f, 1e-8f, 0.1f}), "beta1"));
  EXPECT_TRUE(contains(make({0.9f, -0.1f, 1e-8f, 0.1f}), "beta2"));
  EXPECT_TRUE(contains(make({0.9f, std::numeric_limits<float>::quiet_NaN(), 1e-8f, 0.1f}), "beta2"));
  EXPECT_TRUE(contains(make({0.9f, 0.95f, 0.0f, 0.1f}), "eps"));
  EXPECT_TRUE(contains(make({0.9f, 0.95f, 1e-8f, -0.1f}), "weight_decay"));
  EXPECT_TRUE(contains(make({0.9f, 0.95f, 1e-8f, std::numeric_limits<float>::infinity()}), "weight_decay"));
}

// A bad lr or grad_scale throws before any slot is touched or the step is counted.
TEST(AdamW, RejectsNonFiniteLrAndGradScaleWithoutChangingAnything) {
  DeviceContext ctx(cpu_options());
  const std::vector<float> p0 = random_values(8, 51);
  Tensor p = Tensor::from_host(p0, {8}, ctx);
  AdamW opt(ctx, {{"w", p, Tensor::from_host(random_values(8, 52), {8}, ctx), true}});
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float lr : {nan, inf, -1e-3f}) {
    const std::string e = error_of([&] { opt.step(lr); });
    EXPECT_TRUE(contains(e, "learning rate must be finite and >= 0") && contains(e, "at step 1")) << e;
  }
  for (float scale : {nan, inf, -1.0f, static_cast<float>(clip_scale(std::nan(""), 1.0))}) {
    const std::string e = error_of([&] { opt.step(1e-3f, scale); });
    EXPECT_TRUE(contains(e, "grad_scale must be finite")) << e;
  }
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_TRUE(same_bits(p.to_host<float>(), p0));
  EXPECT_TRUE(same_bits(opt.m(0).to_host<float>(), std::vector<float>(8, 0.0f)));
}

// Many slots in one pass (chunks of kAdamWChunk, slots larger and smaller than one, an empty one,
// decay mixed) give exactly the bits of the per-slot loop, at any thread count.
TEST(AdamW, OnePassOverManySlotsMatchesThePerSlotLoopAtAnyThreadCount) {
  const std::vector<i64> sizes = {3, kAdamWChunk + 5, 0, 1000, 2 * kAdamWChunk, 77};
  const i64 n = 3 + kAdamWChunk + 5 + 1000 + 2 * kAdamWChunk + 77;
  const std::vector<float> p0 = random_values(static_cast<std::size_t>(n), 31);
  const AdamWConfig config;
  // The reference: Cpu::adamw slot by slot, as step() ran before the pass.
  std::vector<float> want = p0, m(p0.size(), 0.0f), v(p0.size(), 0.0f);
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> g = random_values(static_cast<std::size_t>(n), 500 + s);
    const auto t = static_cast<double>(s + 1);
    AdamWStepArgs a;
    a.lr = 1e-3f * static_cast<float>(s + 1);
    a.beta1 = config.beta1;
    a.beta2 = config.beta2;
    a.one_minus_beta1 = 1.0f - config.beta1;
    a.one_minus_beta2 = 1.0f - config.beta2;
    a.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta1), t));
    a.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta2), t));
    a.eps = config.eps;
    a.grad_scale = 0.7f;
    i64 at = 0;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      a.weight_decay = k % 2 == 0 ? config.weight_decay : 0.0f;
      backend::Cpu::adamw(a, want.data() + at, g.data() + at, m.data() + at, v.data() + at, sizes[k], 1);
      at += sizes[k];
    }
  }
  want.insert(want.end(), m.begin(), m.end());
  want.insert(want.end(), v.begin(), v.end());
  for (int threads : {1, 3, 8}) {
    DeviceContext ctx(cpu_options(threads));
    Tensor p = Tensor::from_host(p0, {n}, ctx);
    Tensor g = Tensor::zeros({n}, DType::F32, ctx);
    std::vector<ParamSlot> slots;
    i64 at = 0;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      slots.push_back({"s" + std::to_string(k), p.flat_slice(at, sizes[k]), g.flat_slice(at, sizes[k]), k % 2 == 0});
      at += sizes[k];
    }
    AdamW opt(ctx, std::move(slots), config);
    for (int s = 0; s < 3; ++s) {
      set_values(g, random_values(static_cast<std::size_t>(n), 500 + s), ctx);
      opt.step(1e-3f * static_cast<float>(s + 1), 0.7f);
    }
    std::vector<float> got = p.to_host<float>(), ms, vs;
    for (std::size_t k = 0; k < opt.size(); ++k) {
      const std::vector<float> mk = opt.m(k).to_host<float>(), vk = opt.v(k).to_host<float>();
      ms.insert(ms.end(), mk.begin(), mk.end());
      vs.insert(vs.end(), vk.begin(), vk.end());
    }
    got.insert(got.end(), ms.begin(), ms.end());
    got.insert(got.end(), vs.begin(), vs.end());
    EXPECT_TRUE(same_bits(got, want)) << threads << " threads";
  }
}

std::vector<std::uint16_t> bf16_bits(const Tensor& t) {
  std::vector<std::uint16_t> out;
  for (const bf16 x : t.to_host<bf16>()) out.push_back(x.bits);
  return out;
}

// A slot's bf16 copy holds, after every step, the bits a cast of its updated parameter gives; a
// slot without one leaves its neighbour's copy alone.
TEST(AdamW, WritesTheBf16CopyAsACastOfTheUpdatedParameter) {
  DeviceContext ctx(cpu_options(3));
  const i64 n0 = kAdamWChunk + 9, n1 = 40;
  Tensor p = Tensor::from_host(random_values(static_cast<std::size_t>(n0 + n1), 41), {n0 + n1}, ctx);
  Tensor g = Tensor::zeros({n0 + n1}, DType::F32, ctx);
  Tensor copy = Tensor::zeros({n0 + n1}, DType::BF16, ctx);
  AdamW opt(ctx, {{"w", p.flat_slice(0, n0), g.flat_slice(0, n0), true}, {"b", p.flat_slice(n0, n1), g.flat_slice(n0, n1), false}},
            AdamWConfig{}, {copy.flat_slice(0, n0), Tensor{}});
  Tensor cast = Tensor::zeros({n0}, DType::BF16, ctx);
  for (int s = 0; s < 2; ++s) {
    set_values(g, random_values(static_cast<std::size_t>(n0 + n1), 600 + s), ctx);
    opt.step(3e-2f, 1.0f);
    kernels::cast(ctx, p.flat_slice(0, n0), cast);
    EXPECT_EQ(bf16_bits(copy.flat_slice(0, n0)), bf16_bits(cast)) << "step " << s + 1;
  }
  EXPECT_EQ(bf16_bits(copy.flat_slice(n0, n1)), std::vector<std::uint16_t>(n1, 0));
  const std::string e = error_of([&] {
    AdamW bad(ctx, {{"w", p.flat_slice(0, n0), g.flat_slice(0, n0), true}}, AdamWConfig{}, {copy.flat_slice(0, 4)});
  });
  EXPECT_TRUE(contains(e, "'w'") && contains(e, "bf16 copy")) << e;
}

}  // namespace
}  // namespace mt
