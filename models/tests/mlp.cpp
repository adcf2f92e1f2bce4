#include "models/tests/mlp.h"

#include <cmath>
#include <string>

#include "models/init.h"         // defines: counter_normal, name_hash
#include "runtime/kernels.h"     // defines: kernels::reduce
#include "runtime/nn_kernels.h"  // defines: nn::cross_entropy

namespace mt {

void MlpConfig::validate() const {
  MT_CHECK(inputs >= 1, "mlp: inputs must be at least 1, got ", inputs);
  MT_CHECK(layers >= 0, "mlp: layers (hidden layers) must be at least 0, got ", layers);
  MT_CHECK(layers == 0 || hidden >= 1, "mlp: hidden must be at least 1 with ", layers, " hidden layers, got ",
           hidden);
  MT_CHECK(classes >= 2, "mlp: classes must be at least 2, got ", classes);
}

std::vector<ParamSpec> mlp_parameter_specs(const MlpConfig& config) {
  config.validate();
  std::vector<ParamSpec> specs;
  for (int i = 0; i <= config.layers; ++i) {
    const std::int64_t in = i == 0 ? config.inputs : config.hidden;
    const std::int64_t out = i == config.layers ? config.classes : config.hidden;
    const std::string p = "fc." + std::to_string(i) + ".";
    // ParamKind names GPT's roles; FcWeight / FcBias are the closest (a Linear layer's weight and bias).
    specs.push_back({p + "weight", ParamKind::FcWeight, i, {out, in}, true});
    specs.push_back({p + "bias", ParamKind::FcBias, i, {out}, false});
  }
  return specs;
}

void init_mlp_parameters(DeviceContext& ctx, ParameterStore& store, std::uint64_t seed) {
  std::vector<float> host;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const ParamSpec& spec = store.spec(i);
    host.assign(static_cast<std::size_t>(spec.numel()), 0.0f);
    if (spec.kind == ParamKind::FcWeight) {
      const float std_dev = 1.0f / std::sqrt(static_cast<float>(spec.shape.at(1)));
      const std::uint64_t stream = name_hash(spec.name);
      for (std::size_t j = 0; j < host.size(); ++j) host[j] = std_dev * counter_normal(seed, stream, j);
    }
    store.param(i).copy_from_host(host.data(), host.size() * sizeof(float), ctx.stream());
  }
  ctx.synchronize();
}

// What forward keeps for backward, for one batch size. pre[i] and post[i] = gelu(pre[i]) are the
// outputs of hidden layer i; d[0], d[1] are the gradients of hidden activations in backward,
// alternating so that a layer's input gradient never overwrites its output gradient.
struct Mlp::Activations {
  int N = 0;
  Tensor x, labels, logits, losses;
  std::vector<Tensor> pre, post;
  Tensor d[2];
};

Mlp::Mlp(DeviceContext& ctx, const MlpConfig& config)
    : ctx_(ctx), config_(config), store_(ctx, mlp_parameter_specs(config)) {
  for (int i = 0; i <= config_.layers; ++i) fc_.push_back(Linear::from_store(store_, "fc." + std::to_string(i)));
}

Mlp::~Mlp() = default;

void Mlp::run_forward(std::span<const float> features, int N) {
  have_labels_ = false;  // the activations are about to change
  MT_CHECK(N >= 1, "mlp forward: need at least one example, got N = ", N);
  MT_CHECK(static_cast<std::int64_t>(features.size()) == static_cast<std::int64_t>(N) * config_.inputs,
           "mlp forward: ", features.size(), " features for ", N, " examples of ", config_.inputs);
  if (!acts_ || acts_->N != N) {
    acts_.reset();  // free the old size's buffers first
    auto a = std::make_unique<Activations>();
    a->N = N;
    for (int i = 0; i < config_.layers; ++i) {
      a->pre.push_back(Tensor::empty({N, config_.hidden}, DType::F32, ctx_));
      a->post.push_back(Tensor::empty({N, config_.hidden}, DType::F32, ctx_));
    }
    if (config_.layers > 0)
      for (Tensor& d : a->d) d = Tensor::empty({N, config_.hidden}, DType::F32, ctx_);
    a->logits = Tensor::empty({N, config_.classes}, DType::F32, ctx_);
    a->losses = Tensor::empty({N}, DType::F32, ctx_);
    acts_ = std::move(a);
  }
  Activations& a = *acts_;
  a.x = Tensor::from_host(features, {N, config_.inputs}, ctx_);
  for (int i = 0; i < config_.layers; ++i) {
    const auto k = static_cast<std::size_t>(i);
    fc_[k].forward_gelu(ctx_, i == 0 ? a.x : a.post[k - 1], a.pre[k], a.post[k]);
  }
  fc_.back().forward(ctx_, config_.layers == 0 ? a.x : a.post.back(), a.logits);
}

float Mlp::forward(std::span<const float> features, std::span<const std::int32_t> labels, int N) {
  have_labels_ = false;
  MT_CHECK(static_cast<std::int64_t>(labels.size()) == N, "mlp forward: ", labels.size(), " labels for ", N,
           " examples");
  // Checked here on the host: the CUDA cross-entropy kernel does not check its ids.
  for (std::int32_t label : labels)
    MT_CHECK(label >= 0 && label < config_.classes, "mlp forward: label ", label, " is outside [0, ",
             config_.classes, ")");
  run_forward(features, N);
  Activations& a = *acts_;
  a.labels = Tensor::from_host(labels, {N}, ctx_);
  nn::cross_entropy(ctx_, a.logits, a.labels, config_.classes, a.losses, nullptr, 0.0f);
  have_labels_ = true;
  return static_cast<float>(kernels::reduce(ctx_, ReduceKind::Sum, a.losses) / static_cast<double>(N));
}

void Mlp::forward_logits(std::span<const float> features, int N) { run_forward(features, N); }

void Mlp::backward(float loss_weight) {
  MT_CHECK(acts_ && have_labels_, "mlp backward() needs a forward() with labels first");
  Activations& a = *acts_;
  // dlogits replaces the logits.
  nn::cross_entropy(ctx_, a.logits, a.labels, config_.classes, a.losses, &a.logits,
                    loss_weight / static_cast<float>(a.N));
  have_labels_ = false;
  const Tensor* dy = &a.logits;  // gradient of the output of fc.i
  for (int i = config_.layers; i >= 1; --i) {
    const auto k = static_cast<std::size_t>(i);
    Tensor& dh = a.d[k % 2];  // gradient of pre[i - 1], through the GELU in the GEMM's epilogue
    fc_[k].backward_weights(ctx_, *dy, a.post[k - 1]);
    fc_[k].backward_input_dgelu(ctx_, *dy, a.pre[k - 1], dh);
    dy = &dh;
  }
  fc_.front().backward(ctx_, *dy, a.x, nullptr);  // no gradient for the features
}

const Tensor& Mlp::logits() const {
  MT_CHECK(acts_ != nullptr, "mlp: no forward pass yet");
  return acts_->logits;
}

const Tensor& Mlp::losses() const {
  MT_CHECK(acts_ != nullptr, "mlp: no forward pass yet");
  return acts_->losses;
}

}  // namespace mt
