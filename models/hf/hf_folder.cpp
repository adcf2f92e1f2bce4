#include "models/hf/hf_folder.h"

#include <algorithm>
#include <sstream>

#include "models/hf/hf_json.h"
#include "models/llmc/llmc_weights.h"  // defines: check_llmc_compatible
#include "runtime/error.h"

namespace mt {
namespace fs = std::filesystem;

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

bool is_hf_folder(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::exists(dir / "config.json", ec) &&
         (fs::exists(dir / kStSingleFile, ec) || fs::exists(dir / kStIndexFile, ec));
}

void check_hf_compatible(const GptConfig& expected, const GptConfig& found, const fs::path& dir) {
  MT_REQUIRE(expected.family == found.family, "safetensors folder ", dir.string(), " holds a ",
             model_family_name(found.family), " model (config.json's model_type), the model is ",
             model_family_name(expected.family));
  check_llmc_compatible(expected, found, dir);
  if (!found.is_llama()) return;
  std::ostringstream has, wants;
  const auto field = [&](const char* name, auto wanted, auto got) {
    if (wanted == got) return;
    has << " " << name << "=" << got;
    wants << " " << name << "=" << wanted;
  };
  field("kv_heads", expected.kv_head_count(), found.kv_head_count());
  field("ffn_hidden", expected.mlp_hidden(), found.mlp_hidden());
  field("rope_theta", expected.rope_theta, found.rope_theta);
  field("norm_eps", expected.norm_eps, found.norm_eps);
  MT_REQUIRE(has.str().empty(), "safetensors folder ", dir.string(), " has", has.str(), ", the model wants", wants.str(),
             " (--kv-heads, --ffn-hidden, --rope-theta, --norm-eps set them)");
}

GptConfig read_hf_folder(const HfFamily& family, const fs::path& dir, const std::optional<GptConfig>& expected,
                         const HfParamVisitor& visit) {
  const GptConfig config = family.config_from_hf(read_hf_config_json(dir), (dir / "config.json").string());
  if (expected) check_hf_compatible(*expected, config, dir);
  const SafetensorsFolder folder(dir);
  const std::string where = "safetensors folder " + dir.string();
  const std::string prefix = family.read_prefix(folder);
  const std::vector<HfTensor> table = family.tensors(config);
  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  MT_CHECK(table.size() == specs.size(), family.model, ": a table of ", table.size(), " for ", specs.size(), " parameters");

  // Everything checked before the first visit: a bad folder changes no parameter.
  std::vector<std::vector<SafetensorsFolder::Found>> found(table.size());
  std::size_t parts = 0;
  for (std::size_t i = 0; i < table.size(); ++i) {
    MT_CHECK(table[i].ours == specs[i].name, table[i].ours, " where ", specs[i].name, " was expected");
    for (const HfPart& part : table[i].parts) {
      const std::string name = prefix + part.name;
      const SafetensorsFolder::Found f = folder.find(name);
      MT_REQUIRE(f.file != nullptr, where, " lacks tensor '", name, "' (config.json: ", config.describe(), ")");
      MT_REQUIRE(f.tensor->shape == part.shape, where, ": tensor '", name, "' in ", f.file->path().filename().string(),
                 " has shape ", shape_text(f.tensor->shape), ", config.json implies ", shape_text(part.shape));
      found[i].push_back(f);
      ++parts;
    }
  }
  const std::vector<std::string> names = folder.names();
  if (parts != names.size()) {  // some tensor is not in the table: known to the family, or refused
    std::vector<std::string> ours;
    for (const HfTensor& t : table)
      for (const HfPart& part : t.parts) ours.push_back(prefix + part.name);
    std::sort(ours.begin(), ours.end());
    for (const std::string& name : names) {
      if (std::binary_search(ours.begin(), ours.end(), name) || family.known_extra(folder, prefix, name)) continue;
      MT_FAIL_AS(UsageError, where, " holds tensor '", name, "', which a ", family.model, " of ", config.describe(),
                 " does not have");
    }
  }

  std::vector<std::vector<float>> theirs;
  std::vector<std::span<const float>> views;
  std::vector<float> ours;
  for (std::size_t i = 0; i < table.size(); ++i) {
    theirs.resize(found[i].size());
    views.clear();
    for (std::size_t k = 0; k < found[i].size(); ++k) {
      theirs[k].resize(static_cast<std::size_t>(found[i][k].tensor->numel()));
      found[i][k].file->read(*found[i][k].tensor, theirs[k]);
      views.emplace_back(theirs[k]);
    }
    ours.resize(static_cast<std::size_t>(specs[i].numel()));
    hf_to_ours(table[i], views, ours);
    visit(specs[i], ours);
  }
  return config;
}

void write_hf_folder(const HfFamily& family, const fs::path& dir, const GptConfig& config, const HfParamSource& value_of,
                     StDtype stored, std::int64_t shard_bytes) {
  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  const std::vector<HfTensor> table = family.tensors(config);
  MT_CHECK(table.size() == specs.size(), family.model, ": a table of ", table.size(), " for ", specs.size(), " parameters");
  // Their layouts held whole until the files are written.
  std::vector<std::vector<std::vector<float>>> theirs(specs.size());
  std::vector<StTensorToWrite> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    ours_to_hf(table[i], value_of(specs[i]), theirs[i]);
    for (std::size_t k = 0; k < table[i].parts.size(); ++k)
      tensors.push_back({family.write_prefix + table[i].parts[k].name, table[i].parts[k].shape, theirs[i][k]});
  }
  write_safetensors_folder(dir, tensors, stored, shard_bytes, {{"format", "pt"}});
  write_hf_config_json(dir, family.config_json(config, stored));
}

}  // namespace mt
