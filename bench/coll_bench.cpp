// `meshbench coll`: every collective of the Communicator over a size sweep, nccl-tests style (time,
// algbw, busbw, out of place and in place), next to the raw library call on the same buffers in the
// same run (MPI on the MPI backend, NCCL on NCCL) and the ratio of the two: what our layer costs.
// The per-op table is bench/coll_ops.h, the shared loop bench/coll_runner.h.
#include "bench/coll_bench.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <iostream>

#include "bench/bench_env.h"
#include "bench/bench_json.h"
#include "bench/bench_options.h"
#include "bench/bench_session.h"
#include "bench/coll_runner.h"
#include "bench/raw_mpi.h"
#include "bench/raw_nccl.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "launch/options.h"
#include "launch/table.h"

namespace po = boost::program_options;

namespace mt {
namespace {

constexpr std::size_t kFullItersUpTo = 4u << 20;  // iterations fall in proportion to the size above this

struct CollConfig {
  std::vector<const CollOpInfo*> ops;
  std::size_t min_bytes = 8;
  std::string max_bytes;  // "auto" is decided once the device is known
  int step_factor = 2;
  int iters = 20;
  int warmup = 5;
  CollSettings settings;
  std::string json;
  bool raw_nonblocking = false;
};

po::options_description coll_options() {
  po::options_description desc("options");
  desc.add_options()
      ("op", po::value<std::string>()->default_value("all"),
       "allreduce, reduce_scatter, allgather, broadcast, alltoall, sendrecv (each rank sends to rank+1 and "
       "receives from rank-1), or all (each in turn)")
      ("min-bytes", po::value<std::string>()->default_value("8"), "smallest size (K, M, G suffixes: powers of 1024)")
      ("max-bytes", po::value<std::string>()->default_value("auto"), "largest size (auto: 64M on the CPU, 256M on a GPU)")
      ("step-factor", po::value<int>()->default_value(2), "each size is the previous one times this (at least 2)")
      ("dtype", po::value<std::string>()->default_value("fp32"), "fp32 or bf16")
      ("iters", po::value<int>()->default_value(20),
       "timed ops per size and placement up to 4 MiB; above, iters x 4 MiB / size (at least 3)")
      ("warmup", po::value<int>()->default_value(5), "untimed ops first, scaled down like --iters (at least 1)")
      ("in-flight", po::value<int>()->default_value(1),
       "ours: start this many ops with the async API, then wait for all of them; 1 waits for each op before "
       "the next starts, as nccl-tests runs one op at a time (raw NCCL is synchronized in the same batches; "
       "raw MPI calls block, one at a time)")
      ("rounds", po::value<int>()->default_value(1),
       "time each size this many times, alternating ours and raw, and keep each column's fastest round "
       "(steadier ratios on a busy machine)")
      ("raw-nonblocking", po::bool_switch(),
       "MPI backend: the raw side makes the nonblocking call our engine makes (MPI_Iallreduce, ...) and "
       "waits at once, from the calling thread: tells the engine's cost from that of MPI's nonblocking "
       "algorithms")
      ("check", po::bool_switch(),
       "before timing, run one op of each kind and placement and compare every output element with the value "
       "computed on the host (a mismatch is an error naming the op, size, rank and element)")
      ("out-of-place", po::bool_switch(), "time out of place (with neither flag: both placements)")
      ("in-place", po::bool_switch(), "time in place (with neither flag: both placements)");
  add_json_option(desc, "append one JSON line per row to this file (rank 0)");
  add_runtime_options(desc);
  return desc;
}

const char* kSummary =
    "Times every collective of the Communicator over a size sweep (sizes, algbw and busbw as in nccl-tests),\n"
    "out of place and in place, next to the raw library call on the same buffers in the same run: raw MPI\n"
    "on the MPI backend, raw NCCL on NCCL. The last column, ours/raw, is the ratio of bus bandwidths of\n"
    "the same placement (out of place where the op has it; broadcast: in place).";

std::size_t read_bytes(const po::variables_map& vm, const char* name) {
  try {
    return parse_bytes(vm[name].as<std::string>());
  } catch (const Error& e) {
    throw UsageError(std::string("--") + name + ": " + e.message());
  }
}

CollConfig read_config(const po::variables_map& vm, int ranks) {
  CollConfig c;
  const std::string op = vm["op"].as<std::string>();
  if (op == "all") {
    for (const CollOpInfo& info : coll_ops()) c.ops.push_back(&info);
  } else if (const CollOpInfo* info = find_coll_op(op)) {
    if (ranks < info->min_ranks) {
      throw UsageError("--op " + op + " needs at least " + std::to_string(info->min_ranks) + " ranks, not " +
                       std::to_string(ranks));
    }
    c.ops.push_back(info);
  } else {
    std::string names;
    for (const CollOpInfo& i : coll_ops()) names += std::string(i.name) + ", ";
    throw UsageError("unknown --op '" + op + "' (one of: " + names + "all)");
  }
  c.min_bytes = read_bytes(vm, "min-bytes");
  if (c.min_bytes == 0) throw UsageError("--min-bytes must be at least 1 byte");
  c.max_bytes = vm["max-bytes"].as<std::string>();
  if (c.max_bytes != "auto") read_bytes(vm, "max-bytes");  // checked now, decided later
  c.step_factor = vm["step-factor"].as<int>();
  if (c.step_factor < 2) throw UsageError("--step-factor must be at least 2, not " + std::to_string(c.step_factor));
  c.iters = vm["iters"].as<int>();
  c.warmup = vm["warmup"].as<int>();
  if (c.iters < 1 || c.warmup < 0) throw UsageError("--iters must be at least 1 and --warmup at least 0");
  c.settings.in_flight = vm["in-flight"].as<int>();
  if (c.settings.in_flight < 1) throw UsageError("--in-flight must be at least 1");
  c.settings.rounds = vm["rounds"].as<int>();
  if (c.settings.rounds < 1) throw UsageError("--rounds must be at least 1");
  const std::string dtype = vm["dtype"].as<std::string>();
  if (dtype != "fp32" && dtype != "bf16") throw UsageError("--dtype must be fp32 or bf16, not '" + dtype + "'");
  c.settings.dtype = parse_dtype(dtype);
  c.settings.check = vm["check"].as<bool>();
  const bool oop = vm["out-of-place"].as<bool>(), ip = vm["in-place"].as<bool>();
  c.settings.out_of_place = oop || !ip;
  c.settings.in_place = ip || !oop;
  c.json = vm["json"].as<std::string>();
  c.raw_nonblocking = vm["raw-nonblocking"].as<bool>();
  return c;
}

std::size_t decide_max_bytes(const CollConfig& c, Device device) {
  const std::size_t max = c.max_bytes == "auto" ? (device.is_cpu() ? 64u << 20 : 256u << 20) : parse_bytes(c.max_bytes);
  if (max < c.min_bytes) {
    throw UsageError("--max-bytes (" + std::to_string(max) + ") is below --min-bytes (" + std::to_string(c.min_bytes) + ")");
  }
  // One MPI call takes an int count.
  if (max / dtype_size(c.settings.dtype) > static_cast<std::size_t>(INT_MAX)) {
    throw UsageError("--max-bytes " + c.max_bytes + " is more than 2^31-1 elements of " + dtype_name(c.settings.dtype));
  }
  return max;
}

int scaled(int n, int floor, std::size_t bytes) {
  if (bytes <= kFullItersUpTo) return n;
  const auto s = static_cast<int>(static_cast<double>(n) * static_cast<double>(kFullItersUpTo) / static_cast<double>(bytes));
  return std::min(n, std::max(floor, s));
}

nlohmann::ordered_json or_null(bool ran, double v) { return ran ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); }

// What every row of the run says about where and how it ran.
struct CollRun {
  const CollConfig& config;
  int ranks = 0, hosts = 0;
  std::string device, backend;
  const char* dtype = "";
  std::string raw_name;   // the raw library: mpi or nccl
  std::string raw_label;  // the JSON's "raw": the name, -nonblocking where the raw MPI calls are
  bool raw_host_buffers = false;
};

void print_header(const BenchSession& s, const CollRun& run, const RawColl& raw) {
  const CollConfig& config = run.config;
  const Device device = s.ctx().device();
  std::printf("meshbench coll: %d rank(s) on %d host(s), backend %s (%s), device %s, dtype %s\n", run.ranks, run.hosts,
              run.backend.c_str(), s.session.backend.reason.c_str(), device.str().c_str(), run.dtype);
  std::printf("iterations: %d timed after %d warm-up per size and placement up to 4 MiB, scaled down above "
              "(at least 3 and 1); %d op(s) in flight; time = mean per op of the slowest rank, fastest of %d "
              "round(s)\n",
              config.iters, config.warmup, config.settings.in_flight, config.settings.rounds);
  std::printf("ours: Communicator *_async + Work::wait; %s\n", raw.describe().c_str());
  if (run.raw_host_buffers) {
    std::printf("note: raw %s runs on host buffers of the same sizes; ours runs on device tensors (staged "
                "through pinned host memory by the MPI backend)\n",
                run.raw_name.c_str());
  }
  std::printf("columns: bytes = size as in nccl-tests (reduce_scatter: whole input, allgather: whole output, "
              "alltoall: whole buffer); count = elements per call; us = microseconds; algbw = bytes / time and "
              "busbw = algbw x factor, in GB/s (1e9 B/s); oop = out of place, ip = in place; %s = the raw "
              "library; ours/%s = busbw of ours / busbw of raw, same placement\n",
              run.raw_name.c_str(), run.raw_name.c_str());
}

// The JSON row's fields before the timings: the run, the op and the size.
nlohmann::ordered_json row_context(const CollRun& run, const CollOpInfo& op, double factor, const CollShape& shape,
                                   const CollRow& row) {
  nlohmann::ordered_json j;
  j["bench"] = "coll";
  j["op"] = op.name;
  j["ranks"] = run.ranks;
  j["hosts"] = run.hosts;
  j["device"] = run.device;
  j["backend"] = run.backend;
  j["dtype"] = run.dtype;
  j["bytes"] = shape.bytes;
  j["count"] = shape.count;
  j["bus_factor"] = factor;
  j["iters"] = row.iters;
  j["warmup"] = row.warmup;
  j["in_flight"] = run.config.settings.in_flight;
  j["rounds"] = run.config.settings.rounds;
  return j;
}

// One size: its table cells and JSON row, ours per placement ("-" where it did not run), then raw.
void add_size_row(const CollRun& run, const CollOpInfo& op, double factor, const CollShape& shape, const CollRow& row,
                  TextTable& table, const BenchJson& json) {
  const auto bytes = static_cast<double>(shape.bytes);
  std::vector<std::string> cells = {std::to_string(shape.bytes), std::to_string(shape.count), run.dtype};
  nlohmann::ordered_json j = row_context(run, op, factor, shape, row);
  for (Placement p : {Placement::OutOfPlace, Placement::InPlace}) {
    const CollTiming& t = row.ours[static_cast<std::size_t>(p)];
    const std::string key = p == Placement::OutOfPlace ? "out_of_place" : "in_place";
    j[key + "_time_s"] = or_null(t.ran, t.seconds);
    j[key + "_algbw_bytes_per_s"] = or_null(t.ran, bytes / t.seconds);
    j[key + "_busbw_bytes_per_s"] = or_null(t.ran, bytes / t.seconds * factor);
    if (!t.ran) {
      cells.insert(cells.end(), {"-", "-", "-"});
      continue;
    }
    cells.push_back(format_cell("%.1f", t.seconds * 1e6));
    cells.push_back(format_cell("%.3f", bytes / t.seconds / 1e9));
    cells.push_back(format_cell("%.3f", bytes / t.seconds * factor / 1e9));
  }
  // Bus bandwidths share the factor, so their ratio is the inverse ratio of the times.
  const CollTiming& mine = row.ours[static_cast<std::size_t>(row.raw_placement)];
  const double ratio = row.raw.seconds / mine.seconds;
  cells.push_back(format_cell("%.1f", row.raw.seconds * 1e6));
  cells.push_back(format_cell("%.3f", bytes / row.raw.seconds * factor / 1e9));
  cells.push_back(format_cell("%.2f", ratio));
  j["raw"] = run.raw_label;
  j["raw_placement"] = placement_name(row.raw_placement);
  j["raw_host_buffers"] = run.raw_host_buffers;
  j["raw_time_s"] = row.raw.seconds;
  j["raw_busbw_bytes_per_s"] = bytes / row.raw.seconds * factor;
  j["ratio"] = ratio;
  table.add_row(std::move(cells));
  json.append(j);
}

// Collective: the op over every size of the sweep; rank 0 prints its table.
void run_op(const CollRun& run, const CollOpInfo& op, std::size_t max_bytes, CollRunner& runner, bool root,
            const BenchJson& json) {
  const CollConfig& config = run.config;
  const double factor = op.bus_factor(run.ranks);
  const std::optional<Placement> raw_p = runner.raw_placement(op);
  if (!raw_p) {
    if (root) {
      std::printf("\n# %s: skipped (%s)\n", op.name,
                  run.ranks < op.min_ranks ? "needs at least 2 ranks" : "no in-place form; run without --in-place");
    }
    return;
  }
  const std::string& rn = run.raw_name;
  TextTable table({"bytes", "count", "type", "oop_us", "oop_algbw", "oop_busbw", "ip_us", "ip_algbw", "ip_busbw",
                   rn + "_us", rn + "_busbw", "ours/" + rn});
  std::size_t previous = 0;
  for (std::size_t size = config.min_bytes; size <= max_bytes; size *= static_cast<std::size_t>(config.step_factor)) {
    const std::optional<CollShape> shape = coll_shape(op.op, size, dtype_size(config.settings.dtype), run.ranks);
    if (!shape || shape->bytes == previous) continue;  // rounds to nothing, or to the last row
    previous = shape->bytes;
    const CollRow row = runner.run(op, *shape, scaled(config.warmup, 1, shape->bytes),
                                   scaled(config.iters, 3, shape->bytes));
    if (root) add_size_row(run, op, factor, *shape, row, table, json);
  }
  if (root) {
    std::printf("\n# %s: busbw = algbw x %s = %.3f; ours/%s compares %s\n%s", op.name, op.factor_text, factor,
                rn.c_str(), placement_name(*raw_p), table.render().c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int coll_bench(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc = coll_options();
  const auto vm = parse_command_line("meshbench coll", kSummary, desc, args, mpi.world_rank());
  if (!vm) return 0;
  const CollConfig config = read_config(*vm, mpi.world_size());

  BenchSession s = open_bench_session(read_runtime_options(*vm));
  DeviceContext& ctx = s.ctx();
  Communicator& comm = s.world();
  const std::size_t max_bytes = decide_max_bytes(config, ctx.device());
  const bool root = comm.rank() == 0;
  const bool nccl = s.session.backend.backend == CommBackend::Nccl;
  std::unique_ptr<RawColl> raw = nccl ? make_raw_nccl(MPI_COMM_WORLD, ctx.device()) : std::make_unique<RawMpi>(config.raw_nonblocking);
  CollRunner runner(comm, ctx, *raw, config.settings);
  const CollRun run{config, comm.size(), s.hosts, device_kind(ctx.device()), comm.backend_name(),
                    dtype_name(config.settings.dtype), raw->name(),
                    config.raw_nonblocking && !nccl ? raw->name() + "-nonblocking" : raw->name(),
                    raw->host_memory_only() && !ctx.device().is_cpu()};
  if (root) print_header(s, run, *raw);

  const BenchJson json(root ? config.json : "");
  for (const CollOpInfo* op : config.ops) run_op(run, *op, max_bytes, runner, root, json);
  return 0;
}

}  // namespace mt
