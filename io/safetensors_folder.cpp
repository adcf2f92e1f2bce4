#include "io/safetensors_folder.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <system_error>

#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "runtime/error.h"

namespace mt {
namespace fs = std::filesystem;

namespace {

// What an index may name: a file in the same folder, nothing that climbs out of it.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

std::string st_shard_name(int index, int count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", index, count);
  return name;
}

SafetensorsFolder::SafetensorsFolder(fs::path dir) : dir_(std::move(dir)) {
  const fs::path index = dir_ / kStIndexFile, single = dir_ / kStSingleFile;
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    MT_REQUIRE(fs::exists(single, ec), "safetensors folder ", dir_.string(), " holds neither ", kStSingleFile, " nor ",
               kStIndexFile);
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const StTensor& t : files_.back()->tensors()) tensors_[t.name] = {files_.back().get(), &t};
    metadata_ = files_.back()->metadata();
    return;
  }
  sharded_ = true;
  const std::string where = "safetensors index " + index.string();
  const MappedFile text(index, "safetensors index");
  MT_REQUIRE(text.bytes().size() <= static_cast<std::size_t>(kStMaxHeaderBytes), where, " is larger than ",
             kStMaxHeaderBytes, " bytes");
  nlohmann::json json;
  try {
    const auto* p = reinterpret_cast<const char*>(text.bytes().data());
    json = nlohmann::json::parse(p, p + text.bytes().size());
  } catch (const nlohmann::json::exception& e) {
    std::string why = std::string(e.what()).substr(0, 200);
    for (char& c : why)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';  // one line
    MT_FAIL_AS(UsageError, where, " is not valid JSON (", why, ")");
  }
  MT_REQUIRE(json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(), where,
             " has no \"weight_map\" object of tensor names to files");
  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [name, file_json] : json["weight_map"].items()) {
    MT_REQUIRE(file_json.is_string() && plain_file_name(file_json.get<std::string>()), where, ": tensor '", name,
               "' maps to ", file_json.dump().substr(0, 100), ", not a file name in the folder");
    const std::string file = file_json.get<std::string>();
    auto it = opened.find(file);
    if (it == opened.end()) {
      MT_REQUIRE(fs::exists(dir_ / file, ec), where, " names ", file, " (for tensor '", name,
                 "'), which is missing from ", dir_.string());
      files_.push_back(std::make_unique<SafetensorsFile>(dir_ / file));
      if (files_.size() == 1) metadata_ = files_.back()->metadata();
      it = opened.emplace(file, files_.back().get()).first;
    }
    const StTensor* t = it->second->find(name);
    MT_REQUIRE(t != nullptr, where, " puts tensor '", name, "' in ", file, ", which does not hold it");
    tensors_[name] = {it->second, t};
  }
}

SafetensorsFolder::Found SafetensorsFolder::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? Found{} : it->second;
}

std::vector<std::string> SafetensorsFolder::names() const {
  std::vector<std::string> out;
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

void write_safetensors_folder(const fs::path& dir, const std::vector<StTensorToWrite>& tensors, StDtype stored,
                              std::int64_t shard_bytes, const std::map<std::string, std::string>& metadata) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) MT_FAIL_AS(EnvironmentError, "cannot create safetensors folder ", dir.string(), ": ", ec.message());
  const auto elem = static_cast<std::int64_t>(st_dtype_size(stored));
  // Greedy cut in the given order: a new shard when the next tensor would overflow this one.
  std::vector<std::vector<StTensorToWrite>> shards(1);
  std::int64_t in_shard = 0;
  for (const StTensorToWrite& t : tensors) {
    const std::int64_t bytes = static_cast<std::int64_t>(t.values.size()) * elem;
    if (shard_bytes > 0 && !shards.back().empty() && in_shard + bytes > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
  }
  const fs::path index = dir / kStIndexFile, single = dir / kStSingleFile;
  if (shards.size() == 1) {
    write_safetensors(single, tensors, stored, metadata);
    fs::remove(index, ec);  // an older sharded write would otherwise win over the new file
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  const int count = static_cast<int>(shards.size());
  for (int i = 0; i < count; ++i) {
    const std::string name = st_shard_name(i + 1, count);
    write_safetensors(dir / name, shards[static_cast<std::size_t>(i)], stored, metadata);
    for (const StTensorToWrite& t : shards[static_cast<std::size_t>(i)]) weight_map[t.name] = name;
  }
  const nlohmann::json json = {{"metadata", {{"total_size", safetensors_bytes(tensors, stored)}}},
                               {"weight_map", weight_map}};
  const std::string text = json.dump(2) + "\n";
  AtomicFile out(index, "safetensors index");
  out.write(text.data(), text.size());
  out.commit();
  fs::remove(single, ec);
}

}  // namespace mt
