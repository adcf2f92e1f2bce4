// Machine-readable benchmark rows: every meshbench command takes --json FILE and appends one JSON
// object per table row (JSON lines), the same numbers as the printed table in SI units. `meshtrain
// plan --calibrate` and docs/PERFORMANCE.md's plots read these files.
//
// Every row carries "bench" (coll, overlap, pipeline, scaling, train) and the context it was
// measured in: "ranks", "hosts", "device" ("cpu", "cuda"), "backend" where there is one.
// defines: BenchJson
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mt {

// Appends rows to FILE (created if missing); an empty path writes nothing. Only the caller decides
// which rank writes (rank 0 by convention).
class BenchJson {
 public:
  explicit BenchJson(std::string path) : path_(std::move(path)) {}
  bool enabled() const { return !path_.empty(); }
  // Throws std::runtime_error naming the file when it cannot be written.
  void append(const nlohmann::ordered_json& row) const;

 private:
  std::string path_;
};

}  // namespace mt
