#include "perf/cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "runtime/error.h"

namespace mt::perf {

double Cluster::concurrent_ranks() const {
  if (!shared_cores || cores_per_node <= 0) return devices_per_node;
  return std::min<double>(devices_per_node, cores_per_node);
}

void Cluster::validate() const {
  MT_REQUIRE(nodes >= 1, "cluster ", name, ": nodes must be at least 1, got ", nodes);
  MT_REQUIRE(devices_per_node >= 1, "cluster ", name, ": devices_per_node must be at least 1, got ", devices_per_node);
  // devices() is an int product: nodes = devices_per_node = 65536 would overflow it.
  MT_REQUIRE(std::int64_t{nodes} * devices_per_node <= kMaxDevices, "cluster ", name, ": ", nodes, " nodes x ",
             devices_per_node, " devices is more than ", kMaxDevices, " devices");
  MT_REQUIRE(peak_flops > 0, "cluster ", name, ": peak_flops must be positive, got ", peak_flops);
  MT_REQUIRE(achieved_fraction > 0 && achieved_fraction <= 1, "cluster ", name,
             ": achieved_fraction must be in (0, 1], got ", achieved_fraction);
  MT_REQUIRE(memory_bytes > 0 && memory_reserved >= 0 && memory_reserved < memory_bytes, "cluster ", name,
             ": need 0 <= memory_reserved (", memory_reserved, ") < memory_bytes (", memory_bytes, ")");
  MT_REQUIRE(memory_bandwidth > 0, "cluster ", name, ": memory_bandwidth must be positive, got ", memory_bandwidth);
  MT_REQUIRE(intra.bandwidth > 0 && inter.bandwidth > 0, "cluster ", name, ": link bandwidths must be positive");
  MT_REQUIRE(intra.latency >= 0 && inter.latency >= 0, "cluster ", name, ": link latencies must be >= 0");
  MT_REQUIRE(!shared_cores || cores_per_node >= 1, "cluster ", name, ": shared_cores needs cores_per_node >= 1");
  MT_REQUIRE(peak_dtype == "fp32" || peak_dtype == "bf16", "cluster ", name, ": peak_dtype must be fp32 or bf16, got '",
             peak_dtype, "'");
}

namespace {

// DGX A100 (8x A100-SXM4-80GB per node, NVSwitch, 8x HDR InfiniBand).
//  - 312 TFLOP/s dense bf16 tensor core: NVIDIA A100 datasheet (also calculon-ai/calculon
//    systems/a100_80g.json, "float16": 312).
//  - 80 GB HBM2e at 2,039 GB/s: A100 80GB SXM datasheet; deviceQuery reports 81,251 MiB.
//  - NVLink3 is 600 GB/s bidirectional, 300 GB/s per direction per GPU; nccl-tests all_reduce_perf
//    on 8x A100-80GB reaches busbw ~200-230 GB/s at large sizes (NVIDIA/nccl-tests issue #149
//    reports ~200 GB/s, #178 208 GB/s): 230 GB/s is the well-tuned end.
//  - one 200 Gb/s HDR NIC per GPU = 25 GB/s; nccl-tests across nodes with 4 HCAs per node reach
//    85-96 GB/s busbw (NVIDIA/nccl-tests issue #119), ~23 GB/s per NIC.
//  - latencies: a few microseconds per ring step on NVLink, ~10 us across InfiniBand (calculon's
//    a100_80g.json uses 10 us and 20 us per collective).
Cluster dgx_a100() {
  Cluster c;
  c.name = "dgx-a100";
  c.nodes = 1;
  c.devices_per_node = 8;
  c.peak_flops = 312e12;
  c.peak_dtype = "bf16";
  c.achieved_fraction = 0.55;
  c.memory_bytes = 81251.0 * 1024 * 1024;
  c.memory_reserved = 2.0 * 1024 * 1024 * 1024;  // CUDA context, cuBLAS/NCCL workspaces, fragmentation
  c.memory_bandwidth = 2039e9;
  c.intra = {230e9, 3e-6};
  c.inter = {23e9, 8e-6};
  return c;
}

// DGX H100 (8x H100-SXM5-80GB per node, NVLink4 through NVSwitch, 8x 400 Gb/s NDR).
//  - 989 TFLOP/s dense bf16 (1,979 with sparsity), 80 GB HBM3 at 3.35 TB/s: NVIDIA H100 SXM
//    datasheet (glennklockwood.com/garden/processors/h100 tabulates the same).
//  - NVLink4: 900 GB/s bidirectional, 450 GB/s per direction per GPU; nccl-tests all_reduce busbw
//    on 8x H100 SXM is ~360-480 GB/s: 400 GB/s here.
//  - one 400 Gb/s NDR NIC per GPU = 50 GB/s, ~45 GB/s achieved.
Cluster dgx_h100() {
  Cluster c = dgx_a100();
  c.name = "dgx-h100";
  c.peak_flops = 989e12;
  c.memory_bytes = 81559.0 * 1024 * 1024;
  c.memory_bandwidth = 3350e9;
  c.intra = {400e9, 3e-6};
  c.inter = {45e9, 8e-6};
  return c;
}

// This VM: 2 AMD EPYC cores (AVX-512), 24 GiB, shared-memory MPI (Open MPI's vader BTL).
//  - OpenBLAS sgemm: ~150 GFLOP/s on one thread, ~180 on two when the machine is shared
//    (docs/PERFORMANCE.md: 179.7 GFLOP/s at 2048^3 on two; 152 on one when this preset was made).
//  - meshtrain's fp32 steps reach ~0.7 of that in forward and backward (the rest of the 0.57 MFU
//    of docs/PERFORMANCE.md is the optimizer, modelled on its own).
//  - AdamW streams 28 bytes per parameter at ~18 GB/s with two threads (docs/PERFORMANCE.md); one
//    thread streams ~12 GB/s.
//  - MPI_Allreduce between 2 ranks: 0.4 us for 8 bytes, 1.7 GB/s at 64 MiB, measured when this
//    preset was made (`meshbench coll` sweeps it again: docs/PERFORMANCE.md).
Cluster cpu_2core() {
  Cluster c;
  c.name = "cpu-2core";
  c.nodes = 1;
  c.devices_per_node = 1;
  c.peak_flops = 150e9;
  c.peak_dtype = "fp32";
  c.achieved_fraction = 0.7;
  c.memory_bytes = 24.0 * 1024 * 1024 * 1024;
  c.memory_reserved = 2.0 * 1024 * 1024 * 1024;  // the OS and the MPI runtime
  c.memory_bandwidth = 12e9;
  c.intra = {1.7e9, 0.4e-6};
  c.inter = c.intra;
  c.shared_cores = true;
  c.cores_per_node = 2;
  return c;
}

// The same VM cut into "hosts" (network namespaces over a veth bridge, slurm/local_hosts.sh): 2 hosts of one
// rank each; between hosts MPI goes over TCP: a 64 MiB allreduce over 2 hosts took 0.078 s
// uncapped (~0.86 GB/s) and 1.03 s with a 1 Gbit/s tbf cap (set inter_bandwidth = 0.12e9 then).
// All hosts still share the VM's 2 cores.
Cluster cpu_hosts() {
  Cluster c = cpu_2core();
  c.name = "cpu-hosts";
  c.nodes = 2;
  c.devices_per_node = 1;
  c.inter = {0.86e9, 50e-6};
  c.cores_per_node = 1;  // 2 cores over 2 hosts
  return c;
}

struct Preset {
  const char* name;
  Cluster (*make)();
};
constexpr Preset kPresets[] = {
    {"dgx-a100", dgx_a100}, {"dgx-h100", dgx_h100}, {"cpu-2core", cpu_2core}, {"cpu-hosts", cpu_hosts}};

double parse_number(const std::string& key, const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MT_REQUIRE(used > 0 && used == text.size(), "cluster field ", key, ": '", text, "' is not a number");
  // stod takes "inf", "nan" and 1e999: no machine has them, and validate's comparisons let inf pass.
  MT_REQUIRE(std::isfinite(value), "cluster field ", key, ": '", text, "' is not a finite number");
  return value;
}

int parse_int(const std::string& key, const std::string& text) {
  const double v = parse_number(key, text);
  // Range first: casting a double beyond int is undefined behaviour (nodes = 1e10).
  MT_REQUIRE(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max() && v == std::floor(v),
             "cluster field ", key, ": '", text, "' is not a whole number that fits an int");
  return static_cast<int>(v);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

Cluster cluster_preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p.make();
  std::string known;
  for (const Preset& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  MT_FAIL_AS(UsageError, "unknown cluster preset '", name, "' (known: ", known, ", or an .ini file)");
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

Cluster cpu_cluster(int ranks, int threads) {
  MT_REQUIRE(ranks >= 1 && threads >= 1, "cpu_cluster: ranks and threads must be at least 1, got ", ranks, " and ",
             threads);
  Cluster c = cpu_2core();
  c.devices_per_node = ranks;
  if (threads > 1) {
    // Two threads of one rank: the 2-thread sgemm rate and memory stream (above; PERFORMANCE.md).
    c.peak_flops = 180e9;
    c.memory_bandwidth = 18e9;
  }
  c.cores_per_node = std::max(1, c.cores_per_node / threads);  // cores, in units of one rank's threads
  return c;
}

std::vector<std::string> cluster_field_names() {
  return {"name",           "nodes",           "devices_per_node", "peak_flops",      "peak_dtype",
          "achieved_fraction", "memory_bytes", "memory_reserved",  "memory_bandwidth", "intra_bandwidth",
          "intra_latency",  "inter_bandwidth", "inter_latency",    "shared_cores",    "cores_per_node"};
}

void set_cluster_field(Cluster& c, const std::string& key, const std::string& value) {
  if (key == "name") c.name = value;
  else if (key == "nodes") c.nodes = parse_int(key, value);
  else if (key == "devices_per_node") c.devices_per_node = parse_int(key, value);
  else if (key == "peak_flops") c.peak_flops = parse_number(key, value);
  else if (key == "peak_dtype") c.peak_dtype = value;
  else if (key == "achieved_fraction") c.achieved_fraction = parse_number(key, value);
  else if (key == "memory_bytes") c.memory_bytes = parse_number(key, value);
  else if (key == "memory_reserved") c.memory_reserved = parse_number(key, value);
  else if (key == "memory_bandwidth") c.memory_bandwidth = parse_number(key, value);
  else if (key == "intra_bandwidth") c.intra.bandwidth = parse_number(key, value);
  else if (key == "intra_latency") c.intra.latency = parse_number(key, value);
  else if (key == "inter_bandwidth") c.inter.bandwidth = parse_number(key, value);
  else if (key == "inter_latency") c.inter.latency = parse_number(key, value);
  else if (key == "cores_per_node") c.cores_per_node = parse_int(key, value);
  else if (key == "shared_cores") {
    MT_REQUIRE(value == "true" || value == "false" || value == "1" || value == "0", "cluster field shared_cores: '",
               value, "' is not true or false");
    c.shared_cores = value == "true" || value == "1";
  } else {
    std::string known;
    for (const std::string& k : cluster_field_names()) known += (known.empty() ? "" : ", ") + k;
    MT_FAIL_AS(UsageError, "unknown cluster field '", key, "' (known: preset, ", known, ")");
  }
}

Cluster read_cluster_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  MT_REQUIRE(in.good(), "cannot read cluster file ", path.string());
  Cluster c;
  c.name = path.stem().string();
  std::string line;
  int number = 0;
  bool any_field = false;
  while (std::getline(in, line)) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    MT_REQUIRE(eq != std::string::npos, path.string(), ":", number, ": expected 'key = value', got '", line, "'");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    try {
      if (key == "preset") {
        MT_REQUIRE(!any_field, "'preset' must come before the other fields");
        const std::string name = c.name;
        c = cluster_preset(value);
        c.name = name;
      } else {
        set_cluster_field(c, key, value);
      }
    } catch (const Error& e) {
      MT_FAIL_AS(UsageError, path.string(), ":", number, ": ", e.message());
    }
    any_field = true;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    MT_FAIL_AS(UsageError, path.string(), ": ", e.message());
  }
  return c;
}

std::string describe(const Cluster& c) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "cluster %s: %d node(s) x %d device(s); %.4g TFLOP/s %s peak per device, %.2f achieved; "
                "%.1f GiB memory (%.1f reserved), %.0f GB/s memory bandwidth\n"
                "  links: intra-node %.4g GB/s busbw, %.3g us; inter-node %.4g GB/s, %.3g us%s",
                c.name.c_str(), c.nodes, c.devices_per_node, c.peak_flops / 1e12, c.peak_dtype.c_str(),
                c.achieved_fraction, c.memory_bytes / (1024.0 * 1024 * 1024),
                c.memory_reserved / (1024.0 * 1024 * 1024), c.memory_bandwidth / 1e9, c.intra.bandwidth / 1e9,
                c.intra.latency * 1e6, c.inter.bandwidth / 1e9, c.inter.latency * 1e6,
                c.shared_cores ? ("; ranks share " + std::to_string(c.cores_per_node) + " core(s) per node").c_str()
                               : "");
  return buf;
}

}  // namespace mt::perf
