// The parameters of a model by name, shape and role, in the order the model stores them
// (embedding, then block by block, then the final norm, then an untied LM head): the one list that
// the model, the llm.c weights reader/writer, checkpoints and the test reference all follow.
//
// Linear weights are [out, in] (y = x W^T + b). The fused QKV projection's outputs are
// [q | k | v]: q over every head, k and v over the kv heads (all heads in gpt2); head h owns
// channels [h*hs, (h+1)*hs) of its block. gpt2's LM head is tied to "wte".
// llama has no biases; its norms are RMSNorm weights (the Ln*Weight kinds), its mlp.fc is SwiGLU's
// [gate | up] ([2F, C]: gate rows first) and mlp.proj the down projection [C, F]; "lm_head" [Vp, C]
// comes last. Its q and [k | v] projections are two parameters, so that tensor parallelism can keep
// the kv heads whole on every rank when it cannot split them (models/gpt_sharding.h); the model
// runs them into one [q | k | v] activation, as gpt2's fused projection.
// defines: ParamKind, ParamSpec, read_only_as_compute_copy, zero_gathers_compute_copy, gpt_parameter_specs, spec_offsets, spec_index
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt_config.h"

namespace mt {

// The role of a parameter, for weight decay (matrices only) and for the llm.c layout.
enum class ParamKind : std::uint8_t {
  TokenEmbedding,     // wte [Vp, C]
  PositionEmbedding,  // wpe [maxT, C]
  Ln1Weight, Ln1Bias,            // h.L.ln1.weight / .bias [C]
  QkvWeight, QkvBias,            // h.L.attn.qkv.weight [3C, C] / .bias [3C]
  AttnProjWeight, AttnProjBias,  // h.L.attn.proj.weight [C, C] / .bias [C]
  Ln2Weight, Ln2Bias,            // h.L.ln2.weight / .bias [C]
  FcWeight, FcBias,              // h.L.mlp.fc.weight [4C, C] / .bias [4C]
  FcProjWeight, FcProjBias,      // h.L.mlp.proj.weight [C, 4C] / .bias [C]
  LnfWeight, LnfBias,            // lnf.weight / lnf.bias [C]
  LmHead,                        // lm_head [Vp, C]: llama's untied output embedding
  QueryWeight,                   // h.L.attn.q.weight [H*hs, C]: llama's q projection
  KeyValueWeight,                // h.L.attn.kv.weight [2*Hkv*hs, C]: llama's [k | v] projection
};
inline constexpr int kParamKinds = 16;  // gpt2's, in llm.c's file order, which is the enum order

// The GEMM weights: the model reads them only through the store's compute copy (Linear::
// compute_weight, models/layers.h), never in fp32, so under bf16 compute ZeRO-3 may gather that
// copy alone (zero/unit_shards.h). Everything else is read in fp32 whatever the compute dtype: the
// norms' weights and biases, the linear biases (GEMM epilogues), and the embeddings (the lookup;
// the tied head reads wte's bf16 copy too, but the first stage looks it up in fp32).
constexpr bool read_only_as_compute_copy(ParamKind kind) {
  switch (kind) {
    case ParamKind::QkvWeight:
    case ParamKind::QueryWeight:
    case ParamKind::KeyValueWeight:
    case ParamKind::AttnProjWeight:
    case ParamKind::FcWeight:
    case ParamKind::FcProjWeight:
    case ParamKind::LmHead:
      return true;
    default:
      return false;
  }
}

// ZeRO 1-3 under bf16 compute gather the GEMM weights as their compute copy alone (2 bytes an
// element, from owned bf16 shards AdamW's step writes), so their cut keeps those weights in blocks
// apart (zero/unit_shards.h), or in a region of the flat store apart (ZeRO-1, zero_flat_regions);
// the perf models cut alike.
constexpr bool zero_gathers_compute_copy(int zero_stage, bool bf16_compute) { return bf16_compute && zero_stage >= 1; }

struct ParamSpec {
  std::string name;             // "wte", "h.3.attn.qkv.weight", "lnf.bias"
  ParamKind kind;
  int layer = -1;               // block index, -1 for embeddings and the final layernorm
  std::vector<std::int64_t> shape;
  bool decay = false;           // AdamW weight decay: matrices and embeddings, not biases or layernorms
  std::int64_t numel() const;
};

std::vector<ParamSpec> gpt_parameter_specs(const GptConfig& config);
// Where each spec starts when they lie one after another in one flat buffer; the last entry, one
// past the specs, is the total.
std::vector<std::int64_t> spec_offsets(const std::vector<ParamSpec>& specs);
// The position of the spec called `name`. A name none has is our bug (a shard or file entry made
// for another model), an MT_CHECK failure naming it, never a read past the end.
std::size_t spec_index(const std::vector<ParamSpec>& specs, const std::string& name);

}  // namespace mt
