// A double-precision reference of the GPT-2 forward pass, and of the llama family's ops, for tests: every op as plain loops on
// std::vector<double>, written independently of runtime/ops/, and the whole model on
// parameters named as models/gpt_parameters.h names them. Test-only: slow, clear, exact to ~1e-15.
//
// Layouts follow the kernels: row-major, N = rows (B x T), C = channels; linear weights are
// [out, in] with y = x W^T + b; the fused qkv is [q | k | v] with head h owning channels
// [h*hs, (h+1)*hs) of each; logits have Vp columns of which only the first V are real.
// defines: embedding, layernorm, rmsnorm, linear, gelu, swiglu, rope, AttentionGroups, attention,
//          cross_entropy, softmax_rows, add, mean, dot,
//          RefParams, reference_gpt_logits, reference_gpt_loss, reference_random_params,
//          central_difference, central_difference_gradient
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/gpt_config.h"  // defines: GptConfig

namespace mt::ref {

using Vec = std::vector<double>;
// Parameters by gpt_parameter_specs name ("wte", "h.0.attn.qkv.weight", ...), each row-major flat.
using RefParams = std::map<std::string, Vec>;

inline constexpr double kLayerNormEps = 1e-5;

// ---- Ops --------------------------------------------------------------------------------------

// out[b, t, :] = wte[tokens[b*T + t], :] + wpe[t, :]; out [B*T, C].
Vec embedding(const std::vector<int>& tokens, const Vec& wte, const Vec& wpe, int B, int T, int C);

// Per row of x [N, C]: (x - mean) / sqrt(var + 1e-5) * weight + bias, var biased (divided by C).
// `mean` and `rstd` [N], when given, receive the row statistics (rstd = 1 / sqrt(var + eps)).
Vec layernorm(const Vec& x, const Vec& weight, const Vec& bias, int N, int C, Vec* mean = nullptr,
              Vec* rstd = nullptr);

// Per row of x [N, C]: x / sqrt(mean(x^2) + eps) * weight (llama's RMSNorm). `rstd` [N], when
// given, receives 1 / sqrt(mean(x^2) + eps).
Vec rmsnorm(const Vec& x, const Vec& weight, int N, int C, double eps, Vec* rstd = nullptr);

// y [N, out] = x [N, in] W^T + b, W [out, in]; an empty `bias` means none.
Vec linear(const Vec& x, const Vec& weight, const Vec& bias, int N, int in, int out);

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise.
double gelu(double x);
Vec gelu(const Vec& x);

// Per row of gate_up [N, 2F] = [gate | up]: silu(gate) * up, silu(g) = g / (1 + exp(-g)); [N, F].
Vec swiglu(const Vec& gate_up, int N, int F);

// Rotary position embedding, Hugging Face's half-split layout, on qkv [B*T, (q_heads + 2 kv_heads)
// * hs] = [q | k | v]: in each q and k head, channel i < hs/2 and channel i + hs/2 turn by the angle
// t * theta^(-2i/hs) at position t: (a, b) -> (a cos - b sin, b cos + a sin); v is copied. The
// frequencies and angles are in double (the kernels compute them in fp32, as transformers does).
Vec rope(const Vec& qkv, int B, int T, int q_heads, int kv_heads, int hs, double theta);

// Grouped-query heads: local q head i reads kv head (q_begin + i) / group - kv_begin.
struct AttentionGroups {
  int q_heads = 1, kv_heads = 1, q_begin = 0, group = 1, kv_begin = 0;
};
// Causal grouped-query attention over qkv [B*T, (q_heads + 2 kv_heads) * hs]: out [B*T, q_heads *
// hs], `att` [B, q_heads, T, T] as below.
Vec attention(const Vec& qkv, int B, int T, int hs, const AttentionGroups& heads, Vec* att = nullptr);

// Causal self-attention over qkv [B*T, 3C]: per head, softmax over positions s <= t of
// q_t . k_s / sqrt(hs), then sum of p_s v_s. out [B*T, C]; `att`, when given, receives the
// probabilities [B, heads, T, T] (zero above the diagonal).
Vec attention(const Vec& qkv, int B, int T, int C, int heads, Vec* att = nullptr);

// Per row of logits [N, Vp]: -log softmax(logits[n, :V])[targets[n]]; columns >= V are ignored.
Vec cross_entropy(const Vec& logits, const std::vector<int>& targets, int N, int Vp, int V);

// softmax(logits[n, :V] / temperature) per row, into [N, V].
Vec softmax_rows(const Vec& logits, int N, int Vp, int V, double temperature);

// x + y elementwise (the residual add).
Vec add(const Vec& x, const Vec& y);
double mean(const Vec& x);
// sum of w[i] * x[i]: the scalar loss L = <dout, f(x)> whose gradient a backward kernel computes.
double dot(const Vec& w, const Vec& x);

// ---- The model --------------------------------------------------------------------------------

// Logits [B*T, Vp] of GPT-2 (pre-LN blocks, tied LM head) for inputs [B*T] (row b*T + t):
//   x = wte[tok] + wpe[t]
//   per block: x += attn.proj(attention(attn.qkv(ln1(x)))); x += mlp.proj(gelu(mlp.fc(ln2(x))))
//   logits = lnf(x) wte^T   (all Vp rows of wte: padding columns are whatever the padding rows give)
// Throws Error if a parameter is missing or has the wrong size, a token is out of range or
// T > max_seq_len.
Vec reference_gpt_logits(const GptConfig& config, const RefParams& params, const std::vector<int>& inputs, int B,
                         int T);
// Mean over the B*T positions of the cross-entropy of the logits against targets (first V columns).
double reference_gpt_loss(const GptConfig& config, const RefParams& params, const std::vector<int>& inputs,
                          const std::vector<int>& targets, int B, int T);

// Every parameter of `config`, random from `seed`: matrices and embeddings uniform in
// [-scale, scale], layernorm weights 1 + that, biases that. Each value is rounded to fp32, so the
// same numbers loaded into an fp32 model describe exactly the same function.
RefParams reference_random_params(const GptConfig& config, std::uint64_t seed, double scale = 0.1);

// ---- Finite differences -----------------------------------------------------------------------

// (f(x + h e_i) - f(x - h e_i)) / (2h).
double central_difference(const std::function<double(const Vec&)>& f, const Vec& x, std::size_t index, double h);
// The same for element `index` of parameter `name` of `params`.
double central_difference(const std::function<double(const RefParams&)>& f, const RefParams& params,
                          const std::string& name, std::size_t index, double h);
// The whole gradient of f at x, element by element (2 * x.size() evaluations of f).
Vec central_difference_gradient(const std::function<double(const Vec&)>& f, const Vec& x, double h);

}  // namespace mt::ref
