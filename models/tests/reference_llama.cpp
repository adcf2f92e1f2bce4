#include "models/tests/reference_llama.h"

#include <string>

#include "runtime/error.h"  // defines: MT_CHECK

namespace mt::ref {
namespace {

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

const Vec& param(const RefParams& params, const std::string& name, std::int64_t numel) {
  auto it = params.find(name);
  MT_CHECK(it != params.end(), "reference llama: no parameter ", name);
  MT_CHECK(it->second.size() == sz(numel), "reference llama: ", name, " holds ", it->second.size(),
           " values, expected ", numel);
  return it->second;
}

// [a | b] per row: a [N, wa], b [N, wb] -> [N, wa + wb].
Vec concat_rows(const Vec& a, const Vec& b, int N, std::int64_t wa, std::int64_t wb) {
  Vec out(sz(N * (wa + wb)));
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t j = 0; j < wa; ++j) out[sz(n * (wa + wb) + j)] = a[sz(n * wa + j)];
    for (std::int64_t j = 0; j < wb; ++j) out[sz(n * (wa + wb) + wa + j)] = b[sz(n * wb + j)];
  }
  return out;
}

}  // namespace

Vec reference_llama_logits(const GptConfig& config, const RefParams& params, const std::vector<int>& inputs, int B,
                           int T) {
  config.validate();
  MT_CHECK(config.is_llama(), "reference llama: the config is of family ", model_family_name(config.family));
  MT_CHECK(B >= 1 && T >= 1 && T <= config.max_seq_len, "reference llama: B ", B, " T ", T, " with max_seq_len ",
           config.max_seq_len);
  MT_CHECK(inputs.size() == sz(std::int64_t{B} * T), "reference llama: ", inputs.size(), " tokens for B*T ", B * T);
  const int C = config.channels, Vp = config.vocab_rows(), N = B * T;
  const int H = config.heads, KV = config.kv_head_count(), hs = config.head_size();
  const int F = static_cast<int>(config.mlp_hidden());
  const double eps = config.norm_eps, theta = config.rope_theta;
  const Vec& wte = param(params, "wte", std::int64_t{Vp} * C);

  Vec x(sz(std::int64_t{N} * C));
  for (int n = 0; n < N; ++n) {
    const int tok = inputs[sz(n)];
    MT_CHECK(tok >= 0 && tok < config.vocab_size, "reference llama: input token ", tok, " outside [0, ",
             config.vocab_size, ")");
    for (int c = 0; c < C; ++c) x[sz(std::int64_t{n} * C + c)] = wte[sz(std::int64_t{tok} * C + c)];
  }
  const AttentionGroups groups{H, KV, 0, H / KV, 0};
  const int kv_width = 2 * KV * hs;
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    auto w = [&](const std::string& name, std::int64_t numel) -> const Vec& { return param(params, p + name, numel); };
    const Vec h1 = rmsnorm(x, w("ln1.weight", C), N, C, eps);
    const Vec q = linear(h1, w("attn.q.weight", std::int64_t{C} * C), Vec{}, N, C, C);
    const Vec kv = linear(h1, w("attn.kv.weight", std::int64_t{kv_width} * C), Vec{}, N, C, kv_width);
    const Vec qkv = rope(concat_rows(q, kv, N, C, kv_width), B, T, H, KV, hs, theta);
    const Vec a = attention(qkv, B, T, hs, groups);
    x = add(x, linear(a, w("attn.proj.weight", std::int64_t{C} * C), Vec{}, N, C, C));
    const Vec h2 = rmsnorm(x, w("ln2.weight", C), N, C, eps);
    const Vec gate_up = linear(h2, w("mlp.fc.weight", std::int64_t{2} * F * C), Vec{}, N, C, 2 * F);
    x = add(x, linear(swiglu(gate_up, N, F), w("mlp.proj.weight", std::int64_t{C} * F), Vec{}, N, F, C));
  }
  const Vec xf = rmsnorm(x, param(params, "lnf.weight", C), N, C, eps);
  return linear(xf, param(params, "lm_head", std::int64_t{Vp} * C), Vec{}, N, C, Vp);
}

double reference_llama_loss(const GptConfig& config, const RefParams& params, const std::vector<int>& inputs,
                            const std::vector<int>& targets, int B, int T) {
  const Vec logits = reference_llama_logits(config, params, inputs, B, T);
  return mean(cross_entropy(logits, targets, B * T, config.vocab_rows(), config.vocab_size));
}

}  // namespace mt::ref
