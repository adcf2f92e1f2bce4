#include "train/metrics_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string_view>
#include <nlohmann/json.hpp>  // defines: nlohmann::json, parse, parse_error

#include "runtime/error.h"  // defines: UsageError

namespace mt {
namespace {

using nlohmann::json;

// "FILE:LINE: " for messages.
std::string where(const std::filesystem::path& path, std::int64_t line) {
  return path.string() + ":" + std::to_string(line) + ": ";
}

std::optional<double> number_field(const json& record, const char* key, const std::string& at) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) throw UsageError(at + "\"" + key + "\" is not a number: " + it->dump());
  return it->get<double>();  // finite: the parser rejects 1e999
}

// "dp2 tp2 pp2" from a header's "layout" object ("dp2 tp2 cp4 pp2" with cp > 1: the headers before
// cp have none); empty when it has none.
std::string describe_layout(const json& run) {
  const auto layout = run.find("layout");
  if (layout == run.end() || !layout->is_object()) return "";
  std::string text;
  for (const char* axis : {"dp", "tp", "cp", "pp"}) {
    const auto size = layout->find(axis);
    if (size == layout->end() || !size->is_number_integer()) continue;
    if (std::string_view(axis) == "cp" && size->get<std::int64_t>() == 1) continue;
    if (!text.empty()) text += ' ';
    text += axis;
    text += std::to_string(size->get<std::int64_t>());
  }
  return text;
}

}  // namespace

RunMetrics read_metrics(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UsageError("metrics file " + path.string() + " is a directory");
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read metrics file " + path.string() + ": " + std::strerror(errno));
  RunMetrics run;
  run.path = path;
  int since_start = 0;
  std::string text;
  for (std::int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = where(path, line);
    json record;
    try {
      record = json::parse(text);
    } catch (const json::parse_error& e) {
      // e.what() reads "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ...".
      const std::string what = e.what();
      const std::size_t reason = what.find("syntax error");
      throw UsageError(at + "not a JSON line (column " + std::to_string(e.byte) + ": " +
                       (reason == std::string::npos ? what : what.substr(reason)) + ")");
    } catch (const json::exception& e) {
      // out_of_range.406 "number overflow parsing '1e999'", not a parse_error: it escaped as an
      // nlohmann exception (found with train/tests/fuzz_metrics_file.cpp).
      const std::string what = e.what();
      const std::size_t text_at = what.find("] ");
      throw UsageError(at + "not a JSON line (" + (text_at == std::string::npos ? what : what.substr(text_at + 2)) + ")");
    }
    if (!record.is_object()) throw UsageError(at + "not a JSON object: " + text.substr(0, 80));
    if (const auto header = record.find("run"); header != record.end()) {
      if (!header->is_object()) throw UsageError(at + "\"run\" is not an object");
      ++run.headers;
      since_start = 0;
      const std::string layout = describe_layout(*header);
      if (!layout.empty() && std::find(run.layouts.begin(), run.layouts.end(), layout) == run.layouts.end())
        run.layouts.push_back(layout);
    }
    const auto step = record.find("step");
    if (step == record.end()) continue;
    // An unsigned JSON integer beyond int64 would wrap to a negative step.
    if (!step->is_number_integer() || (step->is_number_unsigned() && step->get<std::uint64_t>() > INT64_MAX))
      throw UsageError(at + "\"step\" is not an integer: " + step->dump());
    MetricsPoint point;
    point.loss = number_field(record, "loss", at);
    point.val_loss = number_field(record, "val_loss", at);
    point.lr = number_field(record, "lr", at);
    point.grad_norm = number_field(record, "grad_norm", at);
    point.tokens_per_s = number_field(record, "tokens_per_s", at);
    point.step_ms = number_field(record, "step_ms", at);
    point.mfu = number_field(record, "mfu", at);
    point.since_start = since_start++;
    run.steps[step->get<std::int64_t>()] = point;  // a later record of the same step replaces it
  }
  if (in.bad()) throw UsageError("cannot read metrics file " + path.string() + ": " + std::strerror(errno));
  if (run.steps.empty())
    throw UsageError("metrics file " + path.string() +
                     " has no step records (expected lines like {\"step\": 1, \"loss\": ...})");
  return run;
}

}  // namespace mt
