// What a run reports: StepRecord as a JSON object (fields, order, val_loss only when evaluated,
// values that parse back exactly), the progress line and durations as documented, and
// MetricsWriter writing (and flushing) one line per record that parses back with nlohmann::json.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/scratch_dir.h"          // defines: ScratchDir
#include "tests/test_helpers.h"  // defines: error_of, contains
#include "train/metrics.h"       // defines: StepRecord, MetricsWriter, to_json, format_progress, format_duration

namespace mt {
namespace {

using testing::contains;
using testing::error_of;
using testing::ScratchDir;

std::vector<std::string> read_lines(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

StepRecord sample_record() {
  StepRecord r;
  r.step = 120;
  r.loss = 3.21449;
  r.val_loss = 3.30117;
  r.lr = 5.8e-4;
  r.grad_norm = 0.9104;
  r.tokens_per_s = 12345.6;
  r.step_ms = 245.2;
  r.mfu = 0.5213;
  return r;
}

std::vector<std::string> keys_of(const nlohmann::ordered_json& j) {
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  return keys;
}

TEST(Metrics, ToJsonHasEveryFieldInOrderAndParsesBackExactly) {
  const StepRecord r = sample_record();
  const auto j = nlohmann::ordered_json::parse(to_json(r));
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s",
                                                   "step_ms", "mfu"}));
  EXPECT_EQ(j["step"].get<int>(), 120);
  EXPECT_EQ(j["loss"].get<double>(), r.loss);
  EXPECT_EQ(j["val_loss"].get<double>(), *r.val_loss);
  EXPECT_EQ(j["lr"].get<double>(), r.lr);
  EXPECT_EQ(j["grad_norm"].get<double>(), r.grad_norm);
  EXPECT_EQ(j["tokens_per_s"].get<double>(), r.tokens_per_s);
  EXPECT_EQ(j["step_ms"].get<double>(), r.step_ms);
  EXPECT_EQ(j["mfu"].get<double>(), r.mfu);
  EXPECT_EQ(to_json(r).find('\n'), std::string::npos) << "one line";
}

TEST(Metrics, ToJsonLeavesOutValLossWhenNotEvaluated) {
  StepRecord r = sample_record();
  r.val_loss.reset();
  const auto j = nlohmann::ordered_json::parse(to_json(r));
  EXPECT_FALSE(j.contains("val_loss"));
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "mfu"}));
}

TEST(Metrics, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(59.6), "1m00s") << "rounded before choosing the unit";
  EXPECT_EQ(format_duration(215), "3m35s");
  EXPECT_EQ(format_duration(3599), "59m59s");
  EXPECT_EQ(format_duration(3600), "1h00m");
  EXPECT_EQ(format_duration(7500), "2h05m");
  EXPECT_EQ(format_duration(100 * 3600 + 59 * 60), "100h59m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::quiet_NaN()), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "?");
}

TEST(Metrics, FormatProgressAsDocumented) {
  EXPECT_EQ(format_progress(sample_record(), 1000, 215),
            "step  120/1000 | loss 3.2145 | val 3.3012 | lr 5.80e-04 | norm 0.910 | 12.3k tok/s | mfu 52.1% | "
            "245 ms | ETA 3m35s");
  StepRecord r = sample_record();
  r.val_loss.reset();
  r.mfu = 0;
  r.step = 7;
  r.tokens_per_s = 2.5e6;
  EXPECT_EQ(format_progress(r, 20, 45), "step  7/20 | loss 3.2145 | lr 5.80e-04 | norm 0.910 | 2.50M tok/s | "
                                        "245 ms | ETA 45s");
  r.tokens_per_s = 950;
  EXPECT_TRUE(contains(format_progress(r, 20, 0), "| 950 tok/s |")) << format_progress(r, 20, 0);
  // Over 100% the ceiling was mis-measured (a start-up sgemm slowed by a load burst): said on the line.
  r.mfu = 3.347;
  EXPECT_TRUE(contains(format_progress(r, 20, 0), "| mfu 334.7% (>100%: peak mis-measured, set --peak-tflops) | 245 ms"))
      << format_progress(r, 20, 0);
  r.mfu = 1.0;
  EXPECT_TRUE(contains(format_progress(r, 20, 0), "| mfu 100.0% | 245 ms")) << format_progress(r, 20, 0);
  EXPECT_TRUE(contains(format_progress(r, 20, -1), "ETA ?"));
}

TEST(Metrics, WriterWritesOneFlushedLinePerRecord) {
  ScratchDir dir;
  const std::filesystem::path file = dir.path() / "sub" / "dir" / "metrics.jsonl";  // parents made
  {
    MetricsWriter w(file);
    w.write_json(R"({"run":{"model":"tiny"}})");
    for (int s = 1; s <= 3; ++s) {
      StepRecord r = sample_record();
      r.step = s;
      r.loss = 5.0 - s;
      if (s != 3) r.val_loss.reset();
      w.write(r);
      // Flushed as written: readable while the writer is still open.
      EXPECT_EQ(read_lines(file).size(), static_cast<std::size_t>(s) + 1);
    }
  }
  const std::vector<std::string> lines = read_lines(file);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["run"]["model"], "tiny");
  for (int s = 1; s <= 3; ++s) {
    const auto j = nlohmann::json::parse(lines[static_cast<std::size_t>(s)]);
    EXPECT_EQ(j["step"].get<int>(), s);
    EXPECT_EQ(j["loss"].get<double>(), 5.0 - s);
    EXPECT_EQ(j.contains("val_loss"), s == 3);
    for (const char* key : {"lr", "grad_norm", "tokens_per_s", "step_ms", "mfu"}) EXPECT_TRUE(j.contains(key)) << key;
  }
  // A new writer truncates.
  { MetricsWriter w(file); }
  EXPECT_TRUE(read_lines(file).empty());
}

TEST(Metrics, WriterErrorsNameTheFile) {
  ScratchDir dir;
  const std::string e = error_of([&] { MetricsWriter w(dir.path()); });  // a directory
  EXPECT_TRUE(contains(e, "cannot write metrics file " + dir.path().string())) << e;
  std::ofstream(dir.path() / "plain") << "x";
  const std::filesystem::path under_file = dir.path() / "plain" / "metrics.jsonl";
  const std::string e2 = error_of([&] { MetricsWriter w(under_file); });  // parent is a regular file
  EXPECT_TRUE(contains(e2, "metrics.jsonl")) << e2;
}

// A full disk is the system's refusal, not a failed check of ours: an EnvironmentError with the
// file and the reason alone. /dev/full opens, and every write to it fails with ENOSPC.
TEST(Metrics, AFullDiskIsAnEnvironmentErrorNamingTheFile) {
  MetricsWriter w("/dev/full");
  StepRecord r;
  r.step = 1;
  EXPECT_EQ(error_of<EnvironmentError>([&] { w.write(r); }),
            "cannot write metrics file /dev/full: No space left on device");
}

}  // namespace
}  // namespace mt
