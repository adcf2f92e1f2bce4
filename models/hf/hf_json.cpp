#include "models/hf/hf_json.h"

#include <climits>
#include <fstream>

#include "io/atomic_file.h"
#include "runtime/error.h"

namespace mt {

nlohmann::json read_hf_config_json(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  std::ifstream in(file);
  MT_REQUIRE(in.good(), "safetensors folder ", dir.string(), " has no readable config.json (the model's shape is read from it)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::string why = std::string(e.what()).substr(0, 200);
    for (char& ch : why)
      if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
    MT_FAIL_AS(UsageError, file.string(), " is not valid JSON (", why, ")");
  }
}

int hf_required_int(const nlohmann::json& config, const char* key, const std::string& where) {
  const auto it = config.find(key);
  MT_REQUIRE(it != config.end(), where, " has no ", key);
  MT_REQUIRE(it->is_number_integer() && it->get<std::int64_t>() >= 1 && it->get<std::int64_t>() <= INT_MAX, where,
             ": ", key, " is ", it->dump(), ", not a positive integer");
  return static_cast<int>(it->get<std::int64_t>());
}

nlohmann::json hf_value_or(const nlohmann::json& config, const char* key, nlohmann::json fallback) {
  const auto it = config.find(key);
  return it == config.end() || it->is_null() ? fallback : *it;
}

const char* hf_torch_dtype(StDtype stored) {
  return stored == StDtype::F32 ? "float32" : stored == StDtype::BF16 ? "bfloat16" : "float16";
}

void write_hf_config_json(const std::filesystem::path& dir, const nlohmann::ordered_json& config) {
  const std::string text = config.dump(2) + "\n";
  AtomicFile out(dir / "config.json", "config.json");
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace mt
