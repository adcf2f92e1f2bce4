#include "launch/options.h"

#include "runtime/error.h"

namespace po = boost::program_options;

namespace mt {

void add_runtime_options(po::options_description& desc) {
  desc.add_options()
    ("device", po::value<std::string>()->default_value("auto"),
     "what each rank computes on: auto (its GPU if the node has one per rank, else the CPU), cpu, or cuda")
    ("virtual-devices", po::bool_switch(),
     "allow more ranks on a node than it has GPUs: ranks share GPUs (local rank mod GPUs), as when "
     "testing a multi-GPU layout on one GPU; CPU ranks always share the node")
    ("device-memory-limit", po::value<std::string>()->default_value("0"),
     "cap on the memory each rank may allocate on its device, like a logical device's memory limit "
     "(e.g. 512M, 2G; 0 = no cap); going over it is a clear out-of-memory error")
    ("cpu-threads", po::value<int>()->default_value(0),
     "threads per rank for CPU kernels and OpenBLAS (0 = the node's cores divided by its ranks, at least 1)")
    ("comm-backend", po::value<std::string>()->default_value("auto"),
     "auto (NCCL when every rank has a GPU of its own, else MPI), mpi, or nccl")
    ("comm-timeout", po::value<double>()->default_value(600),
     "seconds any one communication may take: past it the watchdog reports what the rank waited for "
     "(op, group, sequence number, bytes), which ranks had not arrived, and the last steps, then ends the job")
    ("debug-collectives", po::bool_switch(),
     "before every collective, check that all members of the group call the same one (op, sequence number, "
     "count, dtype, root); on a mismatch, say which ranks called what and from where, and end the job. "
     "Costs one small exchange per collective");
}

namespace {
RuntimeOptions read(const po::variables_map& vm) {
  RuntimeOptions o;
  o.device = parse_device_request(vm["device"].as<std::string>());
  o.virtual_devices = vm["virtual-devices"].as<bool>();
  o.device_memory_limit = parse_bytes(vm["device-memory-limit"].as<std::string>());
  o.cpu_threads = vm["cpu-threads"].as<int>();
  if (o.cpu_threads < 0) MT_FAIL_AS(UsageError, "--cpu-threads must be 0 (automatic) or positive, not ", o.cpu_threads);
  o.comm_backend = parse_comm_backend(vm["comm-backend"].as<std::string>());
  const double seconds = vm["comm-timeout"].as<double>();
  // Up to a year: longer is "never" in practice, and clocks overflow somewhat later.
  if (!(seconds > 0 && seconds <= 365.0 * 24 * 3600)) {
    MT_FAIL_AS(UsageError, "--comm-timeout must be a number of seconds above 0 and at most a year, not ", seconds);
  }
  o.comm_timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
  o.debug_collectives = vm["debug-collectives"].as<bool>();
  return o;
}
}  // namespace

RuntimeOptions read_runtime_options(const po::variables_map& vm) { return read(vm); }

}  // namespace mt
