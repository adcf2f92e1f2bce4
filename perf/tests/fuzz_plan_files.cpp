// libFuzzer target: the two files `meshtrain plan` reads, as its read_cluster reads them: a cluster
// file (read_cluster_file: `key = value` lines, `preset = NAME`) and a calibration file of meshbench
// JSON lines (read_calibration, calibrate, apply_calibration, validate), then a layout search of a
// tiny model on the result, so the cost model meets whatever numbers the files let through. The
// input holds both files, split by kFuzzSplit (tests/fuzz_support.h); a cluster file that fails
// leaves the cpu-2core preset for the calibration. A bad file must end in mt::Error naming it.
// Seeds (written by -write_seeds): every preset written out field by field (cluster_field_names),
// preset-based files with overrides, and calibration rows in the shape `meshbench coll --json` and
// `meshbench train --json` write them (bench/coll_bench.cpp, bench/train_bench.cpp).
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <nlohmann/json.hpp>  // defines: nlohmann::ordered_json

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "perf/calibration.h"    // defines: read_calibration, calibrate, apply_calibration
#include "perf/cluster.h"        // defines: read_cluster_file, cluster_preset, cluster_field_names
#include "perf/comm_model.h"     // defines: ring_allreduce_s
#include "perf/layout_search.h"  // defines: search_layouts
#include "runtime/error.h"       // defines: Error
#include "tests/fuzz_support.h"

namespace {
namespace fs = std::filesystem;
using namespace mt::perf;

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// One field of `c` as the cluster file spells it.
std::string field_text(const Cluster& c, const std::string& key) {
  if (key == "name") return c.name;
  if (key == "nodes") return std::to_string(c.nodes);
  if (key == "devices_per_node") return std::to_string(c.devices_per_node);
  if (key == "peak_flops") return number(c.peak_flops);
  if (key == "peak_dtype") return c.peak_dtype;
  if (key == "achieved_fraction") return number(c.achieved_fraction);
  if (key == "memory_bytes") return number(c.memory_bytes);
  if (key == "memory_reserved") return number(c.memory_reserved);
  if (key == "memory_bandwidth") return number(c.memory_bandwidth);
  if (key == "intra_bandwidth") return number(c.intra.bandwidth);
  if (key == "intra_latency") return number(c.intra.latency);
  if (key == "inter_bandwidth") return number(c.inter.bandwidth);
  if (key == "inter_latency") return number(c.inter.latency);
  if (key == "shared_cores") return c.shared_cores ? "true" : "false";
  if (key == "cores_per_node") return std::to_string(c.cores_per_node);
  MT_FAIL("fuzz_plan_files: no text for cluster field ", key);
}

std::string cluster_text(const Cluster& c) {
  std::string text = "# cluster " + c.name + ", every field\n";
  for (const std::string& key : cluster_field_names()) text += key + " = " + field_text(c, key) + "\n";
  return text;
}

// A `meshbench coll --json` row (the fields coll_bench writes), times from a known link.
std::string coll_row(const char* op, int ranks, int hosts, double bytes, const Link& link) {
  const double t = ring_allreduce_s(ranks, bytes, link), factor = 2.0 * (ranks - 1) / ranks;
  nlohmann::ordered_json j;
  j["bench"] = "coll";
  j["op"] = op;
  j["ranks"] = ranks;
  j["hosts"] = hosts;
  j["device"] = "cpu";
  j["backend"] = "mpi";
  j["dtype"] = "fp32";
  j["bytes"] = bytes;
  j["count"] = bytes / 4;
  j["bus_factor"] = factor;
  j["iters"] = 20;
  j["warmup"] = 5;
  j["in_flight"] = 1;
  j["rounds"] = 1;
  j["out_of_place_time_s"] = t;
  j["out_of_place_algbw_bytes_per_s"] = bytes / t;
  j["out_of_place_busbw_bytes_per_s"] = bytes / t * factor;
  j["in_place_time_s"] = nullptr;  // a placement that did not run
  j["in_place_algbw_bytes_per_s"] = nullptr;
  j["in_place_busbw_bytes_per_s"] = nullptr;
  j["raw"] = "mpi";
  j["raw_placement"] = "out_of_place";
  j["raw_time_s"] = t * 0.98;
  j["ratio"] = 0.98;
  return j.dump() + "\n";
}

// A `meshbench train --json` row.
std::string train_row() {
  nlohmann::ordered_json row;
  row["bench"] = "train";
  row["device"] = "cpu";
  row["dtype"] = "fp32";
  row["model"] = "tiny";
  row["params"] = 1500000;
  row["tokens_per_step"] = 1024.0;
  row["step_s"] = 0.21;
  row["forward_s"] = 0.06;
  row["backward_s"] = 0.12;
  row["optimizer_s"] = 0.03;
  row["model_flops_per_step"] = 1.1e10;
  row["gemm_flops_per_s"] = 1.5e11;
  row["threads"] = 2;
  row["mfu"] = 0.35;
  return row.dump() + "\n";
}

void write_seeds(const fs::path& dir) {
  std::string calibration;
  for (int ranks : {2, 4})
    for (double bytes = 8; bytes <= 8e6; bytes *= 32) {
      calibration += coll_row("allreduce", ranks, 1, bytes, {1.7e9, 0.4e-6});
      calibration += coll_row("allreduce", ranks, 2, bytes, {0.86e9, 50e-6});
    }
  calibration += coll_row("allgather", 2, 1, 4096, {1.7e9, 0.4e-6});
  calibration += train_row();
  calibration += "{\"bench\":\"overlap\",\"ranks\":2,\"hosts\":1,\"device\":\"cpu\"}\n";
  const std::vector<std::string> clusters = {
      "preset = dgx-h100\nnodes = 2  # two of them\nmemory_reserved = 4e9\n",
      "preset = cpu-hosts\ninter_bandwidth = 0.12e9\nshared_cores = 1\n",
      "nodes = 1\ndevices_per_node = 2\npeak_flops = 150e9\npeak_dtype = fp32\n"};
  int n = 0;
  for (const std::string& name : cluster_preset_names())
    mt::fuzz::write_seed(dir, "preset_" + name, mt::fuzz::join_input({cluster_text(cluster_preset(name)), calibration}));
  for (const std::string& text : clusters)
    mt::fuzz::write_seed(dir, "cluster_" + std::to_string(n++), mt::fuzz::join_input({text, calibration}));
  mt::fuzz::write_seed(dir, "train_only", mt::fuzz::join_input({clusters[0], train_row()}));
}

bool names(const mt::Error& e, const fs::path& file) {
  return std::string_view(e.what()).find(file.string()) != std::string_view::npos;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mt::fuzz::handle_write_seeds(argc, argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string_view> parts =
      mt::fuzz::split_input(std::string_view(reinterpret_cast<const char*>(data), size), 2);
  const fs::path cluster_file = mt::fuzz::fuzz_dir() / "cluster.ini";
  const fs::path calibration_file = mt::fuzz::fuzz_dir() / "calibration.jsonl";
  mt::fuzz::write_input(cluster_file, parts[0]);
  mt::fuzz::write_input(calibration_file, parts[1]);

  Cluster cluster = cluster_preset("cpu-2core");
  try {
    cluster = read_cluster_file(cluster_file);
    cluster.validate();  // what it accepted is valid
  } catch (const mt::Error& e) {
    FUZZ_CHECK(names(e, cluster_file));
  }
  try {
    const Calibration calibration = calibrate(read_calibration({calibration_file}), cluster);
    apply_calibration(calibration, cluster);
    describe(calibration);
    cluster.validate();  // a fit from accepted rows leaves the cluster valid
  } catch (const mt::Error& e) {
    FUZZ_CHECK(names(e, calibration_file));
  }
  FUZZ_CHECK(cluster.devices() >= 1);
  describe(cluster);
  // The search on what came through: a tiny model, a batch every small layout divides.
  if (cluster.devices() <= 16) {
    ModelShape model;
    model.layers = 4;
    model.heads = 4;
    model.channels = 64;
    model.max_seq_len = 64;
    model.vocab_size = 256;
    TrainingShape training;
    training.seq_len = 64;
    training.global_batch = 16;
    try {
      const SearchResult result = search_layouts(model, training, cluster, SearchOptions{});
      for (const Prediction& p : result.plans) FUZZ_CHECK(p.step_s >= 0);
    } catch (const mt::Error&) {
    }
  }
  return 0;
}
