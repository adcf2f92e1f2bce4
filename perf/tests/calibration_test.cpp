// Calibration from meshbench's JSON lines: exact alpha/beta recovered from synthetic ring timings,
// link kinds kept apart, train rows, unknown benches skipped, malformed lines named; cluster files.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "perf/calibration.h"
#include "perf/comm_model.h"
#include "runtime/error.h"

namespace mt::perf {
namespace {

namespace fs = std::filesystem;

class TempFile {
 public:
  explicit TempFile(const std::string& name, const std::string& text)
      : path_(fs::temp_directory_path() / (name + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                           "-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)))) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { fs::remove(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string coll_row(int ranks, int hosts, double bytes, double time_s, const char* op = "allreduce") {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"bench\":\"coll\",\"backend\":\"mpi\",\"device\":\"cpu\",\"op\":\"%s\",\"ranks\":%d,\"hosts\":%d,"
                "\"bytes\":%.17g,\"count\":%.17g,\"dtype\":\"fp32\",\"in_place\":true,\"time_s\":%.17g,"
                "\"algbw_GBps\":1.0,\"busbw_GBps\":1.0}\n",
                op, ranks, hosts, bytes, bytes / 4, time_s);
  return buf;
}

std::string error_of(const std::vector<fs::path>& files) {
  try {
    read_calibration(files);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(Calibration, FitsKnownAlphaAndBetaPerLinkKind) {
  const Link intra{1.7e9, 0.4e-6}, inter{0.9e9, 40e-6};
  std::string text;
  for (int ranks : {2, 4, 8})
    for (double bytes = 8; bytes <= 64e6; bytes *= 8) {
      text += coll_row(ranks, 1, bytes, ring_allreduce_s(ranks, bytes, intra));
      text += coll_row(ranks, 2, bytes, ring_allreduce_s(ranks, bytes, inter));
    }
  text += coll_row(4, 1, 1e6, 123.0, "allgather");  // other collectives are not fitted
  text += "{\"bench\":\"overlap\",\"ranks\":2,\"whatever\":[1,2]}\n\n";
  text += "{\"bench\":\"train\",\"device\":\"cpu\",\"model\":\"small\",\"params\":30000000,\"tokens_per_step\":256,"
          "\"step_s\":0.408,\"model_flops_per_step\":4.6e10,\"gemm_flops_per_s\":1.8e11,\"threads\":2,\"mfu\":0.57}\n";
  const TempFile file("calib", text);
  const CalibrationData data = read_calibration({file.path()});
  EXPECT_EQ(data.intra.size(), 24u);  // 3 rank counts x 8 sizes
  EXPECT_EQ(data.inter.size(), 24u);
  EXPECT_EQ(data.train.size(), 1u);
  EXPECT_EQ(data.skipped, 2);
  Cluster cluster = cluster_preset("cpu-2core");
  cluster.memory_bandwidth = 18e9;
  const Calibration c = calibrate(data, cluster);
  ASSERT_TRUE(c.intra && c.inter);
  EXPECT_NEAR(c.intra->bandwidth, intra.bandwidth, 1e-6 * intra.bandwidth);
  EXPECT_NEAR(c.intra->latency, intra.latency, 1e-6 * intra.latency);
  EXPECT_NEAR(c.inter->bandwidth, inter.bandwidth, 1e-6 * inter.bandwidth);
  EXPECT_NEAR(c.inter->latency, inter.latency, 1e-6 * inter.latency);
  ASSERT_TRUE(c.peak_flops && c.achieved_fraction);
  EXPECT_EQ(*c.peak_flops, 1.8e11);
  // The optimizer (30M x 36 bytes at 18 GB/s = 60 ms) is taken out of the 408 ms step.
  EXPECT_NEAR(*c.achieved_fraction, 0.57 * 0.408 / (0.408 - 0.06), 1e-9);
  apply_calibration(c, cluster);
  EXPECT_NEAR(cluster.intra.bandwidth, 1.7e9, 1e3);
  EXPECT_NE(describe(c).find("intra-node link 1.7 GB/s"), std::string::npos) << describe(c);
}

TEST(Calibration, MalformedLinesAreErrorsNamingTheLine) {
  const TempFile bad_json("bad", coll_row(2, 1, 8, 1e-6) + coll_row(2, 1, 64, 2e-6) + "{\"bench\":\"coll\",\"op\"\n");
  const std::string e1 = error_of({bad_json.path()});
  EXPECT_NE(e1.find(bad_json.path().string() + ":3: not a JSON line"), std::string::npos) << e1;

  const TempFile missing("missing", coll_row(2, 1, 8, 1e-6) + "{\"bench\":\"coll\",\"op\":\"allreduce\",\"ranks\":2,"
                                                               "\"hosts\":1,\"bytes\":64}\n");
  const std::string e2 = error_of({missing.path()});
  EXPECT_NE(e2.find(missing.path().string() + ":2: coll row lacks the number \"time_s\""), std::string::npos) << e2;

  const TempFile no_bench("nobench", "{\"op\":\"allreduce\"}\n");
  EXPECT_NE(error_of({no_bench.path()}).find(":1: the row has no \"bench\" name"), std::string::npos);

  const TempFile array("array", "[1, 2]\n");
  EXPECT_NE(error_of({array.path()}).find(":1: not a JSON object"), std::string::npos);

  EXPECT_NE(error_of({"/nonexistent/calib.jsonl"}).find("cannot read calibration file"), std::string::npos);
}

TEST(Calibration, OneSizeIsNotEnoughToFit) {
  EXPECT_THROW(fit_link({{2, 1e6, 1e-3}}), Error);
  EXPECT_THROW(fit_link({{2, 1e6, 1e-3}, {2, 1e6, 1.1e-3}}), Error);
}

TEST(ClusterFile, PresetThenOverridesAndErrorsNameTheLine) {
  const TempFile ini("cluster", "# two DGX A100 nodes, slower network\npreset = dgx-a100\nnodes = 2\n"
                                "inter_bandwidth = 12.5e9   # one HDR per two GPUs\n");
  const Cluster c = read_cluster_file(ini.path());
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.devices_per_node, 8);
  EXPECT_EQ(c.peak_flops, 312e12);
  EXPECT_EQ(c.inter.bandwidth, 12.5e9);

  const TempFile bad("badcluster", "nodes = 2\nlinks = 4\n");
  try {
    read_cluster_file(bad.path());
    FAIL() << "an unknown key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(bad.path().string() + ":2: unknown cluster field 'links'"), std::string::npos)
        << e.message();
  }
  const TempFile number("badnumber", "peak_flops = lots\n");
  EXPECT_THROW(read_cluster_file(number.path()), Error);
}

TEST(ClusterFile, CpuClusterSharesTheCores) {
  const Cluster c = cpu_cluster(8);
  EXPECT_EQ(c.devices(), 8);
  EXPECT_TRUE(c.shared_cores);
  EXPECT_EQ(c.concurrent_ranks(), 2);
  EXPECT_EQ(cpu_cluster(1).concurrent_ranks(), 1);
}

// Found reading the readers while writing fuzz_plan_files: numbers no machine has, ints cast from
// doubles beyond int, device counts beyond int, and meshbench's own rows, which carry no "time_s".
TEST(ClusterFile, NumbersBeyondIntOrInfinityAreErrorsNamingTheLine) {
  for (const char* text : {"nodes = 1e10\n", "cores_per_node = -3e9\n", "peak_flops = inf\n", "memory_bytes = 1e999\n",
                           "intra_latency = nan\n", "nodes = 65536\ndevices_per_node = 65536\n"}) {
    const TempFile ini("edge", text);
    try {
      const Cluster c = read_cluster_file(ini.path());
      FAIL() << "accepted " << text << " as " << describe(c);
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(ini.path().string()), std::string::npos) << e.message();
    }
  }
  Cluster c;
  c.nodes = 1 << 16;
  c.devices_per_node = 1 << 16;
  EXPECT_THROW(c.validate(), Error);
}

TEST(Calibration, NumbersBeyondIntOrInfinityAreErrorsNamingTheLine) {
  const TempFile huge("huge", "{\"bench\":\"coll\",\"op\":\"allreduce\",\"ranks\":1e300,\"hosts\":1,\"bytes\":8,"
                              "\"time_s\":1}\n");
  EXPECT_NE(error_of({huge.path()}).find(":1: coll row: \"ranks\" must be a whole number in [1, 2147483647]"),
            std::string::npos) << error_of({huge.path()});
  const TempFile inf("inf", coll_row(2, 1, 8, 1e-6) + "{\"bench\":\"train\",\"gemm_flops_per_s\":1e999,\"mfu\":0.5,"
                                                       "\"step_s\":1}\n");
  EXPECT_NE(error_of({inf.path()}).find(inf.path().string() + ":2: not a JSON line"), std::string::npos)
      << error_of({inf.path()});
}

TEST(Calibration, ReadsTheRowsMeshbenchWrites) {
  // bench/coll_bench.cpp's fields: a time per placement, null for one that did not run.
  const Link link{1.7e9, 0.4e-6};
  const auto row = [](double bytes, double out_of_place, const std::string& in_place) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "{\"bench\":\"coll\",\"op\":\"allreduce\",\"ranks\":2,\"hosts\":1,\"bytes\":%.17g,"
                  "\"out_of_place_time_s\":%.17g,\"in_place_time_s\":%s,\"raw_time_s\":1e-9}\n",
                  bytes, out_of_place, in_place.c_str());
    return std::string(buf);
  };
  const double t8 = ring_allreduce_s(2, 8, link), t4k = ring_allreduce_s(2, 4096, link);
  char fast[64];
  std::snprintf(fast, sizeof fast, "%.17g", t8);
  const TempFile file("meshbench", row(8, 2 * t8, fast) + row(4096, t4k, "null"));
  const CalibrationData data = read_calibration({file.path()});
  ASSERT_EQ(data.intra.size(), 2u);
  EXPECT_EQ(data.intra[0].time_s, t8);  // the faster placement
  EXPECT_EQ(data.intra[1].time_s, t4k);  // the one that ran
  const Link fitted = fit_link(data.intra);
  EXPECT_NEAR(fitted.bandwidth, link.bandwidth, 1e-6 * link.bandwidth);

  const TempFile none("none", "{\"bench\":\"coll\",\"op\":\"allreduce\",\"ranks\":2,\"hosts\":1,\"bytes\":8,"
                              "\"out_of_place_time_s\":null,\"in_place_time_s\":null}\n");
  EXPECT_NE(error_of({none.path()}).find(":1: coll row has no time: neither placement ran"), std::string::npos);
}

TEST(Calibration, AFitThatFailsNamesTheFiles) {
  const TempFile one("onesize", coll_row(2, 1, 1e6, 1e-3) + coll_row(2, 1, 1e6, 1.1e-3));
  try {
    calibrate(read_calibration({one.path()}), cluster_preset("cpu-2core"));
    FAIL() << "one size was fitted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("calibration " + one.path().string() + ": intra-node link: fitting a link needs"),
              std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace mt::perf
