#include "models/hf/hf_model.h"

#include "models/hf/gpt2_hf.h"
#include "models/hf/hf_json.h"
#include "models/hf/llama_hf.h"
#include "runtime/error.h"

namespace mt {

namespace {

const HfFamily& family_of(const nlohmann::json& config, const std::filesystem::path& file) {
  MT_REQUIRE(config.is_object(), file.string(), " is not a JSON object");
  const nlohmann::json type = hf_value_or(config, "model_type", "gpt2");
  if (type == "gpt2") return gpt2_hf_family();
  if (type == "llama") return llama_hf_family();
  MT_FAIL_AS(UsageError, file.string(), ": model_type ", type.dump().substr(0, 80),
             " is not one meshtrain runs (gpt2, llama)");
}

}  // namespace

const HfFamily& hf_family(ModelFamily family) {
  return family == ModelFamily::Llama ? llama_hf_family() : gpt2_hf_family();
}

GptConfig read_hf_config(const std::filesystem::path& dir) {
  const nlohmann::json config = read_hf_config_json(dir);
  const std::string file = (dir / "config.json").string();
  return family_of(config, file).config_from_hf(config, file);
}

GptConfig read_hf_safetensors(const std::filesystem::path& dir, const std::optional<GptConfig>& expected,
                              const HfParamVisitor& visit) {
  return read_hf_folder(family_of(read_hf_config_json(dir), dir / "config.json"), dir, expected, visit);
}

void write_hf_safetensors(const std::filesystem::path& dir, const GptConfig& config, const HfParamSource& value_of,
                          StDtype stored, std::int64_t shard_bytes) {
  write_hf_folder(hf_family(config.family), dir, config, value_of, stored, shard_bytes);
}

}  // namespace mt
