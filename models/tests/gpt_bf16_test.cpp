// The GPT model with bf16 compute and fp32 master weights (Gpt(ctx, config, DType::BF16)), on the
// CPU, against the fp32 model at the same parameters: the loss and every parameter's gradient
// (tolerances from bf16's 8-bit significand, set from measurement below); a few AdamW steps lower
// the loss as in fp32; the master weights, their gradients and the optimizer's state stay fp32 and
// the bf16 copy follows the master; runs repeat bit for bit (also across CPU thread counts); the
// llama family's loss, gradients and repeats the same way (its tolerances those of GPT-2). Then
// the bf16 model on a GPU against the bf16 model on the CPU, skipped where no GPU is usable.
//
// The model is the tiny preset (4 layers, 4 heads, 64 channels) with a padded vocab (V 96, Vp 128),
// as in gpt_grad_test.cpp, which checks the fp32 model against a double-precision reference. Here
// the fp32 model is the reference: what is measured is what bf16 rounding does to the result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "models/gpt.h"              // defines: Gpt
#include "models/gpt_config.h"       // defines: GptConfig, gpt_preset
#include "models/parameter_store.h"  // defines: ParameterStore
#include "models/tests/reference_gpt.h"  // defines: reference_random_params
#include "runtime/context.h"         // defines: DeviceContext, DeviceOptions
#include "runtime/kernels.h"         // defines: kernels::scale
#include "runtime/tensor.h"          // defines: Tensor
#include "optim/adamw.h"       // defines: AdamW, ParamSlot
#include "tests/float_bits.h"  // defines: bits
#include "tests/gpu_skip.h"  // defines: MT_SKIP_WITHOUT_GPU

namespace mt {
namespace {

// ---- Tolerances -------------------------------------------------------------------------------
//
// bf16 keeps 8 significant bits: each rounding of an activation is off by up to 2^-8 ~ 0.4% of
// it (2^-9 on average). The model rounds ~30 times on the way to a logit and ~30 more on the way
// back to a weight gradient (every GEMM and kernel output, the residual stream, the bf16 copy of
// the weights); the roundings are independent, so they add up like a random walk, and the
// layernorms renormalize rather than compound them. The losses, log-sum-exps and all the sums
// inside GEMMs and kernels are fp32, so the mean loss averages the per-position errors out.
//
// Measured on this model and batch (B 4, T 32): the loss differs from fp32 by 3.1e-5 relative at
// GPT-2's init and 3.9e-5 at the random parameters, and by at most 1.3e-4 at any step of the
// AdamW curve below; per tensor the gradients' cosine similarity to fp32 is >= 0.99985 and their
// relative error ||g16 - g32|| / ||g32|| <= 1.8% (worst: h.0.ln1.weight, the first layernorm,
// which sees the rounding of the embeddings first). The bounds leave a wide margin (loss ~40x,
// 1 - cosine ~65x, relative error ~5x) and still fail real bugs: with the CPU's bf16 GEMM made to
// drop beta x C (so bf16 layers lose their biases and accumulations) the random-parameter case
// gives cosines of 0.49 .. 0.87 and relative errors of 0.6 .. 1.07 on most tensors.
// llama-tiny (same widths) measured: loss 6e-6 (init) and 1.4e-4 (random) relative, cosine >= 0.99984
// and relative error <= 1.8% (worst: h.3.attn.q.weight): the same bounds hold with ~35x, 60x, 5x.
constexpr double kLossRelTol = 0.005;    // |loss16 - loss32| / loss32
constexpr double kMinCosine = 0.99;      // per parameter tensor, over all its elements
constexpr double kGradRelNormTol = 0.1;  // ||g16 - g32|| / ||g32|| per tensor

// ---- The model under test ---------------------------------------------------------------------

GptConfig test_config() {
  GptConfig c = gpt_preset("tiny");  // 4 layers, 4 heads, 64 channels, max_seq_len 64
  c.vocab_size = 96;
  c.padded_vocab = 128;  // rows 96..127 of wte are padding
  return c;
}

// The llama family at the same widths (llama-tiny: 4 query heads sharing 2 kv heads, SwiGLU 160).
GptConfig llama_config() {
  GptConfig c = gpt_preset("llama-tiny");
  c.vocab_size = 96;
  c.padded_vocab = 128;  // rows 96..127 of wte and lm_head are padding
  return c;
}

struct Batch {
  int B = 0, T = 0;
  std::vector<std::int32_t> inputs, targets;
};

Batch make_batch(int B, int T, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(0, test_config().vocab_size - 1);
  Batch b{B, T, {}, {}};
  for (int i = 0; i < B * T; ++i) {
    b.inputs.push_back(token(rng));
    b.targets.push_back(token(rng));
  }
  return b;
}

DeviceOptions cpu_options(int threads = 1) { return DeviceOptions{Device::cpu(), 0, threads}; }

using testing::bits;

// Copies every master parameter of `from` into `to` (any devices, same config).
void copy_parameters(const Gpt& from, Gpt& to, DeviceContext& to_ctx) {
  Tensor dst = to.parameters().flat_params();
  dst.copy_from(from.parameters().flat_params(), to_ctx.stream());
  to_ctx.synchronize();
}

struct Result {
  float loss = 0.0f;
  std::vector<float> grads;  // flat, fp32
};

Result forward_backward(Gpt& model, DeviceContext& ctx, const Batch& b) {
  model.parameters().zero_grads(ctx);
  Result r;
  r.loss = model.forward(b.inputs, b.targets, b.B, b.T, 1.0f);
  model.backward();
  r.grads = model.parameters().flat_grads().to_host<float>();
  return r;
}

struct TensorAgreement {
  double cosine = 1.0, rel_error = 0.0;
};

// Cosine similarity and relative error of tensor i's gradient in `got` against `want`.
TensorAgreement agreement(const ParameterStore& store, std::size_t i, const std::vector<float>& got,
                          const std::vector<float>& want) {
  const auto first = static_cast<std::size_t>(store.offset(i));
  const auto n = static_cast<std::size_t>(store.spec(i).numel());
  double dot = 0, gg = 0, ww = 0, dd = 0;
  for (std::size_t j = first; j < first + n; ++j) {
    const double g = got[j], w = want[j];
    dot += g * w;
    gg += g * g;
    ww += w * w;
    dd += (g - w) * (g - w);
  }
  TensorAgreement a;
  if (ww > 0 || gg > 0) a.cosine = dot / std::sqrt(gg * ww);
  if (ww > 0) a.rel_error = std::sqrt(dd / ww);
  return a;
}

// The bf16 result against the fp32 one, tensor by tensor, within the tolerances above; prints the
// worst values seen (the measurements the tolerances rest on).
void expect_close_to(const ParameterStore& store, const Result& got, const Result& want, const std::string& what) {
  SCOPED_TRACE(what);
  const double loss_rel = std::abs(static_cast<double>(got.loss) - want.loss) / want.loss;
  EXPECT_LE(loss_rel, kLossRelTol) << "loss " << got.loss << " vs fp32 " << want.loss;
  double worst_cos = 1.0, worst_rel = 0.0;
  std::string worst_cos_name, worst_rel_name;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const TensorAgreement a = agreement(store, i, got.grads, want.grads);
    EXPECT_GE(a.cosine, kMinCosine) << store.spec(i).name;
    EXPECT_LE(a.rel_error, kGradRelNormTol) << store.spec(i).name;
    if (!(a.cosine >= worst_cos)) worst_cos = a.cosine, worst_cos_name = store.spec(i).name;
    if (!(a.rel_error <= worst_rel)) worst_rel = a.rel_error, worst_rel_name = store.spec(i).name;
  }
  std::cout << "[ info ] " << what << ": loss " << got.loss << " vs fp32 " << want.loss << " (relative "
            << loss_rel << "); worst gradient cosine " << worst_cos << " (" << worst_cos_name
            << "), worst relative error " << worst_rel << " (" << worst_rel_name << ")\n";
}

// ---- Loss and gradients against fp32 ----------------------------------------------------------

// Two parameter sets: GPT-2's initialization (how training starts: a tiny residual stream, so the
// first layernorms amplify the rounding of the embeddings most), and the larger random values of
// gpt_grad_test (uniform in +-0.1, layernorm weights 1 +- 0.1).
void compare_with_fp32(bool gpt2_init, const std::string& what, const GptConfig& c = test_config()) {
  DeviceContext ctx(cpu_options());
  Gpt fp32(ctx, c);
  if (gpt2_init) {
    fp32.init(42);
  } else {
    const ref::RefParams values = ref::reference_random_params(c, 1234);
    ParameterStore& store = fp32.parameters();
    for (std::size_t i = 0; i < store.size(); ++i) {
      const ref::Vec& v = values.at(store.spec(i).name);
      const std::vector<float> host(v.begin(), v.end());
      store.param(i).copy_from_host(host.data(), host.size() * sizeof(float), ctx.stream());
    }
  }
  Gpt bf16_model(ctx, c, DType::BF16);
  copy_parameters(fp32, bf16_model, ctx);
  const Batch batch = make_batch(4, 32, 77);
  const Result want = forward_backward(fp32, ctx, batch);
  const Result got = forward_backward(bf16_model, ctx, batch);
  expect_close_to(bf16_model.parameters(), got, want, what);

  // Padding rows of wte (and llama's lm_head) get no gradient in bf16 either: exactly zero, not
  // rounding noise.
  const ParameterStore& store = bf16_model.parameters();
  for (const char* name : {"wte", "lm_head"}) {
    if (std::string(name) == "lm_head" && !c.is_llama()) continue;
    const auto first = static_cast<std::size_t>(store.offset(store.index_of(name)));
    const auto pad_begin = first + static_cast<std::size_t>(c.vocab_size) * static_cast<std::size_t>(c.channels);
    const auto pad_end = first + static_cast<std::size_t>(c.vocab_rows()) * static_cast<std::size_t>(c.channels);
    std::size_t nonzero = 0;
    for (std::size_t j = pad_begin; j < pad_end; ++j) nonzero += got.grads[j] != 0.0f;
    EXPECT_EQ(nonzero, 0u) << "gradients in the padding rows of " << name;
  }
}

TEST(GptBf16, LossAndGradientsMatchFp32AtGpt2Init) { compare_with_fp32(true, "GPT-2 init"); }

TEST(GptBf16, LossAndGradientsMatchFp32AtLargerRandomParameters) { compare_with_fp32(false, "random +-0.1"); }

// llama (RMSNorm, RoPE, grouped-query attention, SwiGLU, untied head) under the same tolerances.
TEST(GptBf16, LlamaLossAndGradientsMatchFp32AtInit) { compare_with_fp32(true, "llama init", llama_config()); }

TEST(GptBf16, LlamaLossAndGradientsMatchFp32AtLargerRandomParameters) {
  compare_with_fp32(false, "llama random +-0.1", llama_config());
}

// ---- Dtypes: fp32 masters, a bf16 copy that follows them -------------------------------------

TEST(GptBf16, MasterWeightsAndGradientsStayFp32AndTheCopyFollowsThem) {
  DeviceContext ctx(cpu_options());
  Gpt model(ctx, test_config(), DType::BF16);
  model.init(7);
  EXPECT_EQ(model.compute_dtype(), DType::BF16);
  const ParameterStore& store = model.parameters();
  EXPECT_EQ(store.flat_params().dtype(), DType::F32);
  EXPECT_EQ(store.flat_grads().dtype(), DType::F32);
  EXPECT_EQ(store.flat_compute_params().dtype(), DType::BF16);
  EXPECT_EQ(store.flat_compute_params().numel(), store.numel());
  for (std::size_t i = 0; i < store.size(); ++i) {
    EXPECT_EQ(store.param(i).dtype(), DType::F32) << store.spec(i).name;
    EXPECT_EQ(store.grad(i).dtype(), DType::F32) << store.spec(i).name;
    EXPECT_EQ(store.compute_param(i).dtype(), DType::BF16) << store.spec(i).name;
    EXPECT_EQ(store.compute_param(i).shape(), store.param(i).shape()) << store.spec(i).name;
  }

  // After a forward the copy is the master rounded to nearest even; after the master changes,
  // the next forward rounds it again.
  const Batch batch = make_batch(2, 16, 5);
  auto copy_is_rounded_master = [&] {
    const std::vector<float> master = store.flat_params().to_host<float>();
    const std::vector<bf16> copy = store.flat_compute_params().to_host<bf16>();
    std::size_t differ = 0;
    for (std::size_t j = 0; j < master.size(); ++j) differ += copy[j].bits != bf16::from_float(master[j]).bits;
    return differ;
  };
  model.forward(batch.inputs, batch.targets, batch.B, batch.T, Gpt::kEvaluation);
  EXPECT_EQ(copy_is_rounded_master(), 0u);
  Tensor master = model.parameters().flat_params();
  kernels::scale(ctx, master, 1.5);
  EXPECT_NE(copy_is_rounded_master(), 0u) << "the test should have changed the master";
  model.forward_logits(batch.inputs, batch.B, batch.T);
  EXPECT_EQ(model.logits().dtype(), DType::BF16);
  model.forward(batch.inputs, batch.targets, batch.B, batch.T, 1.0f);
  EXPECT_EQ(copy_is_rounded_master(), 0u);

  // Activations are bf16; the per-position losses fp32. Backward fills the fp32 gradients.
  EXPECT_EQ(model.losses().dtype(), DType::F32);
  model.backward();
  EXPECT_GT(std::sqrt(kernels::reduce(ctx, ReduceKind::SumSquares, store.flat_grads())), 0.0);

  // The fp32 model has no copy: its compute views are the parameters.
  Gpt fp32(ctx, test_config());
  EXPECT_EQ(fp32.compute_dtype(), DType::F32);
  EXPECT_TRUE(fp32.parameters().flat_compute_params().same_storage(fp32.parameters().flat_params()));
}

// ---- Training: AdamW on fp32 masters -----------------------------------------------------------

struct Curve {
  std::vector<float> losses;
  std::vector<std::uint32_t> params;
};

// `steps` AdamW steps on one batch from GPT-2's initialization, as the trainer does them: the
// optimizer updates the fp32 master, the next forward rounds it into the bf16 copy.
Curve adamw_curve(DType compute, int steps) {
  DeviceContext ctx(cpu_options());
  Gpt model(ctx, test_config(), compute);
  model.init(42);
  ParameterStore& store = model.parameters();
  std::vector<ParamSlot> slots;
  for (std::size_t i = 0; i < store.size(); ++i)
    slots.push_back({store.spec(i).name, store.param(i), store.grad(i), store.spec(i).decay});
  AdamW adamw(ctx, std::move(slots), AdamWConfig{});
  const Batch b = make_batch(4, 32, 77);
  Curve c;
  for (int s = 0; s < steps; ++s) {
    store.zero_grads(ctx);
    c.losses.push_back(model.forward(b.inputs, b.targets, b.B, b.T, 1.0f));
    model.backward();
    adamw.step(1e-3f);
  }
  c.losses.push_back(model.forward(b.inputs, b.targets, b.B, b.T, Gpt::kEvaluation));
  c.params = bits(store.flat_params());
  return c;
}

TEST(GptBf16, AdamWLowersTheLossLikeFp32AndRepeatsBitForBit) {
  constexpr int kSteps = 12;
  const Curve fp32 = adamw_curve(DType::F32, kSteps);
  const Curve bf16a = adamw_curve(DType::BF16, kSteps);
  const Curve bf16b = adamw_curve(DType::BF16, kSteps);
  std::cout << "[ info ] AdamW losses, fp32 / bf16:";
  double worst = 0.0;
  for (std::size_t s = 0; s < fp32.losses.size(); ++s) {
    std::cout << " " << fp32.losses[s] << "/" << bf16a.losses[s];
    worst = std::max(worst, std::abs(static_cast<double>(bf16a.losses[s]) - fp32.losses[s]) / fp32.losses[s]);
    // Each step's loss within the forward's tolerance of fp32's: the curves follow each other.
    EXPECT_LE(std::abs(static_cast<double>(bf16a.losses[s]) - fp32.losses[s]), kLossRelTol * fp32.losses[s])
        << "step " << s;
  }
  std::cout << "; worst relative difference " << worst << "\n";
  // The loss falls as in fp32 (a random model starts near log(96) ~ 4.56).
  EXPECT_LT(fp32.losses.back(), 0.9f * fp32.losses.front());
  EXPECT_LT(bf16a.losses.back(), 0.9f * bf16a.losses.front());
  // Bitwise re-run.
  for (std::size_t s = 0; s < bf16a.losses.size(); ++s)
    EXPECT_EQ(bits(bf16a.losses[s]), bits(bf16b.losses[s])) << "step " << s;
  EXPECT_TRUE(bf16a.params == bf16b.params) << "master parameters after the curve differ in their bits";
}

// ---- Determinism --------------------------------------------------------------------------------

struct RunBits {
  std::uint32_t loss = 0;
  std::vector<std::uint32_t> grads;
  std::vector<std::uint16_t> logits;
};

// A fresh context and bf16 model at `threads` CPU threads (thread counts are per process, so two
// runs must not overlap); a batch big enough for OpenBLAS to split its GEMMs.
RunBits bf16_run(int threads, const GptConfig& config = test_config()) {
  DeviceContext ctx(cpu_options(threads));
  Gpt model(ctx, config, DType::BF16);
  model.init(42);
  const Batch b = make_batch(4, 64, 11);
  model.parameters().zero_grads(ctx);
  RunBits r;
  model.forward_logits(b.inputs, b.B, b.T);
  for (bf16 x : model.logits().to_host<bf16>()) r.logits.push_back(x.bits);
  r.loss = bits(model.forward(b.inputs, b.targets, b.B, b.T, 1.0f));
  model.backward();
  r.grads = bits(model.parameters().flat_grads());
  return r;
}

TEST(GptBf16, RepeatsBitForBitAlsoAcrossThreadCounts) {
  const RunBits one = bf16_run(1), again = bf16_run(1), two = bf16_run(2);
  EXPECT_EQ(one.loss, again.loss);
  EXPECT_TRUE(one.logits == again.logits);
  EXPECT_TRUE(one.grads == again.grads);
  EXPECT_EQ(one.loss, two.loss);
  EXPECT_TRUE(one.logits == two.logits);
  EXPECT_TRUE(one.grads == two.grads);
}

TEST(GptBf16, LlamaRepeatsBitForBitAlsoAcrossThreadCounts) {
  const RunBits one = bf16_run(1, llama_config()), again = bf16_run(1, llama_config()), two = bf16_run(2, llama_config());
  EXPECT_EQ(one.loss, again.loss);
  EXPECT_TRUE(one.logits == again.logits);
  EXPECT_TRUE(one.grads == again.grads);
  EXPECT_EQ(one.loss, two.loss);
  EXPECT_TRUE(one.logits == two.logits);
  EXPECT_TRUE(one.grads == two.grads);
}

// ---- On a GPU: the bf16 model on CUDA against the bf16 model on the CPU ----------------------
//
// Both compute the same bf16 math; cuBLAS sums the GEMMs in another order, so now and then an
// activation rounds to the neighbouring bf16 number, and that difference travels like the bf16
// rounding itself: the same tolerances as against fp32 apply (not measured here: no GPU in the
// environment this test was written in).

TEST(GptBf16Cuda, MatchesTheCpuBf16Model) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext cpu(cpu_options());
  DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
  Gpt on_cpu(cpu, test_config(), DType::BF16);
  on_cpu.init(42);
  Gpt on_gpu(gpu, test_config(), DType::BF16);
  copy_parameters(on_cpu, on_gpu, gpu);
  const Batch batch = make_batch(4, 32, 77);
  const Result want = forward_backward(on_cpu, cpu, batch);
  const Result got = forward_backward(on_gpu, gpu, batch);
  on_gpu.forward_logits(batch.inputs, batch.B, batch.T);
  EXPECT_EQ(on_gpu.logits().dtype(), DType::BF16);
  expect_close_to(on_gpu.parameters(), got, want, "bf16 on the GPU vs bf16 on the CPU");
}

}  // namespace
}  // namespace mt
