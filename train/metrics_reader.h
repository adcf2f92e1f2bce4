// Reading back the metrics files of `meshtrain train --metrics`: JSON lines holding run headers
// ({"run": {...}}, one per start or resume) and step records ({"step": N, "loss": ..}). A resumed
// run repeats the steps after its last checkpoint, so for each step the last record in the file wins.
// defines: MetricsPoint, RunMetrics, read_metrics
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mt {

// One step's record; a field absent from the line (or null: JSON's NaN) stays empty.
struct MetricsPoint {
  std::optional<double> loss, val_loss, lr, grad_norm, tokens_per_s, step_ms, mfu;
  int since_start = 0;  // 0 for the first step record after a run header (a start or a resume), 1 next...
};

struct RunMetrics {
  std::filesystem::path path;
  int headers = 0;
  std::vector<std::string> layouts;             // "dp2 tp2 pp2" from the headers, distinct, in file order
  std::map<std::int64_t, MetricsPoint> steps;   // step -> its last record in the file
};

// Lines without "step" or "run" (e.g. {"timing": ...}) and blank lines are skipped. Throws
// UsageError naming the file and line for an unreadable file, a line that is not a JSON object,
// a step that is not an int64 integer, a field that is not a number, and a file without step records.
RunMetrics read_metrics(const std::filesystem::path& path);

}  // namespace mt
