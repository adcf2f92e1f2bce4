#include "bench/overlap_bench.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "bench/bench_env.h"
#include "bench/bench_json.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "launch/model_options.h"
#include "launch/session.h"
#include "launch/table.h"
#include "models/gpt.h"
#include "models/gpt_sharding.h"
#include "parallel/grad_reducer.h"

namespace po = boost::program_options;

namespace mt {
namespace {

using clock_type = std::chrono::steady_clock;

// Fixed pseudo-random tokens: the same on every rank (the data do not matter for the timing).
std::vector<std::int32_t> tokens(std::size_t n, int vocab, std::uint32_t salt) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = static_cast<std::int32_t>(((i + salt) * 2654435761u) % static_cast<std::uint32_t>(vocab));
  return t;
}

struct Measured {
  double mean_s = 0, min_s = 0;
};

// Runs `region` warmup + steps times, each after an untimed `prepare` and a barrier; a step's time
// is the slowest rank's, so the row shows what the job waits for.
Measured measure(Communicator& world, int warmup, int steps, const std::function<void()>& prepare,
                 const std::function<void()>& region) {
  Measured m;
  m.min_s = 1e30;
  for (int s = 0; s < warmup + steps; ++s) {
    prepare();
    world.barrier();
    const auto t0 = clock_type::now();
    region();
    const double mine = std::chrono::duration<double>(clock_type::now() - t0).count();
    const double t = slowest_rank_seconds(MPI_COMM_WORLD, mine);
    if (s < warmup) continue;
    m.mean_s += t / steps;
    m.min_s = std::min(m.min_s, t);
  }
  return m;
}

}  // namespace

int overlap_bench(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc("options");
  add_model_options(desc);
  desc.add_options()
      ("vocab", po::value<int>()->default_value(256),
       "vocabulary size (small by default: the tied embedding's gradient is final only at the very end "
       "of backward, so a GPT-2-sized vocabulary is one large bucket that nothing can hide)")
      ("batch", po::value<int>()->default_value(4), "sequences per rank B")
      ("seq-len", po::value<int>()->default_value(64), "tokens per sequence T")
      ("bucket-mb", po::value<double>()->default_value(4.0), "gradient bucket size in MiB (meshtrain train --bucket-mb)")
      ("zero", po::value<int>()->default_value(0), "0: allreduce the buckets; 1: reduce-scatter them (ZeRO-1)")
      ("steps", po::value<int>()->default_value(5), "timed repetitions of each measurement")
      ("warmup", po::value<int>()->default_value(1), "untimed repetitions first")
      ("json", path_value(PathKind::WriteFile)->default_value(""), "append one JSON line (bench \"overlap\") to this file");
  add_runtime_options(desc);
  auto vm = parse_command_line(
      "meshbench overlap",
      "A data-parallel backward of a GPT over every rank (dp = ranks): the gradients are reduced in buckets "
      "(meshtrain's GradReducer). Measured four ways, each the mean over --steps of the slowest rank: "
      "compute (backward alone), communication (every bucket reduced, nothing computed), serial (backward, then "
      "the buckets: --no-overlap) and overlapped (buckets launched as backward finishes them). Overlap "
      "efficiency = (serial - overlapped) / min(compute, communication): the share of the smaller part that "
      "was hidden. The forward pass runs before each timed region, untimed.",
      desc, args, mpi.world_rank());
  if (!vm) return 0;
  const int B = (*vm)["batch"].as<int>(), T = (*vm)["seq-len"].as<int>();
  const int steps = (*vm)["steps"].as<int>(), warmup = (*vm)["warmup"].as<int>();
  const int zero = (*vm)["zero"].as<int>();
  if (B < 1 || T < 1 || steps < 1 || warmup < 0) throw UsageError("--batch, --seq-len and --steps must be positive");
  if (zero != 0 && zero != 1) throw UsageError("--zero must be 0 or 1");
  const double bucket_mb = (*vm)["bucket-mb"].as<double>();
  if (!(bucket_mb > 0)) throw UsageError("--bucket-mb must be positive");

  Session s = open_session(read_runtime_options(*vm));
  DeviceContext& ctx = *s.context;
  Communicator& world = *s.world;
  const GptConfig config = read_model_config(*vm, (*vm)["vocab"].as<int>());
  if (T > config.max_seq_len) throw UsageError("--seq-len is longer than the model's max_seq_len");
  const int hosts = count_hosts(MPI_COMM_WORLD, s.placement.host);

  Gpt model(ctx, config, DType::F32, GptPartition::whole(config), TensorParallel{}, world.size());
  model.init(1);
  ParameterStore& store = model.parameters();
  std::vector<FlatParam> flat;
  for (std::size_t i = 0; i < store.size(); ++i)
    flat.push_back({model.shards()[i].full.name, store.offset(i), model.shards()[i].local.numel(),
                    model.shards()[i].local.decay, 1.0});
  ReducerOptions ro;
  ro.bucket_bytes = static_cast<std::int64_t>(bucket_mb * 1024 * 1024);
  ro.shard = zero == 1;
  ro.overlap = true;
  GradReducer overlapped(ctx, world, store.flat_grads(), flat, ro);
  ro.overlap = false;
  GradReducer serial(ctx, world, store.flat_grads(), flat, ro);
  GradReducer* active = nullptr;  // which reducer backward reports finished gradients to
  model.set_grad_ready_hook([&](std::size_t p) {
    if (active != nullptr) active->mark_ready(static_cast<int>(p));
  });

  const auto inputs = tokens(static_cast<std::size_t>(B) * T, config.vocab_size, 1);
  const auto targets = tokens(inputs.size(), config.vocab_size, 7);
  const auto forward = [&] {
    store.zero_grads(ctx);
    model.forward(inputs, targets, B, T);
    ctx.synchronize();
  };
  const auto backward = [&] {
    model.backward();
    ctx.synchronize();
  };
  const auto reduce_all = [&](GradReducer& r) {
    r.begin();
    for (int p = static_cast<int>(flat.size()) - 1; p >= 0; --p) r.mark_ready(p);  // backward's order
    r.finish();
    ctx.synchronize();
  };

  const Measured compute = measure(world, warmup, steps, forward, backward);
  const Measured comm = measure(world, warmup, steps, [] {}, [&] { reduce_all(overlapped); });
  const Measured serial_time = measure(world, warmup, steps, forward, [&] {
    active = &serial;
    serial.begin();
    backward();
    serial.finish();
    ctx.synchronize();
    active = nullptr;
  });
  int hidden_buckets = 0;
  const Measured overlap_time = measure(world, warmup, steps, forward, [&] {
    active = &overlapped;
    overlapped.begin();
    backward();
    overlapped.finish();
    hidden_buckets = overlapped.buckets_completed_before_finish();
    ctx.synchronize();
    active = nullptr;
  });

  const double smaller = std::min(compute.mean_s, comm.mean_s);
  const double hidden = serial_time.mean_s - overlap_time.mean_s;
  const double efficiency = smaller > 0 ? hidden / smaller : 0.0;
  const double hidden_vs_parts = compute.mean_s + comm.mean_s - overlap_time.mean_s;
  const double efficiency_vs_parts = smaller > 0 ? hidden_vs_parts / smaller : 0.0;
  const double bytes = 4.0 * static_cast<double>(overlapped.layout().flat_numel);
  if (s.placement.world_rank != 0) return 0;

  std::printf("meshbench overlap: %d rank(s) on %d host(s), dp %d, backend %s, device %s\n", world.size(), hosts,
              world.size(), world.backend_name().c_str(), s.binding.device.str().c_str());
  std::printf("model %s, %.2fM parameters, B=%d T=%d per rank; %.1f MiB of gradients in %d bucket(s) of %.1f MiB, %s\n",
              config.describe().c_str(), static_cast<double>(config.parameter_count()) / 1e6, B, T,
              bytes / (1024.0 * 1024.0), overlapped.layout().size(), bucket_mb,
              zero ? "reduce-scatter (ZeRO-1)" : "allreduce");
  std::printf("each figure: mean of %d step(s) after %d warm-up, the slowest rank's time\n", steps, warmup);
  TextTable table({"measurement", "mean ms", "min ms", "what runs"});
  table.add_row({"compute", format_cell("%.1f", 1e3 * compute.mean_s), format_cell("%.1f", 1e3 * compute.min_s), "backward alone"});
  table.add_row({"communication", format_cell("%.1f", 1e3 * comm.mean_s), format_cell("%.1f", 1e3 * comm.min_s),
                 "every bucket reduced, nothing computed"});
  table.add_row({"serial", format_cell("%.1f", 1e3 * serial_time.mean_s), format_cell("%.1f", 1e3 * serial_time.min_s),
                 "backward, then the buckets (--no-overlap)"});
  table.add_row({"overlapped", format_cell("%.1f", 1e3 * overlap_time.mean_s), format_cell("%.1f", 1e3 * overlap_time.min_s),
                 "buckets launched during backward"});
  std::printf("%s", table.render().c_str());
  std::printf("hidden %.1f ms of min(compute, communication) = %.1f ms: overlap efficiency %.2f; overlapped / "
              "max(compute, communication) = %.2f; %d of %d bucket(s) done before backward ended (last step)\n",
              1e3 * hidden, 1e3 * smaller, efficiency, overlap_time.mean_s / std::max(compute.mean_s, comm.mean_s),
              hidden_buckets, overlapped.layout().size());
  // The same against the parts measured alone: differs from the above where running both at once
  // costs more than their sum (threads competing for cores) or less.
  std::printf("against compute + communication measured alone (%.1f ms): hidden %.1f ms, efficiency %.2f\n",
              1e3 * (compute.mean_s + comm.mean_s), 1e3 * hidden_vs_parts, efficiency_vs_parts);

  nlohmann::ordered_json row;
  row["bench"] = "overlap";
  row["ranks"] = world.size();
  row["hosts"] = hosts;
  row["backend"] = world.backend_name();
  row["device"] = s.binding.device.is_cuda() ? "cuda" : "cpu";
  row["model"] = config.describe();
  row["params"] = config.parameter_count();
  row["tokens_per_rank"] = B * T;
  row["gradient_bytes"] = bytes;
  row["buckets"] = overlapped.layout().size();
  row["bucket_bytes"] = ro.bucket_bytes;
  row["zero"] = zero;
  row["compute_s"] = compute.mean_s;
  row["comm_s"] = comm.mean_s;
  row["serial_s"] = serial_time.mean_s;
  row["overlapped_s"] = overlap_time.mean_s;
  row["hidden_s"] = hidden;
  row["efficiency"] = efficiency;
  row["hidden_vs_parts_s"] = hidden_vs_parts;
  row["efficiency_vs_parts"] = efficiency_vs_parts;
  row["buckets_done_before_backward_end"] = hidden_buckets;
  BenchJson((*vm)["json"].as<std::string>()).append(row);
  return 0;
}

}  // namespace mt
