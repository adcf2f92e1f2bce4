// `meshbench pipeline`'s output: the header, the table, the summaries and the JSON rows.
#include "bench/pipeline_report.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "bench/bench_env.h"
#include "bench/bench_json.h"
#include "launch/table.h"

namespace mt {
namespace {

bool within_tenth(const PipelineResult& r) { return r.theory > 0 && std::abs(r.bubble / r.theory - 1.0) <= 0.10; }

// 1F1B's measured bubble at each (p, m), for the interleaved rows to compare against.
using BubbleByShape = std::map<std::pair<int, int>, double>;

BubbleByShape one_f_one_b_bubbles(const std::vector<PipelineConfig>& configs,
                                  const std::vector<PipelineResult>& results) {
  BubbleByShape one_f_one_b;
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (configs[i].schedule.kind == ScheduleKind::OneFOneB)
      one_f_one_b[{configs[i].stages, configs[i].m()}] = results[i].bubble;
  return one_f_one_b;
}

// The JSON row's fields up to the measurement: where it ran and what it ran.
nlohmann::ordered_json settings_row(const BenchSession& s, const PipelineOptions& o, const PipelineConfig& c) {
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
  row["weight_share"] = o.run.weight_share;
  row["activation_bytes"] = o.run.activation_bytes;
  row["steps"] = o.run.steps;
  row["warmup"] = o.run.warmup;
  return row;
}

void add_measurement(nlohmann::ordered_json& row, const PipelineResult& r, double one_way_s) {
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
  row["weight_call_s"] = r.weight_call_s;
  row["one_way_s"] = one_way_s;
  row["peak_in_flight"] = r.peak_in_flight;
  row["held_slots_peak"] = r.held_peak;
  row["rank_step_s"] = r.rank_step_s;
  row["rank_compute_s"] = r.rank_compute_s;
  row["rank_receive_wait_s"] = r.rank_wait_s;
}

}  // namespace

void print_pipeline_header(const BenchSession& s, const PipelineOptions& o, const PipelineProbes& probes) {
  const PipelineRunSettings& rs = o.run;
  std::printf("meshbench pipeline: %d rank(s) on %d host(s), backend %s, device %s, executor overlap %s\n",
              s.world().size(), s.hosts, s.world().backend_name().c_str(), s.session.binding.device.str().c_str(),
              o.overlap ? "on" : "off (--no-overlap)");
  std::printf("synthetic stage: forward %.3g ms + backward %.3g ms per micro-batch (each of v chunks: 1/v of "
              "that; zb-h1, zb-v: B %.3g ms + W %.3g ms, --weight-share %.2f), work %s, %lld-byte activations per "
              "message\n",
              1e3 * rs.forward_s, 2e3 * rs.forward_s, 2e3 * rs.forward_s * (1 - rs.weight_share),
              2e3 * rs.forward_s * rs.weight_share, rs.weight_share, stage_work_name(o.work),
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
              "over m(t_f+t_b) of work plus that); zb-h1 (p-1)(F+B-W)/(m(F+B+W)+(p-1)(F+B-W)); zb-v: its sim "
              "(no closed form); sim = the schedule's simulate() bubble with F = t_f, B + W = t_b = 2 t_f\n");
  std::fflush(stdout);
}

void write_pipeline_json_rows(const BenchSession& s, const PipelineOptions& o, const PipelineProbes& probes,
                              const std::vector<PipelineConfig>& configs, const std::vector<PipelineResult>& results) {
  const BubbleByShape one_f_one_b = one_f_one_b_bubbles(configs, results);
  const BenchJson json(o.json);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const PipelineConfig& c = configs[i];
    nlohmann::ordered_json row = settings_row(s, o, c);
    add_measurement(row, results[i], probes.one_way_s);
    const auto base = one_f_one_b.find({c.stages, c.m()});
    if (c.schedule.kind != ScheduleKind::GPipe && c.schedule.kind != ScheduleKind::OneFOneB &&
        base != one_f_one_b.end() && base->second > 0)
      row["bubble_vs_1f1b"] = results[i].bubble / base->second;
    if (o.work == StageWork::Gemm) row["gemm_call_s"] = probes.gemm_call_s;
    json.append(row);
  }
}

void print_pipeline_results(const std::vector<PipelineConfig>& configs, const std::vector<PipelineResult>& results) {
  TextTable table({"p", "schedule", "v", "m", "step ms", "ideal ms", "bubble", "theory", "sim", "meas/theory",
                   "excess ms", "wait ms", "other ms", "peak act"});
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const PipelineConfig& c = configs[i];
    const PipelineResult& r = results[i];
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

void print_interleaving_summary(const std::vector<PipelineConfig>& configs,
                                const std::vector<PipelineResult>& results) {
  const BubbleByShape one_f_one_b = one_f_one_b_bubbles(configs, results);
  TextTable vs({"p", "m", "1f1b bubble", "interleaved v=2", "ratio", "theory ratio", "< 0.6"});
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const PipelineConfig& c = configs[i];
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

void print_zero_bubble_summary(const std::vector<PipelineConfig>& configs, const std::vector<PipelineResult>& results) {
  // The idle time per stage (bubble x step) is what the schedules cut: at the same p and m every
  // schedule does the same work, so the ratio of idle times is the ratio of the bubble's odds,
  // b / (1 - b), which is how the simulated ratio is taken.
  const auto odds = [](double b) { return b / (1.0 - b); };
  TextTable vs({"p", "m", "schedule", "1f1b idle ms", "idle ms", "idle ratio", "sim idle ratio", "bubble ratio"});
  int rows = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const PipelineConfig& c = configs[i];
    if (!splits_backward(c.schedule.kind)) continue;
    std::optional<std::size_t> base;  // 1F1B's row at the same shape
    for (std::size_t j = 0; j < configs.size(); ++j)
      if (configs[j].schedule.kind == ScheduleKind::OneFOneB && configs[j].stages == c.stages && configs[j].m() == c.m())
        base = j;
    if (!base || results[*base].bubble <= 0) continue;
    const PipelineResult& one = results[*base];
    const PipelineResult& zb = results[i];
    const double one_idle = one.bubble * one.step_s, zb_idle = zb.bubble * zb.step_s;
    vs.add_row({std::to_string(c.stages), std::to_string(c.m()), c.name(), format_cell("%.2f", 1e3 * one_idle),
                format_cell("%.2f", 1e3 * zb_idle), format_cell("%.3f", zb_idle / one_idle),
                one.simulated > 0 ? format_cell("%.3f", odds(zb.simulated) / odds(one.simulated)) : "-",
                format_cell("%.3f", zb.bubble / one.bubble)});
    ++rows;
  }
  if (rows == 0) return;
  std::printf("\nzero bubble against 1f1b at the same (p, m): idle time per stage (bubble x step), measured and "
              "simulated, and the ratio of the bubble fractions. At F = B = W a stage idles p-1 in zb-h1 (1/3 of "
              "1f1b's 3(p-1)) and (p-1)/2 in zb-v when m >= 2p (1/6): the least each can, zb-h1 with 1F1B's peak "
              "activation memory, zb-v because its last stage waits for p-1 half-stage chunks\n%s",
              vs.render().c_str());
}

void print_distance_from_theory(const std::vector<PipelineConfig>& configs,
                                const std::vector<PipelineResult>& results) {
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

}  // namespace mt
