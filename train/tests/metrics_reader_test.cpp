// read_metrics (the metrics files `meshtrain plot` reads): what a MetricsWriter file reads back as,
// and bad lines (among them what train/tests/fuzz_metrics_file.cpp found), each rejected with a
// UsageError naming the file and line.
#include <gtest/gtest.h>

#include <unistd.h>  // defines: getpid

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/error.h"  // defines: UsageError
#include "train/metrics_reader.h"  // defines: read_metrics
#include "train/metrics.h"          // defines: MetricsWriter, StepRecord

namespace mt {
namespace {

namespace fs = std::filesystem;

class MetricsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("metrics_reader_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& text) {
    const fs::path file = dir_ / "metrics.jsonl";
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
    return file;
  }
  // The UsageError's text for `text`, or "" when it reads.
  std::string error_of(const std::string& text) {
    const fs::path file = write(text);
    try {
      read_metrics(file);
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.message()).find(file.string()), std::string::npos) << e.message();
      return e.message();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(MetricsFile, ReadsWhatMetricsWriterWrote) {
  const fs::path file = dir_ / "written.jsonl";
  {
    MetricsWriter writer(file);
    writer.write_json(R"({"run":{"layout":{"dp":2,"tp":1,"pp":1}}})");
    for (int step = 1; step <= 3; ++step) {
      StepRecord r;
      r.step = step;
      r.loss = 4.0 - step;
      if (step == 2) r.val_loss = 3.5;
      writer.write(r);
    }
    writer.write_json(R"({"timing":{"step":3,"steps":3,"ranks":[]}})");
  }
  {
    MetricsWriter writer(file, /*append=*/true);  // a resume from step 2
    writer.write_json(R"({"run":{"layout":{"dp":1,"tp":2,"pp":1}}})");
    StepRecord r;
    r.step = 3;
    r.loss = 0.5;
    writer.write(r);
  }
  const RunMetrics run = read_metrics(file);
  EXPECT_EQ(run.headers, 2);
  EXPECT_EQ(run.layouts, (std::vector<std::string>{"dp2 tp1 pp1", "dp1 tp2 pp1"}));
  ASSERT_EQ(run.steps.size(), 3u);
  EXPECT_EQ(*run.steps.at(1).loss, 3.0);
  EXPECT_EQ(*run.steps.at(2).val_loss, 3.5);
  EXPECT_FALSE(run.steps.at(1).val_loss.has_value());
  EXPECT_EQ(*run.steps.at(3).loss, 0.5);  // the resumed run's record wins
  EXPECT_EQ(run.steps.at(3).since_start, 0);
}

TEST_F(MetricsFile, BadLinesNameFileAndLine) {
  EXPECT_NE(error_of("{\"step\":1,\"loss\":1}\n{oops\n").find("metrics.jsonl:2: not a JSON line"), std::string::npos);
  EXPECT_NE(error_of("[1,2]\n").find(":1: not a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{\"step\":1.5}\n").find("\"step\" is not an integer"), std::string::npos);
  EXPECT_NE(error_of("{\"step\":1,\"loss\":\"x\"}\n").find("\"loss\" is not a number"), std::string::npos);
  EXPECT_NE(error_of("{\"timing\":{}}\n").find("has no step records"), std::string::npos);
}

// What fuzz_metrics_file found: a number beyond double (1e999) made the JSON parser throw its
// out_of_range, which escaped read_metrics. And a step beyond int64, which wrapped to a negative one.
TEST_F(MetricsFile, NumbersBeyondDoubleOrInt64AreErrors) {
  EXPECT_NE(error_of("{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":0.0001999999999e999998}\n")
                .find("metrics.jsonl:2: not a JSON line (number overflow parsing"),
            std::string::npos);
  EXPECT_NE(error_of("{\"step\":18446744073709551615,\"loss\":1}\n").find(":1: \"step\" is not an integer"),
            std::string::npos);
  const RunMetrics run = read_metrics(write("{\"step\":9223372036854775807,\"loss\":null}\n"));
  ASSERT_EQ(run.steps.size(), 1u);
  EXPECT_EQ(run.steps.begin()->first, INT64_MAX);
  EXPECT_FALSE(run.steps.begin()->second.loss.has_value());
}

}  // namespace
}  // namespace mt
