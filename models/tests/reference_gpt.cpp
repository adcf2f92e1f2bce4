#include "models/tests/reference_gpt.h"

#include <cmath>
#include <random>

#include "models/gpt_parameters.h"  // defines: gpt_parameter_specs, ParamKind
#include "runtime/error.h"          // defines: MT_CHECK

namespace mt::ref {
namespace {

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

void check_size(const Vec& v, std::int64_t n, const char* what) {
  MT_CHECK(v.size() == sz(n), what, " holds ", v.size(), " values, expected ", n);
}

const Vec& param(const RefParams& params, const std::string& name, std::int64_t numel) {
  auto it = params.find(name);
  MT_CHECK(it != params.end(), "reference GPT: no parameter ", name);
  MT_CHECK(it->second.size() == sz(numel), "reference GPT: ", name, " holds ", it->second.size(),
           " values, expected ", numel);
  return it->second;
}

}  // namespace

Vec embedding(const std::vector<int>& tokens, const Vec& wte, const Vec& wpe, int B, int T, int C) {
  MT_CHECK(tokens.size() == sz(std::int64_t{B} * T), "embedding: ", tokens.size(), " tokens for B*T ", B * T);
  MT_CHECK(wpe.size() >= sz(std::int64_t{T} * C), "embedding: wpe has fewer than T rows");
  const std::int64_t rows = static_cast<std::int64_t>(wte.size()) / C;
  Vec out(sz(std::int64_t{B} * T * C));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int tok = tokens[sz(std::int64_t{b} * T + t)];
      MT_CHECK(tok >= 0 && tok < rows, "embedding: token ", tok, " outside [0, ", rows, ")");
      for (int c = 0; c < C; ++c)
        out[sz((std::int64_t{b} * T + t) * C + c)] = wte[sz(std::int64_t{tok} * C + c)] + wpe[sz(std::int64_t{t} * C + c)];
    }
  return out;
}

Vec layernorm(const Vec& x, const Vec& weight, const Vec& bias, int N, int C, Vec* mean, Vec* rstd) {
  check_size(x, std::int64_t{N} * C, "layernorm x");
  check_size(weight, C, "layernorm weight");
  check_size(bias, C, "layernorm bias");
  Vec out(x.size());
  if (mean) mean->assign(sz(N), 0.0);
  if (rstd) rstd->assign(sz(N), 0.0);
  for (int n = 0; n < N; ++n) {
    const double* xr = x.data() + std::int64_t{n} * C;
    double m = 0.0;
    for (int c = 0; c < C; ++c) m += xr[c];
    m /= C;
    double var = 0.0;
    for (int c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
    var /= C;  // biased, as GPT-2 and torch.nn.LayerNorm
    const double s = 1.0 / std::sqrt(var + kLayerNormEps);
    for (int c = 0; c < C; ++c) out[sz(std::int64_t{n} * C + c)] = (xr[c] - m) * s * weight[sz(c)] + bias[sz(c)];
    if (mean) (*mean)[sz(n)] = m;
    if (rstd) (*rstd)[sz(n)] = s;
  }
  return out;
}

Vec linear(const Vec& x, const Vec& weight, const Vec& bias, int N, int in, int out) {
  check_size(x, std::int64_t{N} * in, "linear x");
  check_size(weight, std::int64_t{out} * in, "linear weight");
  if (!bias.empty()) check_size(bias, out, "linear bias");
  Vec y(sz(std::int64_t{N} * out));
  // Each output is bias + x[0] w[0] + x[1] w[1] + ... in that order. Four outputs at a time, each
  // with its own accumulator, only so that the four chains of additions overlap (the finite
  // differences of the whole-model test call this thousands of times): the same sums, bit for bit.
  auto start = [&](int o) { return bias.empty() ? 0.0 : bias[sz(o)]; };
  for (int n = 0; n < N; ++n) {
    const double* xr = x.data() + std::int64_t{n} * in;
    double* yr = y.data() + std::int64_t{n} * out;
    int o = 0;
    for (; o + 4 <= out; o += 4) {
      const double* w0 = weight.data() + std::int64_t{o} * in;
      const double *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
      double a0 = start(o), a1 = start(o + 1), a2 = start(o + 2), a3 = start(o + 3);
      for (int i = 0; i < in; ++i) {
        a0 += xr[i] * w0[i];
        a1 += xr[i] * w1[i];
        a2 += xr[i] * w2[i];
        a3 += xr[i] * w3[i];
      }
      yr[o] = a0;
      yr[o + 1] = a1;
      yr[o + 2] = a2;
      yr[o + 3] = a3;
    }
    for (; o < out; ++o) {
      const double* w0 = weight.data() + std::int64_t{o} * in;
      double acc = start(o);
      for (int i = 0; i < in; ++i) acc += xr[i] * w0[i];
      yr[o] = acc;
    }
  }
  return y;
}

double gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

Vec gelu(const Vec& x) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = gelu(x[i]);
  return y;
}

Vec attention(const Vec& qkv, int B, int T, int C, int heads, Vec* att) {
  MT_CHECK(heads > 0 && C % heads == 0, "attention: C ", C, " is not a multiple of heads ", heads);
  check_size(qkv, std::int64_t{B} * T * 3 * C, "attention qkv");
  const int hs = C / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Vec out(sz(std::int64_t{B} * T * C), 0.0);
  if (att) att->assign(sz(std::int64_t{B} * heads * T * T), 0.0);
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[sz((std::int64_t{b} * T + t) * 3 * C + std::int64_t{part} * C + std::int64_t{h} * hs + i)];
  };
  Vec p(sz(T));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < T; ++t) {
        double max_score = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int i = 0; i < hs; ++i) dot += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          p[sz(s)] = dot * scale;
          max_score = std::max(max_score, p[sz(s)]);
        }
        double sum = 0.0;
        for (int s = 0; s <= t; ++s) sum += (p[sz(s)] = std::exp(p[sz(s)] - max_score));
        for (int s = 0; s <= t; ++s) p[sz(s)] /= sum;
        for (int i = 0; i < hs; ++i) {
          double acc = 0.0;
          for (int s = 0; s <= t; ++s) acc += p[sz(s)] * at(b, s, 2, h, i);
          out[sz((std::int64_t{b} * T + t) * C + std::int64_t{h} * hs + i)] = acc;
        }
        if (att)
          for (int s = 0; s <= t; ++s) (*att)[sz(((std::int64_t{b} * heads + h) * T + t) * T + s)] = p[sz(s)];
      }
  return out;
}

Vec rmsnorm(const Vec& x, const Vec& weight, int N, int C, double eps, Vec* rstd) {
  check_size(x, std::int64_t{N} * C, "rmsnorm x");
  check_size(weight, C, "rmsnorm weight");
  Vec out(x.size());
  if (rstd) rstd->assign(sz(N), 0.0);
  for (int n = 0; n < N; ++n) {
    const double* xr = x.data() + std::int64_t{n} * C;
    double sum_sq = 0.0;
    for (int c = 0; c < C; ++c) sum_sq += xr[c] * xr[c];
    const double s = 1.0 / std::sqrt(sum_sq / C + eps);
    for (int c = 0; c < C; ++c) out[sz(std::int64_t{n} * C + c)] = xr[c] * s * weight[sz(c)];
    if (rstd) (*rstd)[sz(n)] = s;
  }
  return out;
}

Vec swiglu(const Vec& gate_up, int N, int F) {
  check_size(gate_up, std::int64_t{N} * 2 * F, "swiglu gate_up");
  Vec out(sz(std::int64_t{N} * F));
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const double g = gate_up[sz(std::int64_t{n} * 2 * F + f)], u = gate_up[sz(std::int64_t{n} * 2 * F + F + f)];
      out[sz(std::int64_t{n} * F + f)] = g / (1.0 + std::exp(-g)) * u;
    }
  return out;
}

Vec rope(const Vec& qkv, int B, int T, int q_heads, int kv_heads, int hs, double theta) {
  MT_CHECK(hs > 0 && hs % 2 == 0, "rope: head size ", hs, " must be even");
  const std::int64_t row = std::int64_t{q_heads + 2 * kv_heads} * hs;
  check_size(qkv, std::int64_t{B} * T * row, "rope qkv");
  Vec out = qkv;
  const int half = hs / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < q_heads + kv_heads; ++h)  // the q heads, then the k heads: contiguous
        for (int i = 0; i < half; ++i) {
          const double angle = t * std::pow(theta, -2.0 * i / hs);
          const std::size_t a = sz((std::int64_t{b} * T + t) * row + std::int64_t{h} * hs + i), bb = a + sz(half);
          out[a] = qkv[a] * std::cos(angle) - qkv[bb] * std::sin(angle);
          out[bb] = qkv[bb] * std::cos(angle) + qkv[a] * std::sin(angle);
        }
  return out;
}

Vec attention(const Vec& qkv, int B, int T, int hs, const AttentionGroups& heads, Vec* att) {
  const int H = heads.q_heads, KV = heads.kv_heads;
  const std::int64_t row = std::int64_t{H + 2 * KV} * hs;
  check_size(qkv, std::int64_t{B} * T * row, "attention qkv");
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Vec out(sz(std::int64_t{B} * T * H * hs), 0.0);
  if (att) att->assign(sz(std::int64_t{B} * H * T * T), 0.0);
  Vec p(sz(T));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int kv = (heads.q_begin + h) / heads.group - heads.kv_begin;
      MT_CHECK(kv >= 0 && kv < KV, "attention: q head ", h, " reads kv head ", kv, " of ", KV);
      const double* q = qkv.data() + std::int64_t{h} * hs;
      const double* k = qkv.data() + std::int64_t{H + kv} * hs;
      const double* v = qkv.data() + std::int64_t{H + KV + kv} * hs;
      for (int t = 0; t < T; ++t) {
        const std::int64_t rt = (std::int64_t{b} * T + t) * row;
        double max_score = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          const std::int64_t rs = (std::int64_t{b} * T + s) * row;
          double dot = 0.0;
          for (int i = 0; i < hs; ++i) dot += q[rt + i] * k[rs + i];
          p[sz(s)] = dot * scale;
          max_score = std::max(max_score, p[sz(s)]);
        }
        double sum = 0.0;
        for (int s = 0; s <= t; ++s) sum += (p[sz(s)] = std::exp(p[sz(s)] - max_score));
        for (int s = 0; s <= t; ++s) p[sz(s)] /= sum;
        for (int i = 0; i < hs; ++i) {
          double acc = 0.0;
          for (int s = 0; s <= t; ++s) acc += p[sz(s)] * v[(std::int64_t{b} * T + s) * row + i];
          out[sz((std::int64_t{b} * T + t) * H * hs + std::int64_t{h} * hs + i)] = acc;
        }
        if (att)
          for (int s = 0; s <= t; ++s) (*att)[sz(((std::int64_t{b} * H + h) * T + t) * T + s)] = p[sz(s)];
      }
    }
  return out;
}

Vec cross_entropy(const Vec& logits, const std::vector<int>& targets, int N, int Vp, int V) {
  MT_CHECK(V >= 1 && V <= Vp, "cross_entropy: V ", V, " outside [1, Vp ", Vp, "]");
  check_size(logits, std::int64_t{N} * Vp, "cross_entropy logits");
  MT_CHECK(targets.size() == sz(N), "cross_entropy: ", targets.size(), " targets for ", N, " rows");
  Vec losses(sz(N));
  for (int n = 0; n < N; ++n) {
    const double* x = logits.data() + std::int64_t{n} * Vp;
    const int target = targets[sz(n)];
    MT_CHECK(target >= 0 && target < V, "cross_entropy: target ", target, " outside [0, ", V, ")");
    double max_logit = -INFINITY;
    for (int j = 0; j < V; ++j) max_logit = std::max(max_logit, x[j]);
    double sum = 0.0;
    for (int j = 0; j < V; ++j) sum += std::exp(x[j] - max_logit);
    losses[sz(n)] = std::log(sum) + max_logit - x[target];
  }
  return losses;
}

Vec softmax_rows(const Vec& logits, int N, int Vp, int V, double temperature) {
  check_size(logits, std::int64_t{N} * Vp, "softmax_rows logits");
  Vec probs(sz(std::int64_t{N} * V));
  for (int n = 0; n < N; ++n) {
    const double* x = logits.data() + std::int64_t{n} * Vp;
    double* p = probs.data() + std::int64_t{n} * V;
    double max_logit = -INFINITY;
    for (int j = 0; j < V; ++j) max_logit = std::max(max_logit, x[j] / temperature);
    double sum = 0.0;
    for (int j = 0; j < V; ++j) sum += (p[j] = std::exp(x[j] / temperature - max_logit));
    for (int j = 0; j < V; ++j) p[j] /= sum;
  }
  return probs;
}

Vec add(const Vec& x, const Vec& y) {
  MT_CHECK(x.size() == y.size(), "add: sizes ", x.size(), " and ", y.size());
  Vec out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] + y[i];
  return out;
}

double mean(const Vec& x) {
  double s = 0.0;
  for (double v : x) s += v;
  return x.empty() ? 0.0 : s / static_cast<double>(x.size());
}

double dot(const Vec& w, const Vec& x) {
  MT_CHECK(w.size() == x.size(), "dot: sizes ", w.size(), " and ", x.size());
  double s = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) s += w[i] * x[i];
  return s;
}

Vec reference_gpt_logits(const GptConfig& config, const RefParams& params, const std::vector<int>& inputs, int B,
                         int T) {
  config.validate();
  MT_CHECK(B >= 1 && T >= 1 && T <= config.max_seq_len, "reference GPT: B ", B, " T ", T, " with max_seq_len ",
           config.max_seq_len);
  const int C = config.channels, Vp = config.vocab_rows(), N = B * T;
  for (int tok : inputs)
    MT_CHECK(tok >= 0 && tok < config.vocab_size, "reference GPT: input token ", tok, " outside [0, ",
             config.vocab_size, ")");
  const Vec& wte = param(params, "wte", std::int64_t{Vp} * C);
  const Vec& wpe = param(params, "wpe", std::int64_t{config.max_seq_len} * C);

  Vec x = embedding(inputs, wte, wpe, B, T, C);
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    auto w = [&](const std::string& name, std::int64_t numel) -> const Vec& { return param(params, p + name, numel); };
    const Vec h1 = layernorm(x, w("ln1.weight", C), w("ln1.bias", C), N, C);
    const Vec qkv = linear(h1, w("attn.qkv.weight", 3 * C * C), w("attn.qkv.bias", 3 * C), N, C, 3 * C);
    const Vec a = attention(qkv, B, T, C, config.heads);
    x = add(x, linear(a, w("attn.proj.weight", C * C), w("attn.proj.bias", C), N, C, C));
    const Vec h2 = layernorm(x, w("ln2.weight", C), w("ln2.bias", C), N, C);
    const Vec fc = gelu(linear(h2, w("mlp.fc.weight", 4 * C * C), w("mlp.fc.bias", 4 * C), N, C, 4 * C));
    x = add(x, linear(fc, w("mlp.proj.weight", 4 * C * C), w("mlp.proj.bias", C), N, 4 * C, C));
  }
  const Vec xf = layernorm(x, param(params, "lnf.weight", C), param(params, "lnf.bias", C), N, C);
  return linear(xf, wte, Vec{}, N, C, Vp);  // tied LM head, no bias
}

double reference_gpt_loss(const GptConfig& config, const RefParams& params, const std::vector<int>& inputs,
                          const std::vector<int>& targets, int B, int T) {
  const Vec logits = reference_gpt_logits(config, params, inputs, B, T);
  return mean(cross_entropy(logits, targets, B * T, config.vocab_rows(), config.vocab_size));
}

RefParams reference_random_params(const GptConfig& config, std::uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  RefParams params;
  for (const ParamSpec& spec : gpt_parameter_specs(config)) {
    const bool ln_weight = spec.kind == ParamKind::Ln1Weight || spec.kind == ParamKind::Ln2Weight ||
                           spec.kind == ParamKind::LnfWeight;
    Vec v(sz(spec.numel()));
    for (double& x : v) x = static_cast<double>(static_cast<float>((ln_weight ? 1.0 : 0.0) + dist(rng)));
    params.emplace(spec.name, std::move(v));
  }
  return params;
}

double central_difference(const std::function<double(const Vec&)>& f, const Vec& x, std::size_t index, double h) {
  MT_CHECK(index < x.size(), "central_difference: index ", index, " outside ", x.size(), " values");
  Vec xp = x;
  xp[index] = x[index] + h;
  const double fp = f(xp);
  xp[index] = x[index] - h;
  const double fm = f(xp);
  return (fp - fm) / (2.0 * h);
}

double central_difference(const std::function<double(const RefParams&)>& f, const RefParams& params,
                          const std::string& name, std::size_t index, double h) {
  auto it = params.find(name);
  MT_CHECK(it != params.end(), "central_difference: no parameter ", name);
  MT_CHECK(index < it->second.size(), "central_difference: index ", index, " outside ", it->second.size(),
           " values of ", name);
  RefParams p = params;
  double& v = p.at(name)[index];
  const double x0 = v;
  v = x0 + h;
  const double fp = f(p);
  v = x0 - h;
  const double fm = f(p);
  return (fp - fm) / (2.0 * h);
}

Vec central_difference_gradient(const std::function<double(const Vec&)>& f, const Vec& x, double h) {
  Vec g(x.size());
  Vec xp = x;
  for (std::size_t i = 0; i < x.size(); ++i) {
    xp[i] = x[i] + h;
    const double fp = f(xp);
    xp[i] = x[i] - h;
    const double fm = f(xp);
    xp[i] = x[i];
    g[i] = (fp - fm) / (2.0 * h);
  }
  return g;
}

}  // namespace mt::ref
