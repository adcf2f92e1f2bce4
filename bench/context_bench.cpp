#include "bench/context_bench.h"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_env.h"
#include "bench/bench_json.h"
#include "bench/bench_options.h"
#include "bench/bench_session.h"
#include "data/loader.h"
#include "data/shard.h"
#include "launch/command_line.h"
#include "launch/model_options.h"
#include "launch/options.h"
#include "launch/table.h"
#include "models/gpt_config.h"
#include "parallel/groups.h"
#include "parallel/layout_plan.h"
#include "perf/cluster.h"
#include "perf/cost_model.h"
#include "runtime/attention.h"
#include "runtime/error.h"  // defines: UsageError
#include "train/parallel_trainer.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace mt {
namespace {

const char* kSummary =
    "Context parallelism at one long sequence length: the same model and global batch trained on the "
    "first cp ranks of the job with --cp cp (meshtrain train's ParallelTrainer, ring attention over the cp "
    "group), for each cp of --cp-sizes, one after another (the other ranks wait). Per cp it reports the mean "
    "step time after warm-up (the slowest rank's), tokens/s, the exposed communication per step (host time "
    "waiting for the ring's transfers and the gradient reduction: what the progress lines call comm), the "
    "ring's bytes sent per rank and step, and the peak device memory per rank (the allocator's high-water "
    "mark over the run, parameters and AdamW state included; the largest rank's). Next to each, what the "
    "performance model (meshtrain plan) predicts for the run on this machine's CPU preset with the cores "
    "shared: step time, the ring's exposed time and the memory per rank. The data are random tokens written "
    "to a scratch shard per rank.";

struct ContextOptions {
  std::vector<int> cp_sizes;
  int batch = 0, seq_len = 0, steps = 0, warmup = 0;
  int vocab = 0;
  std::string json;
};

po::options_description context_options() {
  po::options_description desc("options");
  add_model_options(desc);
  desc.add_options()
      ("vocab", po::value<int>()->default_value(256), "vocabulary size (the data are random ids below it)")
      ("cp-sizes", po::value<std::string>()->default_value("1,2,4"),
       "comma-separated context-parallel sizes to run, each at most the job's ranks; each must cut --seq-len "
       "into 2 x cp chunks")
      ("batch", po::value<int>()->default_value(1), "sequences per step (the global batch, the same for every cp)")
      ("seq-len", po::value<int>()->default_value(4096),
       "tokens per sequence (the model's context is raised to it when shorter)");
  add_repeat_options(desc, 3, "timed steps per cp", "untimed steps first");
  add_json_option(desc, "append one JSON line per cp (bench \"context\") to this file");
  add_runtime_options(desc);
  return desc;
}

ContextOptions read_options(const po::variables_map& vm, int world_size) {
  ContextOptions o;
  for (const std::string& item : split_list(vm["cp-sizes"].as<std::string>())) {
    int cp = 0;
    try {
      std::size_t used = 0;
      cp = std::stoi(item, &used);
      if (used != item.size()) cp = 0;
    } catch (const std::exception&) {
      cp = 0;
    }
    if (cp < 1) throw UsageError("--cp-sizes: '" + item + "' is not a positive whole number");
    if (cp > world_size)
      throw UsageError("--cp-sizes: cp " + item + " needs " + item + " ranks, the job has " + std::to_string(world_size));
    o.cp_sizes.push_back(cp);
  }
  if (o.cp_sizes.empty()) throw UsageError("--cp-sizes needs at least one size");
  o.batch = vm["batch"].as<int>();
  o.seq_len = vm["seq-len"].as<int>();
  o.steps = vm["steps"].as<int>();
  o.warmup = vm["warmup"].as<int>();
  if (o.batch < 1 || o.seq_len < 2 || o.steps < 1 || o.warmup < 0)
    throw UsageError("--batch, --seq-len and --steps must be positive");
  for (const int cp : o.cp_sizes)
    if (o.seq_len % (2 * cp) != 0)
      throw UsageError("--cp-sizes: cp " + std::to_string(cp) + " cuts each sequence into " + std::to_string(2 * cp) +
                       " chunks: --seq-len " + std::to_string(o.seq_len) + " must be a multiple of " +
                       std::to_string(2 * cp));
  o.vocab = vm["vocab"].as<int>();
  if (o.vocab < 2) throw UsageError("--vocab must be at least 2");
  o.json = vm["json"].as<std::string>();
  return o;
}

// One shard of random ids, enough for every step, in a scratch directory of this process's own
// (removed with it).
class RandomShard {
 public:
  RandomShard(std::int64_t tokens, int vocab) {
    dir_ = fs::temp_directory_path() / ("meshbench-context-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::mt19937 rng(1234);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
    for (std::int32_t& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
    data::write_shard(dir_ / "random_train_000000.bin", std::span<const std::int32_t>(ids), data::kShardVersion, vocab);
  }
  ~RandomShard() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  RandomShard(const RandomShard&) = delete;
  RandomShard& operator=(const RandomShard&) = delete;
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

struct ContextRun {
  int cp = 1;
  double step_s = 0, comm_s = 0;  // means over the timed steps, the slowest rank's
  double ring_bytes = 0;          // sent per rank and step
  double peak_bytes = 0;          // the largest rank's allocator peak
  double loss = 0;
  // The performance model's (perf/cost_model.h, memory_model.h) for the same run.
  double predicted_step_s = 0, predicted_cp_comm_s = 0, predicted_peak_bytes = 0;
};

// What `meshtrain plan` predicts for a run of `plan` on cp ranks of this machine, `threads` each.
void predict(ContextRun& run, const GptConfig& config, const ContextOptions& o, const LayoutPlan& plan, int threads) {
  perf::TrainingShape training;
  training.seq_len = o.seq_len;
  training.global_batch = o.batch;
  training.attention = nn::attention_kernel_for(/*cpu=*/true);
  const perf::Prediction p = perf::predict_step(config, training, plan, perf::cpu_cluster(plan.mesh().world_size(), threads));
  run.predicted_step_s = p.step_s;
  run.predicted_cp_comm_s = p.time.cp_comm;
  run.predicted_peak_bytes = p.memory.total() - p.memory.reserved;  // the allocator's share: no runtime reserve
}

// Trains `steps` + `warmup` steps on the first cp ranks; the others take part in the reductions only.
ContextRun run_cp(BenchSession& s, const DeviceOptions& device, const GptConfig& config, const ContextOptions& o,
                  const fs::path& data, int cp) {
  Communicator& world = s.world();
  std::vector<int> members;
  if (world.rank() < cp)
    for (int r = 0; r < cp; ++r) members.push_back(r);
  std::unique_ptr<Communicator> job = world.split(members, "context");
  ContextRun run;
  run.cp = cp;
  double step = 0, comm = 0, bytes = 0, peak = 0;
  if (job) {
    DeviceContext ctx(device);  // its own allocator: this run's peak
    LayoutRequest request;
    request.cp = cp;
    request.micro_batch = o.batch;
    const LayoutPlan plan(request, layout_dims(config, o.seq_len), cp, o.batch);
    ParallelGroups groups = build_groups(*job, Mesh(plan.mesh()));
    TrainSettings settings;
    settings.seq_len = o.seq_len;
    settings.steps = o.warmup + o.steps;
    settings.schedule.max_lr = 1e-4f;
    settings.schedule.total_steps = settings.steps;
    data::DataLoader train = data::DataLoader::for_split(data, "train", o.seq_len, 1, config.vocab_size);
    ParallelTrainer trainer(ctx, *job, groups, config, DType::F32, train, nullptr, settings, plan);
    trainer.init(1);
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      const double sent = static_cast<double>(trainer.model().context_parallel_stats().bytes_sent);
      const StepRecord r = trainer.step();
      ctx.synchronize();
      if (i < o.warmup) continue;
      step += r.step_ms / 1e3 / o.steps;
      comm += r.time.comm_s / o.steps;
      bytes += (static_cast<double>(trainer.model().context_parallel_stats().bytes_sent) - sent) / o.steps;
      run.loss = r.loss;
    }
    peak = static_cast<double>(ctx.allocator().stats().peak);
    if (device.device.is_cpu()) predict(run, config, o, plan, ctx.cpu_threads());
  }
  // The job's view: the slowest rank's times, the largest rank's memory and traffic (the ranks
  // outside the run give 0). slowest_rank_seconds is the maximum over the world, whatever the unit.
  const auto largest = [](double x) { return slowest_rank_seconds(MPI_COMM_WORLD, x); };
  run.step_s = largest(step);
  run.comm_s = largest(comm);
  run.ring_bytes = largest(bytes);
  run.peak_bytes = largest(peak);
  return run;
}

nlohmann::ordered_json json_row(const ContextRun& r, const ContextOptions& o, const GptConfig& config,
                                const std::string& model, const ContextRun& first) {
  nlohmann::ordered_json row;
  row["bench"] = "context";
  row["model"] = model;
  row["params"] = config.real_parameter_count();
  row["seq_len"] = o.seq_len;
  row["batch"] = o.batch;
  row["cp"] = r.cp;
  row["step_s"] = r.step_s;
  row["tokens_per_s"] = static_cast<double>(o.batch) * o.seq_len / r.step_s;
  row["exposed_comm_s"] = r.comm_s;
  row["ring_bytes_per_rank"] = r.ring_bytes;
  row["peak_bytes_per_rank"] = r.peak_bytes;
  row["peak_vs_first"] = r.peak_bytes / first.peak_bytes;
  row["final_loss"] = r.loss;
  if (r.predicted_step_s > 0) {
    row["predicted_step_s"] = r.predicted_step_s;
    row["predicted_cp_comm_s"] = r.predicted_cp_comm_s;
    row["predicted_peak_bytes_per_rank"] = r.predicted_peak_bytes;
  }
  return row;
}

}  // namespace

int context_bench(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc = context_options();
  const auto vm = parse_command_line("meshbench context", kSummary, desc, args, mpi.world_rank());
  if (!vm) return 0;
  const RuntimeOptions runtime = read_runtime_options(*vm);
  BenchSession s = open_bench_session(runtime);
  const ContextOptions o = read_options(*vm, s.world().size());
  GptConfig config = read_model_config(*vm, o.vocab);
  config.max_seq_len = std::max(config.max_seq_len, o.seq_len);
  config.validate();
  // Every step reads batch sequences of seq_len + 1 tokens; a few more for the loader's windows.
  const RandomShard shard(static_cast<std::int64_t>(o.warmup + o.steps + 2) * o.batch * (o.seq_len + 1) + 1, o.vocab);
  DeviceOptions device;
  device.device = s.ctx().device();
  device.cpu_threads = s.ctx().cpu_threads();
  std::vector<ContextRun> runs;
  for (const int cp : o.cp_sizes) runs.push_back(run_cp(s, device, config, o, shard.dir(), cp));
  if (!s.root()) return 0;
  const std::string model = (*vm)["model"].as<std::string>();
  std::printf("meshbench context: %s (%.1fM parameters), %d sequence(s) of %d tokens per step, %d timed step(s) "
              "after %d warm-up, %d rank(s), device %s\n",
              model.c_str(), static_cast<double>(config.real_parameter_count()) / 1e6, o.batch, o.seq_len, o.steps,
              o.warmup, s.world().size(), s.ctx().device().str().c_str());
  TextTable table({"cp", "step ms", "tokens/s", "exposed comm ms", "ring MiB/rank", "peak MiB/rank", "peak vs first",
                   "predicted ms", "predicted ring ms", "predicted MiB/rank"});
  const BenchJson json(o.json);
  constexpr double MiB = 1024.0 * 1024.0;
  for (const ContextRun& r : runs) {
    table.add_row({std::to_string(r.cp), format_cell("%.0f", 1e3 * r.step_s),
                   format_cell("%.0f", static_cast<double>(o.batch) * o.seq_len / r.step_s),
                   format_cell("%.1f", 1e3 * r.comm_s), format_cell("%.1f", r.ring_bytes / MiB),
                   format_cell("%.1f", r.peak_bytes / MiB), format_cell("%.2f", r.peak_bytes / runs.front().peak_bytes),
                   r.predicted_step_s > 0 ? format_cell("%.0f", 1e3 * r.predicted_step_s) : "-",
                   r.predicted_step_s > 0 ? format_cell("%.1f", 1e3 * r.predicted_cp_comm_s) : "-",
                   r.predicted_step_s > 0 ? format_cell("%.1f", r.predicted_peak_bytes / MiB) : "-"});
    json.append(json_row(r, o, config, model, runs.front()));
  }
  std::printf("%s", table.render().c_str());
  std::printf("exposed comm = host time waiting for communication per step (ring transfers not hidden behind block "
              "attention, and the gradient reduction over the cp ranks); predicted: the performance model on this "
              "machine's CPU preset (on a GPU: none)\n");
  return 0;
}

}  // namespace mt
