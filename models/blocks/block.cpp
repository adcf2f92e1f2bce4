#include "models/blocks/block.h"

#include "models/blocks/gpt2_block.h"
#include "models/blocks/llama_block.h"
#include "models/parameter_store.h"

namespace mt {

Block::Block(ParameterStore& store, const std::string& prefix, const GptConfig& config, const TpRegion& region)
    : ln1(Norm::from_store(store, prefix + "ln1", config.rms_norm(), config.norm_eps)),
      ln2(Norm::from_store(store, prefix + "ln2", config.rms_norm(), config.norm_eps)),
      attn_proj(Linear::from_store(store, prefix + "attn.proj", config.has_biases()), region),
      fc({{Linear::from_store(store, prefix + "mlp.fc", config.has_biases())}}, region),
      fc_proj(Linear::from_store(store, prefix + "mlp.proj", config.has_biases()), region),
      first_param(store.index_of(prefix + "ln1.weight")) {}

std::unique_ptr<Block> make_block(const GptConfig& config, ParameterStore& store, int layer, const TpRegion& region,
                                  const nn::AttentionHeads& heads, bool kv_replicated) {
  const std::string prefix = "h." + std::to_string(layer) + ".";
  switch (config.family) {
    case ModelFamily::Gpt2: return std::make_unique<Gpt2Block>(store, prefix, config, region);
    case ModelFamily::Llama: return std::make_unique<LlamaBlock>(store, prefix, config, region, heads, kv_replicated);
  }
  MT_FAIL("no block for model family ", static_cast<int>(config.family));
}

}  // namespace mt
