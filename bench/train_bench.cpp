#include "bench/train_bench.h"

#include <sys/resource.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <stdexcept>

#include "bench/bench_json.h"
#include "launch/path_option.h"
#include "launch/table.h"
#include "models/gpt.h"
#include "runtime/gemm_rate.h"
#include "optim/adamw.h"
#include "optim/grad_norm.h"

namespace po = boost::program_options;

namespace mt {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

struct Timing {
  double forward = 0, backward = 0, optimizer = 0;
  double total() const { return forward + backward + optimizer; }
};

// Times `steps` training steps after `warmup` untimed ones; the data are fixed random tokens.
Timing run_steps(DeviceContext& ctx, Gpt& model, AdamW& opt, int B, int T, int warmup, int steps) {
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(B) * T), targets(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<std::int32_t>((i * 2654435761u) % static_cast<std::uint32_t>(model.config().vocab_size));
    targets[i] = static_cast<std::int32_t>((i * 40503u + 7) % static_cast<std::uint32_t>(model.config().vocab_size));
  }
  Timing t;
  for (int s = 0; s < warmup + steps; ++s) {
    const bool timed = s >= warmup;
    auto t0 = clock_type::now();
    model.parameters().zero_grads(ctx);
    model.forward(inputs, targets, B, T);
    ctx.synchronize();
    const double f = since(t0);
    t0 = clock_type::now();
    model.backward();
    ctx.synchronize();
    const double b = since(t0);
    t0 = clock_type::now();
    const Tensor g = model.parameters().flat_grads();
    const double norm = std::sqrt(sum_of_squares(ctx, std::span<const Tensor>(&g, 1)));
    opt.step(1e-4f, static_cast<float>(clip_scale(norm, 1.0)));
    ctx.synchronize();
    const double o = since(t0);
    if (timed) {
      t.forward += f / steps;
      t.backward += b / steps;
      t.optimizer += o / steps;
    }
  }
  return t;
}

}  // namespace

int train_bench(const std::vector<std::string>& args) {
  po::options_description desc("meshbench train options");
  desc.add_options()("help,h", "print this help")
      ("models", po::value<std::string>()->default_value("small,gpt2"),
       "comma-separated presets to measure, smallest first (peak memory is per process)")
      ("batch", po::value<int>()->default_value(4), "sequences per step B")
      ("seq-len", po::value<int>()->default_value(64), "tokens per sequence T")
      ("steps", po::value<int>()->default_value(5), "timed steps per model")
      ("warmup", po::value<int>()->default_value(1), "untimed steps first")
      ("cpu-threads", po::value<int>()->default_value(0), "threads (0: all cores)")
      ("device", po::value<std::string>()->default_value("cpu"), "cpu, or cuda:N (one GPU)")
      ("dtype", po::value<std::string>()->default_value("fp32"),
       "compute precision of the matrix products: fp32, or bf16 (bf16 operands, fp32 accumulation and master weights)")
      ("gemm-size", po::value<int>()->default_value(0), "n of the n^3 sgemm that measures the ceiling (0: 2048 on CPU, 8192 on GPU)")
      ("json", path_value(PathKind::WriteFile)->default_value(""), "append one JSON line per model to this file (for meshtrain plan --calibrate)");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: meshbench train [options]\n\nSingle-rank training throughput and MFU of GPT shapes on "
                 "the CPU or one GPU, next to the fp32 GEMM rate measured in the same run.\n\n"
              << desc;
    return 0;
  }
  po::notify(vm);
  check_path_options(desc, vm);
  const int B = vm["batch"].as<int>(), T = vm["seq-len"].as<int>();
  const int steps = vm["steps"].as<int>(), warmup = vm["warmup"].as<int>();
  DeviceOptions options;
  options.cpu_threads = vm["cpu-threads"].as<int>() > 0 ? vm["cpu-threads"].as<int>() : default_cpu_threads(1);
  options.device = Device::parse(vm["device"].as<std::string>());
  const std::string dtype_name = vm["dtype"].as<std::string>();
  if (dtype_name != "fp32" && dtype_name != "bf16") throw std::runtime_error("--dtype must be fp32 or bf16, not " + dtype_name);
  const DType compute = dtype_name == "bf16" ? DType::BF16 : DType::F32;
  DeviceContext ctx(options);
  const bool gpu = options.device.kind == DeviceKind::CUDA;
  const BenchJson json(vm["json"].as<std::string>());

  // The ceiling: the best of a few square fp32 GEMMs (2048 reaches OpenBLAS's steady state; a GPU
  // needs a larger product to fill its multiprocessors).
  const int gemm_n = vm["gemm-size"].as<int>() > 0 ? vm["gemm-size"].as<int>() : (gpu ? 8192 : 2048);
  double sgemm = 0.0;
  for (int trial = 0; trial < 3; ++trial) sgemm = std::max(sgemm, measure_gemm_flops(ctx, gemm_n, 0.5));
  std::printf("meshbench train: B=%d T=%d, %d timed step(s) after %d warm-up, device %s, %s, %d CPU thread(s)\n", B,
              T, steps, warmup, options.device.str().c_str(), dtype_name.c_str(), ctx.cpu_threads());
  std::printf("fp32 GEMM %d^3 (%s, best of 3 in this run): %.1f GFLOP/s\n", gemm_n, gpu ? "cuBLAS" : "OpenBLAS",
              sgemm / 1e9);
  TextTable table({"model", "params", "tokens", "step ms", "fwd ms", "bwd ms", "opt ms", "tokens/s", "GFLOP/s",
                   "MFU", "peak RSS"});
  std::string list = vm["models"].as<std::string>();
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (name.empty()) continue;
    GptConfig config = gpt_preset(name);
    Gpt model(ctx, config, compute);
    model.init(1);
    std::vector<ParamSlot> slots;
    for (std::size_t i = 0; i < model.parameters().size(); ++i)
      slots.push_back({model.parameters().spec(i).name, model.parameters().param(i), model.parameters().grad(i),
                       model.parameters().spec(i).decay});
    AdamW opt(ctx, std::move(slots));
    const Timing t = run_steps(ctx, model, opt, B, T, warmup, steps);
    const double tokens = static_cast<double>(B) * T;
    const double flops = tokens * config.training_flops_per_token(T) / t.total();
    table.add_row({name, format_cell("%.1fM", static_cast<double>(config.real_parameter_count()) / 1e6), format_cell("%.0f", tokens),
                   format_cell("%.0f", 1e3 * t.total()), format_cell("%.0f", 1e3 * t.forward), format_cell("%.0f", 1e3 * t.backward),
                   format_cell("%.0f", 1e3 * t.optimizer), format_cell("%.0f", tokens / t.total()), format_cell("%.1f", flops / 1e9),
                   format_cell("%.2f", flops / sgemm), format_cell("%.2f GiB", peak_rss_bytes() / (1024.0 * 1024 * 1024))});
    nlohmann::ordered_json row;
    row["bench"] = "train";
    row["device"] = gpu ? "cuda" : "cpu";
    row["dtype"] = dtype_name;
    row["model"] = name;
    row["params"] = config.real_parameter_count();
    row["tokens_per_step"] = tokens;
    row["step_s"] = t.total();
    row["forward_s"] = t.forward;
    row["backward_s"] = t.backward;
    row["optimizer_s"] = t.optimizer;
    row["model_flops_per_step"] = tokens * config.training_flops_per_token(T);
    row["gemm_flops_per_s"] = sgemm;
    row["threads"] = ctx.cpu_threads();
    row["mfu"] = flops / sgemm;
    json.append(row);
  }
  std::printf("%s", table.render().c_str());
  std::printf("MFU = model FLOPs (6 x matmul parameters x tokens + attention) / step time / fp32 GEMM rate%s\n",
              compute == DType::BF16 ? " (bf16 products can beat it: MFU > 1 is possible)" : "");
  return 0;
}

}  // namespace mt
