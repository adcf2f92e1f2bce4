// `meshbench pipeline`: the real PipelineExecutor over a synthetic stage (bench/pipeline_stage.h),
// for every (stages, schedule, virtual stages, micro-batches) asked for; the measured bubble next
// to the formula and to the schedule's own unit-cost simulation.
#include "bench/pipeline_bench.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>

#include "bench/bench_env.h"
#include "bench/bench_json.h"
#include "bench/bench_options.h"
#include "bench/bench_session.h"
#include "bench/pipeline_stage.h"
#include "bench/step_timer.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "launch/options.h"
#include "launch/session.h"
#include "launch/table.h"
#include "parallel/pipeline_executor.h"
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

// The bubble of p stages, m micro-batches and v chunks per stage: the idle time (p-1)(t_f+t_b)/v
// over the step m(t_f+t_b) + (p-1)(t_f+t_b)/v. v = 1 is GPipe's and 1F1B's (p-1)/(m+p-1).
double theory_bubble(int p, int m, int v) {
  const double idle = static_cast<double>(p - 1) / v;
  return idle / (m + idle);
}

struct Config {
  int stages;
  Schedule schedule;
  int v() const { return schedule.virtual_stages; }
  int m() const { return schedule.micro_batches; }
  std::string name() const { return schedule_kind_name(schedule.kind); }
};

struct Result {
  double step_s = 0, step_min_s = 1e30;   // slowest rank's, mean and best over the timed steps
  double ideal_s = 0;                     // mean over ranks of their compute time
  double wait_s = 0;                      // mean over ranks of time blocked on receives
  double other_s = 0;                     // mean over ranks of their own step - compute - waits
  double forward_call_s = 0, backward_call_s = 0;  // measured, one (chunk, micro-batch), mean over ranks
  int held_peak = 0;                      // slots the runner held at once, most over ranks
  std::vector<double> rank_step_s, rank_compute_s, rank_wait_s;  // rank_step_s: its own, not the slowest
  double bubble = 0, theory = 0, simulated = 0, model_step_s = 0;
  int peak_in_flight = 0;
  double ratio() const { return theory > 0 ? bubble / theory : std::nan(""); }  // measured / theory
};

std::vector<double> all_gather(double mine) {
  int size = 0;
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<double> all(static_cast<std::size_t>(size));
  MT_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD));
  return all;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

struct RunSettings {
  double forward_s = 0;  // one micro-batch through the whole stage
  std::int64_t activation_bytes = 0;
  int steps = 0, warmup = 0;
};

// What this rank saw over the timed steps of one config: its own means and its runner's calls.
struct RankSteps {
  StepTimes slowest;  // the slowest rank's step
  double own = 0, compute = 0, wait = 0;
  double forward_calls_s = 0, backward_calls_s = 0;  // summed over the timed steps
  int peak_slots = 0;
};

// Every rank of the world runs the config on its pipeline (pp), each step after a world barrier.
RankSteps run_steps(const Config& c, Communicator& world, Communicator& pp, PipelineExecutor& executor,
                    TimedWork& work, DeviceContext& ctx, const RunSettings& rs) {
  SyntheticStage runner(ctx, c.schedule, pp.rank(), work, rs.forward_s / c.v(), rs.activation_bytes);
  RankSteps t;
  double forward_before = 0, backward_before = 0;
  for (int step = 0; step < rs.warmup + rs.steps; ++step) {
    if (step == rs.warmup) {
      forward_before = runner.forward_s_total();
      backward_before = runner.backward_s_total();
    }
    runner.begin_step(step);
    ExecutorStats stats;
    const double mine = time_after_barrier(world, [&] { stats = executor.run(c.schedule, runner); });
    const double slowest = slowest_rank_seconds(MPI_COMM_WORLD, mine);
    if (step < rs.warmup) continue;
    t.slowest.add(slowest, rs.steps);
    t.own += mine / rs.steps;
    t.compute += stats.compute_s / rs.steps;
    t.wait += stats.receive_wait_s / rs.steps;
  }
  t.forward_calls_s = runner.forward_s_total() - forward_before;
  t.backward_calls_s = runner.backward_s_total() - backward_before;
  t.peak_slots = runner.peak_slots();
  return t;
}

// Collective: the ranks' steps gathered into the row's numbers, next to the schedule's models.
Result summarise(const Config& c, const RankSteps& t, int steps) {
  Result r;
  r.step_s = t.slowest.mean_s;
  r.step_min_s = t.slowest.min_s;
  const double calls = static_cast<double>(steps) * c.m() * c.v();
  r.rank_step_s = all_gather(t.own);
  r.rank_compute_s = all_gather(t.compute);
  r.rank_wait_s = all_gather(t.wait);
  r.ideal_s = mean(r.rank_compute_s);
  r.wait_s = mean(r.rank_wait_s);
  r.other_s = mean(r.rank_step_s) - r.ideal_s - r.wait_s;
  r.forward_call_s = mean(all_gather(t.forward_calls_s / calls));
  r.backward_call_s = mean(all_gather(t.backward_calls_s / calls));
  const std::vector<double> held = all_gather(t.peak_slots);
  r.held_peak = static_cast<int>(*std::max_element(held.begin(), held.end()));

  r.bubble = 1.0 - r.ideal_s / r.step_s;
  r.theory = theory_bubble(c.stages, c.m(), c.v());
  r.simulated = simulate(c.schedule, 1.0, 2.0).bubble_fraction();
  // The schedule's step with the measured compute times and free messages: what the executor would
  // take if transfers and wake-ups cost nothing.
  r.model_step_s = simulate(c.schedule, r.forward_call_s, r.backward_call_s).makespan;
  const std::vector<int> peaks = peak_in_flight(c.schedule);
  r.peak_in_flight = *std::max_element(peaks.begin(), peaks.end());
  return r;
}

bool within_tenth(const Result& r) { return r.theory > 0 && std::abs(r.bubble / r.theory - 1.0) <= 0.10; }

struct PipelineOptions {
  std::vector<int> stages, micros, virtuals;
  std::vector<std::string> kinds;  // schedule names
  RunSettings run;
  StageWork work = StageWork::Sleep;
  bool overlap = true;
  std::string json;
};

po::options_description pipeline_options() {
  po::options_description desc("options");
  desc.add_options()
      ("stages", po::value<std::string>()->default_value(""),
       "pipeline stages p, comma-separated; the world is cut into world/p pipelines running side by side "
       "(default: one pipeline over every rank)")
      ("micro-batches", po::value<std::string>()->default_value("4,8,16"), "micro-batches per step m, comma-separated")
      ("virtual", po::value<std::string>()->default_value("2,4"),
       "model chunks per stage v for the interleaved schedule, comma-separated (each >= 2)")
      ("schedules", po::value<std::string>()->default_value("gpipe,1f1b,interleaved"),
       "schedules to measure: gpipe, 1f1b, interleaved")
      ("forward-ms", po::value<double>()->default_value(10.0),
       "forward time of one micro-batch through one stage, ms (backward: twice that); with v chunks each "
       "chunk takes forward-ms / v, so the work per step does not depend on v")
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
    "takes --forward-ms, each backward twice that, and every stage boundary carries a real tensor of "
    "--activation-bytes. For each configuration, the mean over --steps of the slowest rank's step; ideal = "
    "the stage's measured compute (m x (t_f + t_b)); bubble = 1 - ideal / step, next to the formula and to the "
    "schedule's unit-cost simulation. Run as meshbench pipeline under mpirun -np P.";

RunSettings read_run_settings(const po::variables_map& vm) {
  RunSettings rs;
  rs.forward_s = vm["forward-ms"].as<double>() / 1e3;
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
Config build_config(int p, ScheduleKind kind, const std::string& name, int v, int m) {
  Config c{p, {}};
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
std::vector<Config> build_configs(const PipelineOptions& o, int world_size) {
  std::vector<Config> configs;
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
      const std::vector<int> vs = kind == ScheduleKind::Interleaved ? o.virtuals : std::vector<int>{1};
      for (int v : vs)
        for (int m : o.micros) configs.push_back(build_config(p, kind, name, v, m));
    }
  }
  return configs;
}

// One message's time from world rank 0 to 1 through the communicator (half a round trip, mean of
// `trips`), the others idle: what each message on a schedule's critical path adds at least.
double one_way_seconds(Communicator& world, DeviceContext& ctx, std::int64_t bytes, int trips) {
  if (world.size() < 2) return 0;
  Tensor out = Tensor::zeros({std::max<std::int64_t>(1, (bytes + 3) / 4)}, DType::F32, ctx);
  Tensor in = Tensor::zeros(out.shape(), DType::F32, ctx);
  double total = 0;
  for (int t = -1; t < trips; ++t) {  // the first trip sets the path up, untimed
    const double trip = time_after_barrier(world, [&] {
      if (world.rank() == 0) {
        world.send(out, 1);
        world.recv(in, 1);
      } else if (world.rank() == 1) {
        world.recv(in, 0);
        world.send(out, 0);
      }
    });
    if (t >= 0) total += trip;
  }
  double mine = world.rank() == 0 ? total / (2.0 * trips) : 0;
  MT_MPI_CHECK(MPI_Bcast(&mine, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  return mine;
}

// This rank's pipeline when the world is cut into pipelines of p consecutive ranks.
std::vector<int> pipeline_members(int world_rank, int p) {
  std::vector<int> members(static_cast<std::size_t>(p));
  std::iota(members.begin(), members.end(), world_rank / p * p);
  return members;
}

// What the rows are read against, measured once before the configurations.
struct Probes {
  double gemm_call_s = 0;  // one sgemm call of the gemm work, mean over ranks
  double one_way_s = 0;    // one message rank 0 -> 1
};

void print_header(const BenchSession& s, const PipelineOptions& o, const Probes& probes) {
  const RunSettings& rs = o.run;
  std::printf("meshbench pipeline: %d rank(s) on %d host(s), backend %s, device %s, executor overlap %s\n",
              s.world().size(), s.hosts, s.world().backend_name().c_str(), s.session.binding.device.str().c_str(),
              o.overlap ? "on" : "off (--no-overlap)");
  std::printf("synthetic stage: forward %.3g ms + backward %.3g ms per micro-batch (each of v chunks: 1/v of "
              "that), work %s, %lld-byte activations per message\n",
              1e3 * rs.forward_s, 2e3 * rs.forward_s, stage_work_name(o.work),
              static_cast<long long>(rs.activation_bytes));
  if (o.work == StageWork::Gemm) {
    const unsigned cores = std::thread::hardware_concurrency();
    const int local_size = s.session.placement.local_size, threads = s.ctx().cpu_threads();
    std::printf("gemm work: %d x %d sgemm calls of %.3g ms each (calibrated, mean over ranks); honest only "
                "when ranks <= cores: here %d rank(s) x %d thread(s) on %u core(s)%s\n",
                TimedWork::kGemmSize, TimedWork::kGemmSize, 1e3 * probes.gemm_call_s, local_size, threads, cores,
                static_cast<unsigned>(local_size * threads) > cores
                    ? ": oversubscribed, the bubble mixes the schedule with CPU contention (use --work sleep)"
                    : "");
  }
  std::printf("one message rank 0 -> 1 (ping-pong / 2, the other ranks idle): %.1f us\n", 1e6 * probes.one_way_s);
  std::printf("each row: mean of %d step(s) after %d warm-up; step = slowest rank, ideal = mean over ranks of "
              "the measured compute, bubble = 1 - ideal / step\n",
              rs.steps, rs.warmup);
  std::printf("theory: gpipe, 1f1b (p-1)/(m+p-1); interleaved ((p-1)/v)/(m+(p-1)/v) (idle (p-1)(t_f+t_b)/v "
              "over m(t_f+t_b) of work plus that); sim = the schedule's simulate() bubble at unit cost, "
              "t_b = 2 t_f\n");
  std::fflush(stdout);
}

// Collective: every config in turn, one pipeline group (and executor) per stage count.
std::vector<Result> run_configs(const std::vector<Config>& configs, BenchSession& s, TimedWork& work,
                                const PipelineOptions& o) {
  std::vector<Result> results;
  for (std::size_t i = 0; i < configs.size();) {
    const int p = configs[i].stages;
    std::unique_ptr<Communicator> pp = s.world().split(pipeline_members(s.session.placement.world_rank, p));
    PipelineExecutor executor(*pp, s.ctx().stream(), ExecutorOptions{o.overlap});
    for (; i < configs.size() && configs[i].stages == p; ++i) {
      const RankSteps steps = run_steps(configs[i], s.world(), *pp, executor, work, s.ctx(), o.run);
      results.push_back(summarise(configs[i], steps, o.run.steps));
    }
  }
  return results;
}

// 1F1B's measured bubble at each (p, m), for the interleaved rows to compare against.
using BubbleByShape = std::map<std::pair<int, int>, double>;

BubbleByShape one_f_one_b_bubbles(const std::vector<Config>& configs, const std::vector<Result>& results) {
  BubbleByShape one_f_one_b;
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (configs[i].schedule.kind == ScheduleKind::OneFOneB)
      one_f_one_b[{configs[i].stages, configs[i].m()}] = results[i].bubble;
  return one_f_one_b;
}

// The JSON row's fields up to the measurement: where it ran and what it ran.
nlohmann::ordered_json settings_row(const BenchSession& s, const PipelineOptions& o, const Config& c) {
  nlohmann::ordered_json row;
  row["bench"] = "pipeline";
  row["ranks"] = s.world().size();
  row["hosts"] = s.hosts;
  row["device"] = device_kind(s.session.binding.device);
  row["backend"] = s.world().backend_name();
  row["pipelines"] = s.world().size() / c.stages;
  row["stages"] = c.stages;
  row["schedule"] = c.name();
  row["virtual_stages"] = c.v();
  row["micro_batches"] = c.m();
  row["work"] = stage_work_name(o.work);
  row["overlap"] = o.overlap;
  row["forward_s"] = o.run.forward_s;
  row["backward_s"] = 2 * o.run.forward_s;
  row["activation_bytes"] = o.run.activation_bytes;
  row["steps"] = o.run.steps;
  row["warmup"] = o.run.warmup;
  return row;
}

void add_measurement(nlohmann::ordered_json& row, const Result& r, double one_way_s) {
  row["step_s"] = r.step_s;
  row["step_min_s"] = r.step_min_s;
  row["ideal_s"] = r.ideal_s;
  row["bubble"] = r.bubble;
  row["bubble_best_step"] = 1.0 - r.ideal_s / r.step_min_s;  // one slow step (a hiccup) moves the mean
  row["theory"] = r.theory;
  row["simulated"] = r.simulated;
  row["ratio"] = r.theory > 0 ? nlohmann::ordered_json(r.ratio()) : nlohmann::ordered_json(nullptr);
  row["within_10pct"] = within_tenth(r);
  row["model_step_s"] = r.model_step_s;
  row["excess_s"] = r.step_s - r.model_step_s;
  row["receive_wait_s"] = r.wait_s;
  row["other_s"] = r.other_s;
  row["forward_call_s"] = r.forward_call_s;
  row["backward_call_s"] = r.backward_call_s;
  row["one_way_s"] = one_way_s;
  row["peak_in_flight"] = r.peak_in_flight;
  row["held_slots_peak"] = r.held_peak;
  row["rank_step_s"] = r.rank_step_s;
  row["rank_compute_s"] = r.rank_compute_s;
  row["rank_receive_wait_s"] = r.rank_wait_s;
}

void write_json_rows(const BenchSession& s, const PipelineOptions& o, const Probes& probes,
                     const std::vector<Config>& configs, const std::vector<Result>& results) {
  const BubbleByShape one_f_one_b = one_f_one_b_bubbles(configs, results);
  const BenchJson json(o.json);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    nlohmann::ordered_json row = settings_row(s, o, c);
    add_measurement(row, results[i], probes.one_way_s);
    const auto base = one_f_one_b.find({c.stages, c.m()});
    if (c.schedule.kind == ScheduleKind::Interleaved && base != one_f_one_b.end() && base->second > 0)
      row["bubble_vs_1f1b"] = results[i].bubble / base->second;
    if (o.work == StageWork::Gemm) row["gemm_call_s"] = probes.gemm_call_s;
    json.append(row);
  }
}

void print_results(const std::vector<Config>& configs, const std::vector<Result>& results) {
  TextTable table({"p", "schedule", "v", "m", "step ms", "ideal ms", "bubble", "theory", "sim", "meas/theory",
                   "excess ms", "wait ms", "other ms", "peak act"});
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const Result& r = results[i];
    table.add_row({std::to_string(c.stages), c.name(), std::to_string(c.v()), std::to_string(c.m()),
                   format_cell("%.2f", 1e3 * r.step_s), format_cell("%.2f", 1e3 * r.ideal_s), format_cell("%.4f", r.bubble),
                   format_cell("%.4f", r.theory), format_cell("%.4f", r.simulated), r.theory > 0 ? format_cell("%.3f", r.ratio()) : "-",
                   format_cell("%.2f", 1e3 * (r.step_s - r.model_step_s)), format_cell("%.2f", 1e3 * r.wait_s),
                   format_cell("%.2f", 1e3 * r.other_s), std::to_string(r.peak_in_flight)});
  }
  std::printf("%s", table.render().c_str());
  std::printf("excess = step - the schedule simulated with the measured compute times and free messages "
              "(transfers, wake-ups); wait = mean time blocked on receives; other = mean of a rank's own step - "
              "compute - wait (sends, posting, bookkeeping); peak act = most (chunk, micro-batch) "
              "activations a stage holds (parallel/schedule.h peak_in_flight; a chunk's is 1/v of a stage's)\n");
}

// The summary: interleaving (v = 2) against 1F1B at the same (p, m).
void print_interleaving_summary(const std::vector<Config>& configs, const std::vector<Result>& results) {
  const BubbleByShape one_f_one_b = one_f_one_b_bubbles(configs, results);
  TextTable vs({"p", "m", "1f1b bubble", "interleaved v=2", "ratio", "theory ratio", "< 0.6"});
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    if (c.schedule.kind != ScheduleKind::Interleaved || c.v() != 2) continue;
    const auto base = one_f_one_b.find({c.stages, c.m()});
    if (base == one_f_one_b.end() || base->second <= 0) continue;
    const double ratio = results[i].bubble / base->second;
    const double theory_ratio = results[i].theory / theory_bubble(c.stages, c.m(), 1);
    vs.add_row({std::to_string(c.stages), std::to_string(c.m()), format_cell("%.4f", base->second),
                format_cell("%.4f", results[i].bubble), format_cell("%.3f", ratio), format_cell("%.3f", theory_ratio),
                ratio < 0.6 ? "yes" : "no"});
  }
  std::printf("\nsummary: interleaved (v=2) bubble / 1F1B bubble at the same (p, m); goal < 0.6 (theory ratio = "
              "(m+p-1)/(2m+p-1))\n%s",
              vs.render().c_str());
}

// How many measured bubbles lie within 10% of the formula, naming those that do not.
void print_distance_from_theory(const std::vector<Config>& configs, const std::vector<Result>& results) {
  int near = 0, measurable = 0, missed = 0;
  std::ostringstream far;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (results[i].theory <= 0) continue;
    ++measurable;
    if (within_tenth(results[i])) {
      ++near;
      continue;
    }
    far << (missed++ == 0 ? "; not:" : "") << ' ' << configs[i].name() << "(p=" << configs[i].stages;
    if (configs[i].v() > 1) far << ",v=" << configs[i].v();
    far << ",m=" << configs[i].m() << ')';
  }
  std::printf("measured bubble within 10%% of theory (relative): %d of %d configuration(s)%s\n", near, measurable,
              far.str().c_str());
}

}  // namespace

int pipeline_bench(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc = pipeline_options();
  const auto vm = parse_command_line("meshbench pipeline", kSummary, desc, args, mpi.world_rank());
  if (!vm) return 0;
  const PipelineOptions options = read_options(*vm, mpi.world_size());
  const std::vector<Config> configs = build_configs(options, mpi.world_size());

  BenchSession s = open_bench_session(read_runtime_options(*vm));
  s.world().barrier();  // calibrate together: a gemm's rate is the one it has while the others compute
  TimedWork work(s.ctx(), options.work);
  Probes probes;
  probes.gemm_call_s = mean(all_gather(work.gemm_call_s()));
  probes.one_way_s = one_way_seconds(s.world(), s.ctx(), options.run.activation_bytes, 20);
  if (s.root()) print_header(s, options, probes);

  const std::vector<Result> results = run_configs(configs, s, work, options);
  if (!s.root()) return 0;
  write_json_rows(s, options, probes, configs, results);
  print_results(configs, results);
  print_interleaving_summary(configs, results);
  print_distance_from_theory(configs, results);
  return 0;
}

}  // namespace mt
