#include "models/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/nn_kernels.h"

namespace mt {

std::int32_t pick_token(std::span<const float> probs, int top_k, std::mt19937_64& rng) {
  return pick_token(probs, probs, top_k, rng);
}

std::int32_t pick_token(std::span<const float> probs, std::span<const float> rank, int top_k, std::mt19937_64& rng) {
  MT_CHECK(!probs.empty(), "sampling from an empty distribution");
  MT_CHECK(rank.size() == probs.size(), "ranking ", rank.size(), " tokens to draw from ", probs.size());
  std::vector<std::int32_t> ids(probs.size());
  std::iota(ids.begin(), ids.end(), 0);
  const std::size_t k = top_k > 0 ? std::min(probs.size(), static_cast<std::size_t>(top_k)) : probs.size();
  auto larger = [&](std::int32_t a, std::int32_t b) {
    return rank[static_cast<std::size_t>(a)] > rank[static_cast<std::size_t>(b)] ||
           (rank[static_cast<std::size_t>(a)] == rank[static_cast<std::size_t>(b)] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), larger);
  double total = 0.0;
  for (std::size_t i = 0; i < k; ++i) total += probs[static_cast<std::size_t>(ids[i])];
  // A uniform in [0, total) from the top 53 bits: the same on every platform, unlike
  // std::uniform_real_distribution.
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  double acc = 0.0;
  for (std::size_t i = 0; i < k; ++i) {
    acc += probs[static_cast<std::size_t>(ids[i])];
    if (u < acc) return ids[i];
  }
  return ids[k - 1];
}

std::vector<std::int32_t> generate(Gpt& model, DeviceContext& ctx, std::vector<std::int32_t> prompt,
                                   const SampleOptions& options, const std::function<void(std::int32_t)>& on_token) {
  MT_CHECK(!prompt.empty(), "generation needs at least one prompt token");
  MT_CHECK(std::isfinite(options.temperature) && options.temperature >= 0.0f,
           "temperature must be finite and >= 0, got ", options.temperature);
  MT_CHECK(options.top_k >= 0, "top-k must be >= 0, got ", options.top_k);
  const int vocab = model.config().vocab_size;
  const float temperature = options.temperature;
  std::mt19937_64 rng(options.seed);
  std::vector<std::int32_t> out;
  Tensor probs = Tensor::empty({1, vocab}, DType::F32, ctx);
  for (int i = 0; i < options.tokens; ++i) {
    const std::size_t window = std::min(prompt.size(), static_cast<std::size_t>(model.config().max_seq_len));
    std::span<const std::int32_t> context(prompt.data() + prompt.size() - window, window);
    // The whole window is recomputed per token: simple, and cheap next to training.
    model.forward_logits(context, 1, static_cast<int>(window));
    Tensor last = model.logits().narrow(static_cast<std::int64_t>(window) - 1, 1);
    // The model's own distribution ranks the tokens: the top k are its k most likely at any
    // temperature, and at 0 the token is its most likely (ties: the lower id), no draw made.
    nn::softmax_rows(ctx, last, vocab, 1.0f, probs);
    const std::vector<float> p = probs.to_host<float>();
    std::int32_t token = 0;
    if (temperature == 0.0f) {
      token = static_cast<std::int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
    } else if (temperature == 1.0f) {
      token = pick_token(p, options.top_k, rng);
    } else {
      nn::softmax_rows(ctx, last, vocab, temperature, probs);
      token = pick_token(probs.to_host<float>(), p, options.top_k, rng);
    }
    prompt.push_back(token);
    out.push_back(token);
    if (on_token) on_token(token);
  }
  return out;
}

}  // namespace mt
