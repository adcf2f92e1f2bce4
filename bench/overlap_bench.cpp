#include "bench/overlap_bench.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "bench/bench_env.h"
#include "bench/bench_json.h"
#include "bench/bench_options.h"
#include "bench/bench_session.h"
#include "bench/overlap_zero3.h"
#include "bench/step_timer.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "launch/model_options.h"
#include "launch/table.h"
#include "models/gpt.h"
#include "models/gpt_sharding.h"
#include "parallel/grad_reducer.h"

namespace po = boost::program_options;

namespace mt {
namespace {

// Fixed pseudo-random tokens: the same on every rank (the data do not matter for the timing).
std::vector<std::int32_t> tokens(std::size_t n, int vocab, std::uint32_t salt) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = static_cast<std::int32_t>(((i + salt) * 2654435761u) % static_cast<std::uint32_t>(vocab));
  return t;
}

// Runs `region` warmup + steps times, each after an untimed `prepare` and a barrier; a step's time
// is the slowest rank's, so the row shows what the job waits for.
StepTimes measure(Communicator& world, int warmup, int steps, const std::function<void()>& prepare,
                  const std::function<void()>& region) {
  StepTimes m;
  for (int s = 0; s < warmup + steps; ++s) {
    prepare();
    const double t = slowest_rank_seconds(MPI_COMM_WORLD, time_after_barrier(world, region));
    if (s < warmup) continue;
    m.add(t, steps);
  }
  return m;
}

struct OverlapOptions {
  int batch = 0, seq_len = 0;  // B and T per rank
  int steps = 0, warmup = 0;
  int zero = 0;  // 1: reduce-scatter (ZeRO-1); 3: gathered units with and without prefetch
  double bucket_mb = 0;
  int vocab = 0;
  std::string json;
};

po::options_description overlap_options() {
  po::options_description desc("options");
  add_model_options(desc);
  desc.add_options()
      ("vocab", po::value<int>()->default_value(256),
       "vocabulary size (small by default: the tied embedding's gradient is final only at the very end "
       "of backward, so a GPT-2-sized vocabulary is one large bucket that nothing can hide)")
      ("batch", po::value<int>()->default_value(4), "sequences per rank B")
      ("seq-len", po::value<int>()->default_value(64), "tokens per sequence T")
      ("bucket-mb", po::value<double>()->default_value(4.0),
       "gradient bucket size in MiB (meshtrain train --bucket-mb; not used by --zero 3)")
      ("zero", po::value<int>()->default_value(0),
       "0: allreduce the buckets; 1: reduce-scatter them (ZeRO-1); 3: ZeRO-3, parameters sharded over the "
       "ranks and all-gathered per unit before each use: forward + backward steps with the next units' gathers "
       "prefetched and without, and the share of the gather wait that prefetching hides (twice the steps)");
  add_repeat_options(desc, 5, "timed repetitions of each measurement", "untimed repetitions first");
  add_json_option(desc, "append one JSON line (bench \"overlap\") to this file");
  add_runtime_options(desc);
  return desc;
}

const char* kSummary =
    "A data-parallel backward of a GPT over every rank (dp = ranks): the gradients are reduced in buckets "
    "(meshtrain's GradReducer). Measured four ways, each the mean over --steps of the slowest rank: "
    "compute (backward alone), communication (every bucket reduced, nothing computed), serial (backward, then "
    "the buckets: --no-overlap) and overlapped (buckets launched as backward finishes them). Overlap "
    "efficiency = (serial - overlapped) / min(compute, communication): the share of the smaller part that "
    "was hidden. The forward pass runs before each timed region, untimed. With --zero 3: forward and "
    "backward steps of a ZeRO-3 model (meshtrain train --zero 3) with the next units' all-gathers prefetched "
    "and without; each reports its step time and the time its uses waited for gathers, and the share of "
    "that wait prefetching hides.";

OverlapOptions read_options(const po::variables_map& vm) {
  OverlapOptions o;
  o.batch = vm["batch"].as<int>();
  o.seq_len = vm["seq-len"].as<int>();
  o.steps = vm["steps"].as<int>();
  o.warmup = vm["warmup"].as<int>();
  o.zero = vm["zero"].as<int>();
  if (o.batch < 1 || o.seq_len < 1 || o.steps < 1 || o.warmup < 0)
    throw UsageError("--batch, --seq-len and --steps must be positive");
  if (o.zero != 0 && o.zero != 1 && o.zero != 3)
    throw UsageError("--zero must be 0 or 1 (bucketed gradients), or 3 (gathered parameter units)");
  o.bucket_mb = vm["bucket-mb"].as<double>();
  if (!(o.bucket_mb > 0)) throw UsageError("--bucket-mb must be positive");
  o.vocab = vm["vocab"].as<int>();
  o.json = vm["json"].as<std::string>();
  return o;
}

// A whole GPT on every rank (dp = world) whose gradients two GradReducers reduce in the same
// buckets: one launching them during backward, one after it (--no-overlap).
class BucketedBackward {
 public:
  BucketedBackward(DeviceContext& ctx, Communicator& world, const GptConfig& config, const OverlapOptions& o)
      : ctx_(ctx), model_(ctx, config, DType::F32, GptPartition::whole(config), TensorParallel{}, world.size()),
        batch_(o.batch), seq_len_(o.seq_len) {
    model_.init(1);
    ParameterStore& store = model_.parameters();
    for (std::size_t i = 0; i < store.size(); ++i)
      flat_.push_back({model_.shards()[i].full.name, store.offset(i), model_.shards()[i].local.numel(),
                       model_.shards()[i].local.decay, 1.0});
    options_.bucket_bytes = static_cast<std::int64_t>(o.bucket_mb * 1024 * 1024);
    options_.shard = o.zero == 1;
    options_.overlap = true;
    overlapped_ = std::make_unique<GradReducer>(ctx, world, store.flat_grads(), flat_, options_);
    ReducerOptions serial = options_;
    serial.overlap = false;
    serial_ = std::make_unique<GradReducer>(ctx, world, store.flat_grads(), flat_, serial);
    inputs_ = tokens(static_cast<std::size_t>(batch_) * seq_len_, config.vocab_size, 1);
    targets_ = tokens(inputs_.size(), config.vocab_size, 7);
  }
  BucketedBackward(const BucketedBackward&) = delete;
  BucketedBackward& operator=(const BucketedBackward&) = delete;

  void forward() {
    model_.parameters().zero_grads(ctx_);
    model_.forward(inputs_, targets_, batch_, seq_len_, 1.0f);
    ctx_.synchronize();
  }
  void backward(GradReducer* reducer = nullptr) {
    if (reducer != nullptr) {
      model_.backward([reducer](std::size_t p) { reducer->mark_ready(static_cast<int>(p)); });
    } else {
      model_.backward();
    }
    ctx_.synchronize();
  }
  // Every bucket reduced in backward's order, nothing computed.
  void reduce_all() {
    overlapped_->begin();
    for (int p = static_cast<int>(flat_.size()) - 1; p >= 0; --p) overlapped_->mark_ready(p);
    overlapped_->finish();
    ctx_.synchronize();
  }
  // Backward with the reducer's buckets: returns how many were done before backward ended.
  int backward_reduced(bool overlap) {
    GradReducer& r = overlap ? *overlapped_ : *serial_;
    r.begin();
    backward(&r);
    r.finish();
    const int hidden = r.buckets_completed_before_finish();
    ctx_.synchronize();
    return hidden;
  }
  const BucketLayout& layout() const { return overlapped_->layout(); }
  std::int64_t bucket_bytes() const { return options_.bucket_bytes; }

 private:
  DeviceContext& ctx_;
  Gpt model_;
  int batch_, seq_len_;
  std::vector<FlatParam> flat_;
  ReducerOptions options_;
  std::unique_ptr<GradReducer> overlapped_, serial_;
  std::vector<std::int32_t> inputs_, targets_;
};

struct OverlapTimes {
  StepTimes compute, comm, serial, overlapped;
  int hidden_buckets = 0;  // buckets done before backward ended, the last overlapped step
  // (serial - overlapped) / min(compute, comm), and the same against the parts measured alone.
  double smaller() const { return std::min(compute.mean_s, comm.mean_s); }
  double hidden() const { return serial.mean_s - overlapped.mean_s; }
  double efficiency() const { return smaller() > 0 ? hidden() / smaller() : 0.0; }
  double hidden_vs_parts() const { return compute.mean_s + comm.mean_s - overlapped.mean_s; }
  double efficiency_vs_parts() const { return smaller() > 0 ? hidden_vs_parts() / smaller() : 0.0; }
};

// Collective: the four measurements, in this order.
OverlapTimes measure_all(Communicator& world, BucketedBackward& rig, int warmup, int steps) {
  OverlapTimes t;
  const auto forward = [&] { rig.forward(); };
  t.compute = measure(world, warmup, steps, forward, [&] { rig.backward(); });
  t.comm = measure(world, warmup, steps, [] {}, [&] { rig.reduce_all(); });
  t.serial = measure(world, warmup, steps, forward, [&] { rig.backward_reduced(false); });
  t.overlapped = measure(world, warmup, steps, forward, [&] { t.hidden_buckets = rig.backward_reduced(true); });
  return t;
}

void print_report(const BenchSession& s, const OverlapOptions& o, const GptConfig& config, const BucketedBackward& rig,
                  const OverlapTimes& t) {
  const double bytes = 4.0 * static_cast<double>(rig.layout().flat_numel);
  std::printf("meshbench overlap: %d rank(s) on %d host(s), dp %d, backend %s, device %s\n", s.world().size(), s.hosts,
              s.world().size(), s.world().backend_name().c_str(), s.session.binding.device.str().c_str());
  std::printf("model %s, %.2fM parameters, B=%d T=%d per rank; %.1f MiB of gradients in %d bucket(s) of %.1f MiB, %s\n",
              config.describe().c_str(), static_cast<double>(config.parameter_count()) / 1e6, o.batch, o.seq_len,
              bytes / (1024.0 * 1024.0), rig.layout().size(), o.bucket_mb,
              o.zero ? "reduce-scatter (ZeRO-1)" : "allreduce");
  std::printf("each figure: mean of %d step(s) after %d warm-up, the slowest rank's time\n", o.steps, o.warmup);
  TextTable table({"measurement", "mean ms", "min ms", "what runs"});
  const auto add = [&](const char* name, const StepTimes& m, const char* what) {
    table.add_row({name, format_cell("%.1f", 1e3 * m.mean_s), format_cell("%.1f", 1e3 * m.min_s), what});
  };
  add("compute", t.compute, "backward alone");
  add("communication", t.comm, "every bucket reduced, nothing computed");
  add("serial", t.serial, "backward, then the buckets (--no-overlap)");
  add("overlapped", t.overlapped, "buckets launched during backward");
  std::printf("%s", table.render().c_str());
  std::printf("hidden %.1f ms of min(compute, communication) = %.1f ms: overlap efficiency %.2f; overlapped / "
              "max(compute, communication) = %.2f; %d of %d bucket(s) done before backward ended (last step)\n",
              1e3 * t.hidden(), 1e3 * t.smaller(), t.efficiency(),
              t.overlapped.mean_s / std::max(t.compute.mean_s, t.comm.mean_s), t.hidden_buckets, rig.layout().size());
  // The same against the parts measured alone: differs from the above where running both at once
  // costs more than their sum (threads competing for cores) or less.
  std::printf("against compute + communication measured alone (%.1f ms): hidden %.1f ms, efficiency %.2f\n",
              1e3 * (t.compute.mean_s + t.comm.mean_s), 1e3 * t.hidden_vs_parts(), t.efficiency_vs_parts());
}

// The fields every overlap row starts with: where it ran and on what.
nlohmann::ordered_json row_header(const BenchSession& s, const OverlapOptions& o, const GptConfig& config) {
  nlohmann::ordered_json row;
  row["bench"] = "overlap";
  row["ranks"] = s.world().size();
  row["hosts"] = s.hosts;
  row["backend"] = s.world().backend_name();
  row["device"] = device_kind(s.session.binding.device);
  row["model"] = config.describe();
  row["params"] = config.parameter_count();
  row["tokens_per_rank"] = o.batch * o.seq_len;
  return row;
}

nlohmann::ordered_json json_row(const BenchSession& s, const OverlapOptions& o, const GptConfig& config,
                                const BucketedBackward& rig, const OverlapTimes& t) {
  nlohmann::ordered_json row = row_header(s, o, config);
  row["gradient_bytes"] = 4.0 * static_cast<double>(rig.layout().flat_numel);
  row["buckets"] = rig.layout().size();
  row["bucket_bytes"] = rig.bucket_bytes();
  row["zero"] = o.zero;
  row["compute_s"] = t.compute.mean_s;
  row["comm_s"] = t.comm.mean_s;
  row["serial_s"] = t.serial.mean_s;
  row["overlapped_s"] = t.overlapped.mean_s;
  row["hidden_s"] = t.hidden();
  row["efficiency"] = t.efficiency();
  row["hidden_vs_parts_s"] = t.hidden_vs_parts();
  row["efficiency_vs_parts"] = t.efficiency_vs_parts();
  row["buckets_done_before_backward_end"] = t.hidden_buckets;
  return row;
}

void print_zero3_report(const BenchSession& s, const OverlapOptions& o, const GptConfig& config,
                        const Zero3Overlap& z) {
  std::printf("meshbench overlap --zero 3: %d rank(s) on %d host(s), dp %d, backend %s, device %s\n",
              s.world().size(), s.hosts, s.world().size(), s.world().backend_name().c_str(),
              s.session.binding.device.str().c_str());
  std::printf("model %s, %.2fM parameters, B=%d T=%d per rank; %d units, %.1f MiB of parameters gathered per "
              "pass over them (forward, and again in backward)\n",
              config.describe().c_str(), static_cast<double>(config.parameter_count()) / 1e6, o.batch, o.seq_len,
              z.units, z.param_bytes / (1024.0 * 1024.0));
  std::printf("each figure: mean of %d step(s) (forward + backward) after %d untimed (the first learns the order "
              "of uses), the slowest rank's\n",
              o.steps, o.warmup + 1);
  TextTable table({"prefetch", "step ms", "min ms", "gather wait ms", "gathers", "prefetched"});
  const auto add = [&](const char* name, const GatherRun& r) {
    table.add_row({name, format_cell("%.1f", 1e3 * r.step.mean_s), format_cell("%.1f", 1e3 * r.step.min_s),
                   format_cell("%.1f", 1e3 * r.gather_wait_s), format_cell("%.0f", r.gathers),
                   format_cell("%.0f", r.prefetched)});
  };
  add("off", z.off);
  add("on", z.on);
  std::printf("%s", table.render().c_str());
  std::printf("gather wait %.1f ms -> %.1f ms per step: %.0f%% of the gathering hidden; step %.1f ms -> %.1f ms "
              "(%.2fx)\n",
              1e3 * z.off.gather_wait_s, 1e3 * z.on.gather_wait_s, 100.0 * z.hidden_fraction(),
              1e3 * z.off.step.mean_s, 1e3 * z.on.step.mean_s,
              z.on.step.mean_s > 0 ? z.off.step.mean_s / z.on.step.mean_s : 0.0);
}

nlohmann::ordered_json zero3_json_row(const BenchSession& s, const OverlapOptions& o, const GptConfig& config,
                                      const Zero3Overlap& z) {
  nlohmann::ordered_json row = row_header(s, o, config);
  row["zero"] = 3;
  row["units"] = z.units;
  row["gathered_bytes"] = z.param_bytes;
  row["step_s_no_prefetch"] = z.off.step.mean_s;
  row["step_s_prefetch"] = z.on.step.mean_s;
  row["gather_wait_s_no_prefetch"] = z.off.gather_wait_s;
  row["gather_wait_s_prefetch"] = z.on.gather_wait_s;
  row["gathers_per_step"] = z.on.gathers;
  row["prefetched_per_step"] = z.on.prefetched;
  row["hidden_fraction"] = z.hidden_fraction();
  return row;
}

}  // namespace

int overlap_bench(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc = overlap_options();
  const auto vm = parse_command_line("meshbench overlap", kSummary, desc, args, mpi.world_rank());
  if (!vm) return 0;
  const OverlapOptions o = read_options(*vm);

  BenchSession s = open_bench_session(read_runtime_options(*vm));
  const GptConfig config = read_model_config(*vm, o.vocab);
  if (o.seq_len > config.max_seq_len) throw UsageError("--seq-len is longer than the model's max_seq_len");
  if (o.zero == 3) {
    const std::vector<std::int32_t> inputs = tokens(static_cast<std::size_t>(o.batch) * o.seq_len, config.vocab_size, 1);
    const std::vector<std::int32_t> targets = tokens(inputs.size(), config.vocab_size, 7);
    const Zero3Overlap z =
        measure_zero3_overlap(s.ctx(), s.world(), config, inputs, targets, o.batch, o.seq_len, o.warmup, o.steps);
    if (!s.root()) return 0;
    print_zero3_report(s, o, config, z);
    BenchJson(o.json).append(zero3_json_row(s, o, config, z));
    return 0;
  }
  BucketedBackward rig(s.ctx(), s.world(), config, o);
  const OverlapTimes times = measure_all(s.world(), rig, o.warmup, o.steps);
  if (!s.root()) return 0;
  print_report(s, o, config, rig, times);
  BenchJson(o.json).append(json_row(s, o, config, rig, times));
  return 0;
}

}  // namespace mt
