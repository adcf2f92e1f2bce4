// A folder of safetensors weights as Hugging Face lays it out: model.safetensors, or the sharded
// form, model-00001-of-0000N.safetensors ... and model.safetensors.index.json, whose "weight_map"
// names the file of every tensor. The index wins when both are present.
// defines: kStSingleFile, kStIndexFile, SafetensorsFolder, write_safetensors_folder, st_shard_name
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace mt {

inline constexpr const char* kStSingleFile = "model.safetensors";
inline constexpr const char* kStIndexFile = "model.safetensors.index.json";

class SafetensorsFolder {
 public:
  // Opens and checks every file (SafetensorsFile's checks). Errors (one line, naming the file):
  // neither model.safetensors nor the index in `dir`; an index that is not JSON, has no
  // weight_map of names to plain file names, names a missing file or a tensor its file lacks.
  explicit SafetensorsFolder(std::filesystem::path dir);

  struct Found {
    const SafetensorsFile* file = nullptr;
    const StTensor* tensor = nullptr;
  };
  Found find(std::string_view name) const;  // {nullptr, nullptr} when absent
  std::vector<std::string> names() const;   // every tensor, sorted
  const std::filesystem::path& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // the first file's

 private:
  std::filesystem::path dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Found, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// "model-00002-of-00005.safetensors"
std::string st_shard_name(int index, int count);

// Writes `tensors` into `dir` (created when absent): one model.safetensors when their data fit in
// `shard_bytes` (0: no limit), else shards of at most shard_bytes each (a tensor larger than that
// gets a shard of its own), in the given order, and the index. Each file is written atomically,
// the index last; a stale model.safetensors or index from an earlier write is removed after.
void write_safetensors_folder(const std::filesystem::path& dir, const std::vector<StTensorToWrite>& tensors,
                              StDtype stored, std::int64_t shard_bytes,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace mt
