#include "bench/train_bench.h"

#include <sys/resource.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <stdexcept>

#include "bench/bench_json.h"
#include "bench/bench_options.h"
#include "bench/bench_env.h"
#include "bench/step_timer.h"
#include "runtime/kernels.h"
#include "launch/op_profile_table.h"
#include "launch/path_option.h"
#include "launch/table.h"
#include "models/gpt.h"
#include "models/head_chunks.h"
#include "runtime/gemm_rate.h"
#include "optim/adamw.h"
#include "optim/grad_norm.h"
#include "runtime/device_counters.h"
#include "runtime/op_profile.h"

namespace po = boost::program_options;

namespace mt {
namespace {

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

struct Timing {
  double forward = 0, backward = 0, optimizer = 0;
  double total() const { return forward + backward + optimizer; }
  // The device layer's work over the timed steps (runtime/device_counters.h), the bench's own
  // waits for its clock left out.
  DeviceCounters counted;
  int steps = 0;
  // counted's fields per timed step: allocations, host syncs, launches, bytes copied.
  std::array<double, 4> per_step() const {
    const double n = std::max(1, steps);
    return {static_cast<double>(counted.allocations) / n, static_cast<double>(counted.host_syncs) / n,
            static_cast<double>(counted.launches) / n, static_cast<double>(counted.copy_bytes) / n};
  }
};

// Times `steps` training steps after `warmup` untimed ones; the data are fixed random tokens.
Timing run_steps(DeviceContext& ctx, Gpt& model, AdamW& opt, int B, int T, int warmup, int steps) {
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(B) * T), targets(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<std::int32_t>((i * 2654435761u) % static_cast<std::uint32_t>(model.config().vocab_size));
    targets[i] = static_cast<std::int32_t>((i * 40503u + 7) % static_cast<std::uint32_t>(model.config().vocab_size));
  }
  // Fixed tokens: on the device once, as a trainer's step finds its batch already uploaded.
  const Gpt::DeviceTokens tokens{Tensor::from_host(inputs, {B * T}, ctx), Tensor::from_host(targets, {B * T}, ctx)};
  // [sum of squares, loss], read once per step as ParallelTrainer reads them.
  Tensor sums = Tensor::empty({2}, DType::F32, ctx);
  Tensor norm_sq = sums.flat_slice(0, 1), loss = sums.flat_slice(1, 1);
  Timing t;
  t.steps = steps;
  Stopwatch watch;
  DeviceCounters step_counts;
  DeviceCounters mark;
  auto start = [&] {
    watch.restart();
    mark = device_counters();
  };
  auto stop = [&] {  // the phase's counts, then the wait for its clock
    step_counts += device_counters() - mark;
    ctx.synchronize();
    return watch.seconds();
  };
  for (int s = 0; s < warmup + steps; ++s) {
    step_counts = {};
    start();
    model.parameters().zero_grads(ctx);
    kernels::fill(ctx, loss, 0.0);
    model.forward(tokens, B, T, 1.0f, loss);
    const double f = stop();
    start();
    model.backward();
    const double b = stop();
    start();
    const Tensor g = model.parameters().flat_grads();
    kernels::sum_of_squares_tree(ctx, std::span<const Tensor>(&g, 1), {}, norm_sq);
    float read[2];
    sums.copy_to_host(read, sizeof read, ctx.stream());  // the step's one host wait
    opt.step(1e-4f, static_cast<float>(clip_scale(std::sqrt(static_cast<double>(read[0])), 1.0)));
    const double o = stop();
    if (s < warmup) continue;
    t.forward += f / steps;
    t.backward += b / steps;
    t.optimizer += o / steps;
    t.counted += step_counts;
  }
  return t;
}

po::options_description train_options() {
  po::options_description desc("meshbench train options");
  desc.add_options()("help,h", "print this help")
      ("models", po::value<std::string>()->default_value("small,gpt2"),
       "comma-separated presets to measure, smallest first (peak memory is per process)")
      ("batch", po::value<int>()->default_value(4), "sequences per step B")
      ("seq-len", po::value<int>()->default_value(64), "tokens per sequence T")
      ("recompute", po::value<std::string>()->default_value("none"),
       "comma-separated activation recomputation modes to measure per model, side by side: none, selective, "
       "full (each row's 'vs first' compares its step time and activation peak with the first mode's)");
  add_repeat_options(desc, 5, "timed steps per model", "untimed steps first");
  desc.add_options()
      ("cpu-threads", po::value<int>()->default_value(0), "threads (0: all cores)")
      ("device", po::value<std::string>()->default_value("cpu"), "cpu, or cuda:N (one GPU)")
      ("dtype", po::value<std::string>()->default_value("fp32"),
       "compute precision of the matrix products: fp32, or bf16 (bf16 operands, fp32 accumulation and master weights)")
      ("gemm-size", po::value<int>()->default_value(0), "n of the n^3 sgemm that measures the ceiling (0: 2048 on CPU, 8192 on GPU)")
      ("profile-ops", po::value<int>()->default_value(0),
       "after the timed steps, this many more with every op timed (each drained before and after: slower "
       "steps, apart from the timed ones), and a table per model of where a step's device time goes, op by op "
       "(GEMMs by shape); 0: none");
  add_json_option(desc, "append one JSON line per model to this file (for meshtrain plan --calibrate)");
  return desc;
}

// The parsed options; nullopt when --help was asked for (and printed).
std::optional<po::variables_map> parse_train_command(const std::vector<std::string>& args) {
  const po::options_description desc = train_options();
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: meshbench train [options]\n\nSingle-rank training throughput and MFU of GPT shapes on "
                 "the CPU or one GPU, next to the fp32 GEMM rate measured in the same run.\n\n"
              << desc;
    return std::nullopt;
  }
  po::notify(vm);
  check_path_options(desc, vm);
  return vm;
}

struct TrainOptions {
  std::vector<std::string> models;
  std::vector<Recompute> recompute;
  int batch = 0, seq_len = 0, steps = 0, warmup = 0;
  DeviceOptions device;
  std::string dtype_name;  // fp32 or bf16
  DType compute = DType::F32;
  int gemm_size = 0;  // 0: decided by the device
  int profile_steps = 0;
  std::string json;
};

TrainOptions read_options(const po::variables_map& vm) {
  TrainOptions o;
  o.models = split_list(vm["models"].as<std::string>());
  for (const std::string& mode : split_list(vm["recompute"].as<std::string>())) o.recompute.push_back(parse_recompute(mode));
  if (o.recompute.empty()) throw std::runtime_error("--recompute needs at least one mode");
  o.batch = vm["batch"].as<int>();
  o.seq_len = vm["seq-len"].as<int>();
  o.steps = vm["steps"].as<int>();
  o.warmup = vm["warmup"].as<int>();
  o.device.cpu_threads = vm["cpu-threads"].as<int>() > 0 ? vm["cpu-threads"].as<int>() : default_cpu_threads(1);
  o.device.device = Device::parse(vm["device"].as<std::string>());
  o.dtype_name = vm["dtype"].as<std::string>();
  if (o.dtype_name != "fp32" && o.dtype_name != "bf16")
    throw std::runtime_error("--dtype must be fp32 or bf16, not " + o.dtype_name);
  o.compute = o.dtype_name == "bf16" ? DType::BF16 : DType::F32;
  o.gemm_size = vm["gemm-size"].as<int>();
  o.profile_steps = vm["profile-ops"].as<int>();
  if (o.profile_steps < 0) throw std::runtime_error("--profile-ops must be >= 0");
  o.json = vm["json"].as<std::string>();
  return o;
}

struct ModelRun {
  std::string name;
  Recompute recompute = Recompute::None;
  GptConfig config;
  Timing time;
  double tokens = 0;    // per step
  double flops = 0;     // model FLOPs per second
  double peak_rss = 0;  // bytes, this process so far
  // The allocator's peak over the steps less what it held before them (parameters, gradients,
  // AdamW's moments): activations, scratch and a step's temporary buffers, as allocated.
  double activation_peak = 0;
  double logits = 0;  // of it: the head's one chunk of logits [R, Vp] (models/head_chunks.h), which no recompute mode drops
  // --profile-ops: the profiled steps' ops per step, most time first, and the profiled step's wall time.
  std::vector<OpPerStep> ops;
  double profiled_step_s = 0;
};

// One preset: its model and optimizer built, its steps timed, on a fresh device context (so that
// the allocator's peak is this run's).
ModelRun run_model(const TrainOptions& o, const std::string& name, Recompute recompute) {
  DeviceContext ctx(o.device);
  ModelRun run;
  run.name = name;
  run.recompute = recompute;
  run.config = gpt_preset(name);
  Gpt model(ctx, run.config, o.compute, {}, {}, 1, GptOptions{recompute, false});
  model.init(1);
  std::vector<ParamSlot> slots;
  for (std::size_t i = 0; i < model.parameters().size(); ++i)
    slots.push_back({model.parameters().spec(i).name, model.parameters().param(i), model.parameters().grad(i),
                     model.parameters().spec(i).decay});
  AdamW opt(ctx, std::move(slots));
  const double held = static_cast<double>(ctx.allocator().stats().in_use);
  run.time = run_steps(ctx, model, opt, o.batch, o.seq_len, o.warmup, o.steps);
  run.activation_peak = static_cast<double>(ctx.allocator().stats().peak) - held;
  if (o.profile_steps > 0) {  // after the timed steps: their times stay those of unprofiled steps
    reset_op_timings();
    set_op_profiling(true);
    run.profiled_step_s = run_steps(ctx, model, opt, o.batch, o.seq_len, 0, o.profile_steps).total();
    set_op_profiling(false);
    for (const OpTiming& op : op_timings())
      run.ops.push_back({op.name, static_cast<double>(op.calls) / o.profile_steps, op.seconds / o.profile_steps});
  }
  const std::int64_t rows = static_cast<std::int64_t>(o.batch) * o.seq_len;
  const auto elem = static_cast<std::int64_t>(dtype_size(o.compute));
  run.logits = static_cast<double>(head_chunk_rows(rows, run.config.vocab_rows(), elem, ctx.device().is_cuda())) *
               static_cast<double>(run.config.vocab_rows()) * static_cast<double>(elem);
  run.tokens = static_cast<double>(o.batch) * o.seq_len;
  run.flops = run.tokens * run.config.training_flops_per_token(o.seq_len) / run.time.total();
  run.peak_rss = peak_rss_bytes();
  return run;
}

// first: the same model's row with the first --recompute mode.
std::vector<std::string> table_cells(const ModelRun& r, const ModelRun& first, double sgemm) {
  const Timing& t = r.time;
  constexpr double MiB = 1024.0 * 1024.0;
  return {r.name, recompute_name(r.recompute),
          format_cell("%.1fM", static_cast<double>(r.config.real_parameter_count()) / 1e6),
          format_cell("%.0f", r.tokens), format_cell("%.0f", 1e3 * t.total()), format_cell("%.0f", 1e3 * t.forward),
          format_cell("%.0f", 1e3 * t.backward), format_cell("%.0f", 1e3 * t.optimizer),
          format_cell("%.0f", r.tokens / t.total()), format_cell("%.1f", r.flops / 1e9),
          format_cell("%.2f", r.flops / sgemm), format_cell("%.1f MiB", r.activation_peak / MiB),
          format_cell("%.1f MiB", (r.activation_peak - r.logits) / MiB),
          format_cell("x%.2f time", t.total() / first.time.total()) +
              format_cell(", /%.2f act", first.activation_peak / r.activation_peak) +
              format_cell(", /%.2f w/o head chunk", (first.activation_peak - first.logits) / (r.activation_peak - r.logits)),
          format_cell("%.2f GiB", r.peak_rss / (1024.0 * 1024 * 1024))};
}

std::vector<std::string> work_cells(const ModelRun& r) {
  const auto [allocations, host_syncs, launches, copy_bytes] = r.time.per_step();
  return {r.name, recompute_name(r.recompute), format_cell("%.1f", allocations), format_cell("%.1f", host_syncs),
          format_cell("%.1f", launches), format_cell("%.0f B", copy_bytes)};
}

nlohmann::ordered_json json_row(const ModelRun& r, const TrainOptions& o, int threads, double sgemm) {
  nlohmann::ordered_json row;
  row["bench"] = "train";
  row["device"] = device_kind(o.device.device);
  row["dtype"] = o.dtype_name;
  row["model"] = r.name;
  row["recompute"] = recompute_name(r.recompute);
  row["activation_peak_bytes"] = r.activation_peak;
  row["head_chunk_bytes"] = r.logits;
  row["params"] = r.config.real_parameter_count();
  row["tokens_per_step"] = r.tokens;
  row["step_s"] = r.time.total();
  row["forward_s"] = r.time.forward;
  row["backward_s"] = r.time.backward;
  row["optimizer_s"] = r.time.optimizer;
  row["model_flops_per_step"] = r.tokens * r.config.training_flops_per_token(o.seq_len);
  row["gemm_flops_per_s"] = sgemm;
  row["threads"] = threads;
  row["mfu"] = r.flops / sgemm;
  const auto [allocations, host_syncs, launches, copy_bytes] = r.time.per_step();
  row["allocations_per_step"] = allocations;
  row["host_syncs_per_step"] = host_syncs;
  row["launches_per_step"] = launches;
  row["copy_bytes_per_step"] = copy_bytes;
  if (o.profile_steps > 0) {
    row["profiled_step_s"] = r.profiled_step_s;
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const OpPerStep& op : r.ops)
      ops.push_back({{"op", op.name}, {"calls_per_step", op.calls}, {"s_per_step", op.seconds},
                     {"share_of_step", op.seconds / r.profiled_step_s}});
    row["op_profile"] = std::move(ops);
  }
  return row;
}

// Where a profiled step's time went: the `top` ops by time, the rest summed, and what no op held
// (the host between ops: the bench's loop, the model's host code, launches not yet issued).
void print_op_profile(const ModelRun& r, int steps, std::size_t top) {
  std::printf("\nWhere a step goes, %s %s (%d profiled step(s) of %.1f ms, every op drained before and after; the\n"
              "timed steps above ran without this):\n%s",
              r.name.c_str(), recompute_name(r.recompute), steps, 1e3 * r.profiled_step_s,
              op_profile_table(r.ops, r.profiled_step_s, top, "(outside ops: the host between them)").c_str());
}

}  // namespace

int train_bench(const std::vector<std::string>& args) {
  const std::optional<po::variables_map> vm = parse_train_command(args);
  if (!vm) return 0;
  const TrainOptions o = read_options(*vm);
  DeviceContext ctx(o.device);
  const bool gpu = o.device.device.kind == DeviceKind::CUDA;
  const BenchJson json(o.json);

  // The ceiling: the best of a few square fp32 GEMMs (2048 reaches OpenBLAS's steady state; a GPU
  // needs a larger product to fill its multiprocessors).
  const int gemm_n = o.gemm_size > 0 ? o.gemm_size : (gpu ? 8192 : 2048);
  double sgemm = 0.0;
  for (int trial = 0; trial < 3; ++trial) sgemm = std::max(sgemm, measure_gemm_flops(ctx, gemm_n, 0.5));
  std::printf("meshbench train: B=%d T=%d, %d timed step(s) after %d warm-up, device %s, %s, %d CPU thread(s)\n",
              o.batch, o.seq_len, o.steps, o.warmup, o.device.device.str().c_str(), o.dtype_name.c_str(),
              ctx.cpu_threads());
  std::printf("fp32 GEMM %d^3 (%s, best of 3 in this run): %.1f GFLOP/s\n", gemm_n, gpu ? "cuBLAS" : "OpenBLAS",
              sgemm / 1e9);

  TextTable table({"model", "recompute", "params", "tokens", "step ms", "fwd ms", "bwd ms", "opt ms", "tokens/s",
                   "GFLOP/s", "MFU", "act peak", "w/o head chunk", "vs first mode", "peak RSS"});
  TextTable work({"model", "recompute", "allocations", "host syncs", "launches", "copied"});
  std::vector<ModelRun> profiled;
  for (const std::string& name : o.models) {
    std::vector<ModelRun> runs;
    for (Recompute mode : o.recompute) {
      runs.push_back(run_model(o, name, mode));
      table.add_row(table_cells(runs.back(), runs.front(), sgemm));
      work.add_row(work_cells(runs.back()));
      json.append(json_row(runs.back(), o, ctx.cpu_threads(), sgemm));
      if (o.profile_steps > 0) profiled.push_back(runs.back());
    }
  }
  std::printf("%s", table.render().c_str());
  std::printf("act peak = the allocator's peak over the steps less what parameters, gradients and AdamW held "
              "before them;\n  w/o head chunk: less the LM head's one row chunk of logits [R, Vp] (its scratch, "
              "whatever --recompute says; no slot keeps the logits)\n");
  std::printf("MFU = model FLOPs (6 x matmul parameters x tokens + attention) / step time / fp32 GEMM rate%s\n",
              o.compute == DType::BF16 ? " (bf16 products can beat it: MFU > 1 is possible)" : "");
  std::printf("\nDevice work per timed step (counted on every backend; on the CPU the waits are free and the copies\n"
              "memmoves, but a GPU pays for each):\n%s", work.render().c_str());
  std::printf("allocations = reaching malloc or cudaMalloc; host syncs = the host waiting for the device (streams,\n"
              "  events, reductions, copies to or from host memory); launches = op calls (a kernel each on CUDA);\n"
              "  copied = bytes between host memory and device tensors\n");
  for (const ModelRun& r : profiled) print_op_profile(r, o.profile_steps, 20);
  return 0;
}

}  // namespace mt
