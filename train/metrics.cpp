#include "train/metrics.h"

#include <cerrno>
#include <cmath>
#include <nlohmann/json.hpp>
#include <system_error>

#include "runtime/error.h"  // defines: EnvironmentError, errno_message

namespace mt {

MetricsWriter::MetricsWriter(const std::filesystem::path& path, bool append) : path_(path) {
  if (path.has_parent_path()) {
    // The error_code overload: a parent that cannot be made is an error naming the file, not a
    // std::filesystem_error escaping as an unexplained abort.
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec)
      MT_FAIL_AS(EnvironmentError, "cannot write metrics file ", path.string(), ": cannot create ",
                 path.parent_path().string(), ": ", ec.message());
  }
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) fail(errno);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write_json(const std::string& json_object) {
  if (std::fprintf(file_, "%s\n", json_object.c_str()) < 0 || std::fflush(file_) != 0) fail(errno);
}

// A full disk or a failing one: the system's doing, not a bug (no MT_CHECK).
void MetricsWriter::fail(int err) const {
  MT_FAIL_AS(EnvironmentError, "cannot write metrics file ", path_.string(), ": ", errno_message(err));
}

void MetricsWriter::write(const StepRecord& record) { write_json(to_json(record)); }

std::string to_json(const StepRecord& r) {
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  if (r.val_loss) j["val_loss"] = *r.val_loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["tokens_per_s"] = r.tokens_per_s;
  j["step_ms"] = r.step_ms;
  j["mfu"] = r.mfu;
  return j.dump();
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%lds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

std::string format_count(double n) {
  char buf[32];
  if (n >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  } else if (n >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  } else if (n >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", n);
  }
  return buf;
}

std::string format_progress(const StepRecord& r, int total_steps, double seconds_left) {
  const int width = static_cast<int>(std::to_string(total_steps).size());
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "step %*d/%d | loss %.4f", width, r.step, total_steps, r.loss);
  std::string line(buf, static_cast<std::size_t>(n));
  if (r.val_loss) {
    n = std::snprintf(buf, sizeof buf, " | val %.4f", *r.val_loss);
    line.append(buf, static_cast<std::size_t>(n));
  }
  n = std::snprintf(buf, sizeof buf, " | lr %.2e | norm %.3f | %s tok/s", r.lr, r.grad_norm,
                    format_count(r.tokens_per_s).c_str());
  line.append(buf, static_cast<std::size_t>(n));
  if (r.mfu > 0) {
    n = std::snprintf(buf, sizeof buf, " | mfu %.1f%%", 100.0 * r.mfu);
    line.append(buf, static_cast<std::size_t>(n));
    // Above the ceiling, the ceiling is wrong (a start-up sgemm slowed by other load, or a low
    // --peak-tflops), not the run: say so on the line that shows it.
    if (r.mfu > 1.0) line += " (>100%: peak mis-measured, set --peak-tflops)";
  }
  n = std::snprintf(buf, sizeof buf, " | %.0f ms | ETA %s", r.step_ms, format_duration(seconds_left).c_str());
  line.append(buf, static_cast<std::size_t>(n));
  return line;
}

}  // namespace mt
