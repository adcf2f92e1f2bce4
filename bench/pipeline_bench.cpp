// `meshbench pipeline`: the real PipelineExecutor over a synthetic stage (bench/pipeline_stage.h),
// for every (stages, schedule, virtual stages, micro-batches) asked for; the measured bubble next
// to the formula and to the schedule's own unit-cost simulation. This file reads the options and
// plans the configurations; bench/pipeline_run.h runs them, bench/pipeline_report.h prints them.
#include "bench/pipeline_bench.h"

#include <boost/program_options.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/bench_session.h"
#include "bench/pipeline_plan.h"
#include "bench/pipeline_report.h"
#include "bench/pipeline_run.h"
#include "bench/pipeline_stage.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "launch/options.h"
#include "launch/session.h"
#include "parallel/schedule.h"

namespace po = boost::program_options;

namespace mt {
namespace {

constexpr int kMaxTags = 32767;  // the MPI standard's least MPI_TAG_UB

std::vector<int> parse_positive_list(const std::string& option, const std::string& text) {
  std::vector<int> values;
  for (const std::string& item : split_list(text)) {
    const std::optional<int> v = parse_whole_number(item);
    if (!v || *v < 1)
      throw UsageError("--" + option + " takes positive integers separated by commas, not '" + text + "'");
    values.push_back(*v);
  }
  if (values.empty()) throw UsageError("--" + option + " is empty");
  return values;
}

po::options_description pipeline_options() {
  po::options_description desc("options");
  desc.add_options()
      ("stages", po::value<std::string>()->default_value(""),
       "pipeline stages p, comma-separated; the world is cut into world/p pipelines running side by side "
       "(default: one pipeline over every rank)")
      ("micro-batches", po::value<std::string>()->default_value("4,8,16"), "micro-batches per step m, comma-separated")
      ("virtual", po::value<std::string>()->default_value("2,4"),
       "model chunks per stage v for the interleaved schedule, comma-separated (each >= 2); zb-v always has 2 "
       "(in a V), the others 1")
      ("schedules", po::value<std::string>()->default_value("gpipe,1f1b,interleaved,zb-h1,zb-v"),
       "schedules to measure: gpipe, 1f1b, interleaved, zb-h1 (1F1B's memory, backward split into B and W, W "
       "filling the bubble), zb-v (two chunks per stage in a V, near-zero bubble from m >= 2p)")
      ("forward-ms", po::value<double>()->default_value(10.0),
       "forward time of one micro-batch through one stage, ms (backward: twice that); with v chunks each "
       "chunk takes forward-ms / v, so the work per step does not depend on v")
      ("weight-share", po::value<double>()->default_value(0.5),
       "the part of the backward that is W (weight gradients) in zb-h1 and zb-v, in [0, 1): B (input "
       "gradients) takes the rest; 0.5 = B and W equal, as for a GEMM. The other schedules run the backward "
       "whole; their time does not change")
      ("activation-bytes", po::value<std::string>()->default_value("256K"),
       "size of every activation and gradient message between stages (e.g. 65536, 256K, 1M)")
      ("work", po::value<std::string>()->default_value("sleep"),
       "what a computation does: sleep (a timed sleep: exact even with more ranks than cores) or gemm (real "
       "sgemm calls of that duration, calibrated once: honest only with a core per rank)")
      ("no-overlap", po::bool_switch(),
       "run the executor without overlap (receives posted where the schedule puts them, sends waited for "
       "before the next computation)");
  add_repeat_options(desc, 4, "timed steps per configuration", "untimed steps first");
  add_json_option(desc, "append one JSON line per configuration (bench \"pipeline\")");
  add_runtime_options(desc);
  return desc;
}

const char* kSummary =
    "Runs meshtrain's PipelineExecutor on a synthetic model: each forward of a micro-batch through a stage "
    "takes --forward-ms, each backward twice that (in zb-h1 and zb-v split into B and W by --weight-share), "
    "and every stage boundary carries a real tensor of --activation-bytes. For each configuration, the mean "
    "over --steps of the slowest rank's step; ideal = the stage's measured compute (m x (t_f + t_b)); bubble = "
    "1 - ideal / step, next to the formula (zb-v: its simulation) and to the schedule's simulation at those "
    "costs. The zero-bubble rows come at the same p and m as 1f1b's, with a summary of their bubble against "
    "1f1b's. Run as meshbench pipeline under mpirun -np P.";

PipelineRunSettings read_run_settings(const po::variables_map& vm) {
  PipelineRunSettings rs;
  rs.forward_s = vm["forward-ms"].as<double>() / 1e3;
  rs.weight_share = vm["weight-share"].as<double>();
  if (!(rs.weight_share >= 0 && rs.weight_share < 1)) throw UsageError("--weight-share must be in [0, 1)");
  rs.steps = vm["steps"].as<int>();
  rs.warmup = vm["warmup"].as<int>();
  if (!(rs.forward_s > 0 && rs.forward_s < 60)) throw UsageError("--forward-ms must be above 0 and below a minute");
  if (rs.steps < 1 || rs.warmup < 0) throw UsageError("--steps must be at least 1 and --warmup at least 0");
  try {
    rs.activation_bytes = static_cast<std::int64_t>(parse_bytes(vm["activation-bytes"].as<std::string>()));
  } catch (const Error& e) {
    throw UsageError("--activation-bytes: " + e.message());
  }
  if (rs.activation_bytes < 16) throw UsageError("--activation-bytes must be at least 16 (the message's check head)");
  return rs;
}

PipelineOptions read_options(const po::variables_map& vm, int world_size) {
  PipelineOptions o;
  const std::string stages_text = vm["stages"].as<std::string>();
  o.stages = stages_text.empty() ? std::vector<int>{world_size} : parse_positive_list("stages", stages_text);
  o.micros = parse_positive_list("micro-batches", vm["micro-batches"].as<std::string>());
  o.virtuals = parse_positive_list("virtual", vm["virtual"].as<std::string>());
  o.kinds = split_list(vm["schedules"].as<std::string>());
  if (o.kinds.empty()) throw UsageError("--schedules is empty");
  o.run = read_run_settings(vm);
  o.work = parse_stage_work(vm["work"].as<std::string>());
  o.overlap = !vm["no-overlap"].as<bool>();
  o.json = vm["json"].as<std::string>();
  return o;
}

// One schedule, built (and so checked) now: a bad combination is a usage error naming it.
PipelineConfig build_config(int p, ScheduleKind kind, const std::string& name, int v, int m) {
  PipelineConfig c{p, {}};
  try {
    c.schedule = make_schedule(kind, p, m, v);
  } catch (const Error& e) {
    throw UsageError(name + " with " + std::to_string(p) + " stage(s), " + std::to_string(m) +
                     " micro-batch(es), " + std::to_string(v) + " virtual stage(s): " + e.message());
  }
  if (c.schedule.tag_count() > kMaxTags)
    throw UsageError(name + " with " + std::to_string(m) + " micro-batches and " + std::to_string(v) +
                     " virtual stages needs more message tags than MPI guarantees (" + std::to_string(kMaxTags) +
                     ")");
  return c;
}

// The schedules asked for, built (and so checked) before anything runs: a bad combination is a
// usage error, said once.
std::vector<PipelineConfig> build_configs(const PipelineOptions& o, int world_size) {
  std::vector<PipelineConfig> configs;
  for (int p : o.stages) {
    if (world_size % p != 0)
      throw UsageError("--stages " + std::to_string(p) + " does not divide the " + std::to_string(world_size) +
                       " ranks into whole pipelines");
    for (const std::string& name : o.kinds) {
      ScheduleKind kind{};
      try {
        kind = parse_schedule_kind(name);
      } catch (const Error& e) {
        throw UsageError("--schedules: " + e.message());
      }
      const std::vector<int> vs = kind == ScheduleKind::Interleaved   ? o.virtuals
                                  : kind == ScheduleKind::ZeroBubbleV ? std::vector<int>{2}
                                                                      : std::vector<int>{1};
      for (int v : vs)
        for (int m : o.micros) configs.push_back(build_config(p, kind, name, v, m));
    }
  }
  return configs;
}

}  // namespace

int pipeline_bench(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc = pipeline_options();
  const auto vm = parse_command_line("meshbench pipeline", kSummary, desc, args, mpi.world_rank());
  if (!vm) return 0;
  const PipelineOptions options = read_options(*vm, mpi.world_size());
  const std::vector<PipelineConfig> configs = build_configs(options, mpi.world_size());

  BenchSession s = open_bench_session(read_runtime_options(*vm));
  s.world().barrier();  // calibrate together: a gemm's rate is the one it has while the others compute
  TimedWork work(s.ctx(), options.work);
  const PipelineProbes probes = measure_probes(s, work, options.run.activation_bytes);
  if (s.root()) print_pipeline_header(s, options, probes);

  const std::vector<PipelineResult> results = run_configs(configs, s, work, options);
  if (!s.root()) return 0;
  write_pipeline_json_rows(s, options, probes, configs, results);
  print_pipeline_results(configs, results);
  print_interleaving_summary(configs, results);
  print_zero_bubble_summary(configs, results);
  print_distance_from_theory(configs, results);
  return 0;
}

}  // namespace mt
