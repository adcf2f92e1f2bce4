// A multilayer perceptron classifier with explicit forward and backward, built like Gpt (one
// ParameterStore, Linear layers over runtime/ kernels, counter-based init): for tests of the
// parallelism machinery that want a model simpler than GPT.
//
//   h_0 = x;  h_{i+1} = gelu(fc.i(h_i)) for i < layers;  logits = fc.layers(h_layers)
//   loss = mean over the N rows of the softmax cross-entropy of logits against labels
//
// fc.i is "fc.i.weight" [out, in] and "fc.i.bias" [out]: inputs -> hidden for i = 0, hidden ->
// hidden in between, hidden -> classes for the last (inputs -> classes when layers = 0). GELU is
// the tanh approximation, as in Gpt.
// defines: MlpConfig, mlp_parameter_specs, init_mlp_parameters, Mlp
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/gpt_parameters.h"   // defines: ParamSpec, ParamKind
#include "models/layers.h"           // defines: Linear
#include "models/parameter_store.h"  // defines: ParameterStore

namespace mt {

struct MlpConfig {
  int inputs = 0;   // features per example
  int hidden = 0;   // width of every hidden layer
  int layers = 0;   // hidden layers (so layers + 1 Linear layers); 0 is logistic regression
  int classes = 0;  // outputs, >= 2
  void validate() const;  // throws Error naming the first bad field
};

// "fc.0.weight", "fc.0.bias", "fc.1.weight", ... in order. ParamKind is GPT's list of roles; the
// closest are FcWeight / FcBias (a Linear layer's weight and bias), which is what these are tagged,
// with `layer` the index i of fc.i; weights decay, biases do not.
std::vector<ParamSpec> mlp_parameter_specs(const MlpConfig& config);

// Weights N(0, 1/in) (LeCun normal: keeps the pre-activations O(1) through the layers), biases 0.
// Each value a pure function of (seed, parameter name, element index), as init_gpt_parameters.
void init_mlp_parameters(DeviceContext& ctx, ParameterStore& store, std::uint64_t seed);

class Mlp {
 public:
  Mlp(DeviceContext& ctx, const MlpConfig& config);
  ~Mlp();
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  const MlpConfig& config() const { return config_; }
  ParameterStore& parameters() { return store_; }
  const ParameterStore& parameters() const { return store_; }
  void init(std::uint64_t seed) { init_mlp_parameters(ctx_, store_, seed); }

  // N examples: features [N, inputs] and labels [N] in [0, classes), row-major host arrays.
  // Returns the mean cross-entropy; the activations are kept for backward().
  float forward(std::span<const float> features, std::span<const std::int32_t> labels, int N);
  // Forward without a loss: logits() then holds [N, classes].
  void forward_logits(std::span<const float> features, int N);
  // Adds loss_weight x d(mean loss of the last forward)/d(parameter) to every gradient (1/k for
  // the mean over k micro-batches). Overwrites the logits with their gradient, so it needs a new
  // forward() before the next call.
  void backward(float loss_weight = 1.0f);
  const Tensor& logits() const;  // [N, classes]
  const Tensor& losses() const;  // [N] per-example losses of the last forward with labels

 private:
  struct Activations;
  void run_forward(std::span<const float> features, int N);

  DeviceContext& ctx_;
  MlpConfig config_;
  ParameterStore store_;
  std::vector<Linear> fc_;
  std::unique_ptr<Activations> acts_;
  bool have_labels_ = false;
};

}  // namespace mt
