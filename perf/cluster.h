// A description of the machines a job runs on, for the performance model: how many nodes and
// devices, how fast a device multiplies matrices, how much memory it has, and how fast its links
// move bytes. Presets for the machines meshtrain is measured or planned on, an ini reader with the
// same keys, and field overrides by name. Pure data: nothing here touches a device or MPI.
// defines: Link, Cluster, cluster_preset, cluster_preset_names, cpu_cluster, read_cluster_file,
//          set_cluster_field, cluster_field_names, describe
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace mt::perf {

// One kind of link, per device: a ring step costs `latency` seconds plus bytes / `bandwidth`.
// `bandwidth` is what nccl-tests calls bus bandwidth (busbw): the rate at which each device moves
// data in a ring collective, so a ring allreduce of S bytes on n devices takes
// 2(n-1) latency + 2(n-1)/n S / bandwidth.
struct Link {
  double bandwidth = 1e9;  // bytes/s per device
  double latency = 1e-6;   // s per message or ring step
};

struct Cluster {
  static constexpr int kMaxDevices = 1 << 24;  // validate's bound, far beyond any machine
  std::string name = "custom";
  int nodes = 1;
  int devices_per_node = 1;         // ranks per node (GPUs, or MPI ranks on a CPU machine)
  double peak_flops = 1e12;         // dense matrix FLOP/s of one device in `peak_dtype`
  std::string peak_dtype = "bf16";  // the dtype peak_flops is for ("fp32" on CPUs)
  double achieved_fraction = 0.55;  // of peak reached by the model's GEMMs (calibrated)
  double memory_bytes = 80e9;       // per device
  double memory_reserved = 0;       // per device, never available to tensors (CUDA context, fragmentation)
  double memory_bandwidth = 1e12;   // bytes/s per device: the optimizer and the zeroing are bound by it
  Link intra;                       // between devices of one node
  Link inter;                       // between nodes
  // CPU machines: the ranks of a node share `cores_per_node` cores. Then `peak_flops` and
  // `memory_bandwidth` are what ONE rank gets when it has a core to itself, and ranks beyond the
  // cores are time-sliced: the node does at most cores_per_node ranks' worth of work at once.
  bool shared_cores = false;
  int cores_per_node = 0;

  int devices() const { return nodes * devices_per_node; }
  // How many ranks of one node can run at full speed at once (devices_per_node unless shared).
  double concurrent_ranks() const;
  void validate() const;  // throws Error naming the first bad field
};

// dgx-a100, dgx-h100, cpu-2core, cpu-hosts. Unknown names throw Error listing the known.
Cluster cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();

// This 2-core VM with `ranks` MPI ranks on it, each with `threads` CPU threads (meshtrain train
// --cpu-threads): the cpu-2core preset, with the cores shared when ranks x threads > 2.
Cluster cpu_cluster(int ranks, int threads = 1);

// `key = value` lines (`#` starts a comment), the keys of cluster_field_names(); an optional
// `preset = NAME` line first starts from that preset. Errors name the file and line.
Cluster read_cluster_file(const std::filesystem::path& path);
// Sets one field by its key from text ("312e12", "true"); throws Error on an unknown key or a bad value.
void set_cluster_field(Cluster& cluster, const std::string& key, const std::string& value);
std::vector<std::string> cluster_field_names();

// Several lines: every field with its unit.
std::string describe(const Cluster& cluster);

}  // namespace mt::perf
