#include "bench/scaling_bench.h"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/bench_options.h"
#include "bench/scaling_layouts.h"
#include "launch/child_process.h"
#include "runtime/error.h"  // defines: UsageError
#include "train/metrics_reader.h"
#include "launch/model_options.h"
#include "launch/path_option.h"
#include "launch/table.h"
#include "perf/calibration.h"
#include "perf/cost_model.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace mt {
namespace {

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// meshtrain next to this meshbench (both land in the build's bin/).
fs::path default_meshtrain() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path("meshtrain") : self.parent_path() / "meshtrain";
}

struct Run {
  std::string mode;  // strong or weak
  ScalingPoint point;
  int global_batch = 0;
  double step_s = 0, tokens_per_s = 0, efficiency = 0;
  double loss = 0;
  double predicted_s = 0;  // meshtrain plan's model for this layout on this machine (0: not asked)
};

// The performance model's step time for one run on this one CPU machine: cores shared by the
// ranks, each with `threads` threads, calibrated from meshbench rows when given.
double predict_cpu_step(const GptConfig& model, int seq_len, int global_batch, int micro_batch, const ScalingPoint& p,
                        int threads, const std::optional<perf::Calibration>& calibration) {
  perf::Cluster cluster = perf::cpu_cluster(p.ranks(), threads);
  if (calibration) perf::apply_calibration(*calibration, cluster);
  perf::Layout layout;
  layout.dp = p.dp;
  layout.tp = p.tp;
  layout.pp = p.pp;
  layout.virtual_stages = p.v;
  layout.schedule = p.v > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
  layout.micro_batch = micro_batch;
  return perf::predict_step(model, perf::TrainingShape{seq_len, global_batch, perf::Precision::FP32}, layout, cluster)
      .step_s;
}

// Mean step time over the steps after the first `skip` (start-up, first-touch allocations).
double mean_step_seconds(const RunMetrics& metrics, int skip, const fs::path& file) {
  double sum = 0;
  int n = 0;
  for (const auto& [step, point] : metrics.steps) {
    if (step <= skip || !point.step_ms) continue;
    sum += *point.step_ms / 1e3;
    ++n;
  }
  if (n == 0) throw UsageError("no timed steps in " + file.string() + " (raise --steps above --skip)");
  return sum / n;
}

std::string gnuplot_script(const fs::path& data_dir, const fs::path& png, const std::string& title, bool strong,
                           bool weak) {
  std::ostringstream s;
  s << "set terminal pngcairo size 1100,460 font 'sans,10'\nset output '" << png.string() << "'\n"
    << "set multiplot layout 1,2 title '" << title << "'\n"
    << "set grid\nset key top right\nset logscale x 2\nset xlabel 'ranks'\nset offsets graph 0.05, graph 0.05, 0, 0\n"
    << "set ylabel 'scaling efficiency'\nset yrange [0:1.2]\n";
  std::string plot;
  const auto add = [&](const std::string& item) { plot += (plot.empty() ? "plot " : ", ") + item; };
  if (strong) {
    add("'" + (data_dir / "strong.dat").string() + "' using 1:2 with points ps 1.5 pt 7 lc rgb '#1f77b4' title 'strong'");
    add("'' using 1:2:3 with labels offset 0,1 font ',8' notitle");
  }
  if (weak) {
    add("'" + (data_dir / "weak.dat").string() + "' using 1:2 with points ps 1.5 pt 5 lc rgb '#d62728' title 'weak'");
    add("'' using 1:2:3 with labels offset 0,-1 font ',8' notitle");
  }
  s << plot << ", 1 with lines dt 2 lc rgb '#888888' title 'ideal'\n";
  s << "set ylabel 'tokens/s'\nset autoscale y\nset yrange [0:*]\n";
  plot.clear();
  if (strong) add("'" + (data_dir / "strong.dat").string() + "' using 1:4 with points ps 1.5 pt 7 lc rgb '#1f77b4' title 'strong'");
  if (weak) add("'" + (data_dir / "weak.dat").string() + "' using 1:4 with points ps 1.5 pt 5 lc rgb '#d62728' title 'weak'");
  s << plot << "\nunset multiplot\n";
  return s.str();
}

po::options_description scaling_options() {
  po::options_description desc("meshbench scaling options");
  desc.add_options()("help,h", "print this help")
      ("layouts", po::value<std::string>()->default_value("1x1x1,2x1x1,1x2x1,1x1x2,4x1x1,2x2x1,2x1x2,2x2x2"),
       "comma-separated DPxTPxPP[xV] layouts (V: virtual stages, interleaved 1F1B); ranks = DP*TP*PP")
      ("mode", po::value<std::string>()->default_value("both"),
       "strong (the same global batch on every layout), weak (global batch = --global-batch x ranks: the same "
       "tokens per rank), or both")
      ("global-batch", po::value<int>()->default_value(16), "sequences per step on 1 rank (strong: on every layout)")
      ("micro-batch", po::value<int>()->default_value(4), "sequences per forward/backward pass")
      ("steps", po::value<int>()->default_value(6), "optimizer steps per run")
      ("skip", po::value<int>()->default_value(2), "first steps left out of the mean step time")
      ("data", path_value(PathKind::ReadDir)->default_value("assets/corpus/fortunes"), "token shards (meshtrain prepare)")
      ("model", po::value<std::string>()->default_value("small"), "model preset (meshtrain train --model)")
      ("seq-len", po::value<int>()->default_value(64), "tokens per sequence")
      ("tokenizer", po::value<std::string>()->default_value("gpt2"), "the data's tokenizer: gpt2 or bytes (sets the vocabulary)")
      ("cpu-threads", po::value<int>()->default_value(1), "CPU threads per rank (meshtrain train --cpu-threads)")
      ("train-args", po::value<std::string>()->default_value(""), "more options for every `meshtrain train`")
      ("predict", po::bool_switch(), "put the performance model's step time (meshtrain plan, this machine's "
       "cpu preset with the cores shared) next to each measured one")
      ("calibrate", path_values(PathKind::ReadFile)->multitoken(),
       "meshbench --json files to calibrate the prediction with (as meshtrain plan --calibrate)")
      ("meshtrain", path_value(PathKind::ReadFile)->default_value(default_meshtrain().string()), "the meshtrain executable")
      ("mpirun", po::value<std::string>()->default_value("mpirun --oversubscribe"),
       "how to start N ranks: this command, then `-np N meshtrain train ...` (for several hosts, e.g. "
       "`ip netns exec mt-n1 mpirun --host n1:4,n2:4 ...`; see docs/PERFORMANCE.md)")
      ("out", path_value(PathKind::WriteDir)->default_value("build/scaling"),
       "directory for scaling.csv, scaling.png, and each run's metrics and logs")
      ("title", po::value<std::string>()->default_value(""), "plot title (default: the model and machine)");
  add_json_option(desc, "append one JSON line per run (bench \"scaling\")");
  return desc;
}

// The parsed options; nullopt when --help was asked for (and printed).
std::optional<po::variables_map> parse_scaling_command(const std::vector<std::string>& args) {
  const po::options_description desc = scaling_options();
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see: meshbench scaling --help)");
  }
  check_path_options(desc, vm);
  if (!vm.count("help")) return vm;
  std::cout << "usage: meshbench scaling [options]\n\n"
               "Runs `meshtrain train` under mpirun once per layout and mode, reads each run's metrics file and "
               "prints the mean step time, tokens/s and scaling efficiency: strong = T(1) / (N x T(N)) at a fixed "
               "global batch, weak = T(1) / T(N) with the global batch growing with N (the baseline is the "
               "layout with the fewest ranks). Writes OUT/scaling.csv and OUT/scaling.png (gnuplot). Run it "
               "without mpirun: it starts the jobs itself.\n\n"
            << desc;
  return std::nullopt;
}

struct ScalingOptions {
  std::string mode;                // strong, weak or both
  std::vector<std::string> modes;  // the modes to run, strong first
  int steps = 0, skip = 0, batch = 0, micro = 0;
  std::vector<ScalingPoint> layouts;
  fs::path out;
  std::vector<std::string> launcher;  // --mpirun, split into words
  std::string meshtrain, data, title, json;
  std::string model_name;
  GptConfig model;
  int seq_len = 0, threads = 0;
  std::string train_args;  // what every run gets after the layout's options
  bool predict = false;
  std::optional<perf::Calibration> calibration;

  int global_batch(const std::string& m, const ScalingPoint& p) const { return m == "strong" ? batch : batch * p.ranks(); }
};

// The sizes of every run and where they go; makes OUT/runs.
void read_runs(const po::variables_map& vm, ScalingOptions& o) {
  o.mode = vm["mode"].as<std::string>();
  if (o.mode != "strong" && o.mode != "weak" && o.mode != "both") throw UsageError("--mode must be strong, weak or both");
  if (o.mode != "weak") o.modes.push_back("strong");
  if (o.mode != "strong") o.modes.push_back("weak");
  o.steps = vm["steps"].as<int>();
  o.skip = vm["skip"].as<int>();
  o.batch = vm["global-batch"].as<int>();
  o.micro = vm["micro-batch"].as<int>();
  if (o.steps <= o.skip || o.skip < 0) throw UsageError("--steps must be larger than --skip");
  if (o.batch < 1 || o.micro < 1) throw UsageError("--global-batch and --micro-batch must be positive");
  o.layouts = parse_scaling_layouts(vm["layouts"].as<std::string>());
  o.out = vm["out"].as<std::string>();
  std::error_code ec;
  fs::create_directories(o.out / "runs", ec);
  if (ec) throw UsageError("cannot create " + (o.out / "runs").string() + ": " + ec.message());
}

ScalingOptions read_scaling_options(const po::variables_map& vm) {
  ScalingOptions o;
  read_runs(vm, o);
  o.launcher = split_words(vm["mpirun"].as<std::string>());
  const std::vector<std::string> extra = split_words(vm["train-args"].as<std::string>());
  if (o.launcher.empty()) throw UsageError("--mpirun is empty");
  o.json = vm["json"].as<std::string>();
  o.meshtrain = vm["meshtrain"].as<std::string>();
  o.data = vm["data"].as<std::string>();
  o.title = vm["title"].as<std::string>();
  o.model_name = vm["model"].as<std::string>();
  const std::string tokenizer = vm["tokenizer"].as<std::string>();
  o.seq_len = vm["seq-len"].as<int>();
  o.threads = vm["cpu-threads"].as<int>();
  if (o.seq_len < 1 || o.threads < 1) throw UsageError("--seq-len and --cpu-threads must be positive");
  o.model = gpt_preset(o.model_name);
  o.model.vocab_size = tokenizer_vocab_size(tokenizer);
  o.predict = vm["predict"].as<bool>();
  if (vm.count("calibrate")) {
    std::vector<fs::path> files;
    for (const std::string& f : vm["calibrate"].as<std::vector<std::string>>()) files.emplace_back(f);
    o.calibration = perf::calibrate(perf::read_calibration(files), perf::cpu_cluster(1, o.threads));
  }
  o.train_args = "--model " + o.model_name + " --seq-len " + std::to_string(o.seq_len) + " --tokenizer " + tokenizer +
                 " --cpu-threads " + std::to_string(o.threads) +
                 (extra.empty() ? "" : " " + vm["train-args"].as<std::string>());
  return o;
}

// The launcher's words, then `-np N meshtrain train` with the run's layout and sizes.
std::vector<std::string> train_command(const ScalingOptions& o, const Run& run, const fs::path& metrics) {
  const ScalingPoint& layout = run.point;
  std::vector<std::string> argv = o.launcher;
  for (const std::string& a :
       {std::string("-np"), std::to_string(layout.ranks()), o.meshtrain, std::string("train"), std::string("--data"),
        o.data, std::string("--steps"), std::to_string(o.steps), std::string("--global-batch"),
        std::to_string(run.global_batch), std::string("--micro-batch"), std::to_string(o.micro), std::string("--dp"),
        std::to_string(layout.dp), std::string("--tp"), std::to_string(layout.tp), std::string("--pp"),
        std::to_string(layout.pp), std::string("--metrics"), metrics.string()})
    argv.push_back(a);
  if (layout.v > 1) {
    for (const std::string& a : {std::string("--schedule"), std::string("interleaved"), std::string("--virtual-stages"),
                                 std::to_string(layout.v)})
      argv.push_back(a);
  }
  for (const std::string& a : split_words(o.train_args)) argv.push_back(a);
  return argv;
}

// One `meshtrain train` job, its metrics read back; a failed job is an error with its stderr's tail.
Run run_layout(const ScalingOptions& o, const std::string& mode, const ScalingPoint& layout) {
  Run run;
  run.mode = mode;
  run.point = layout;
  run.global_batch = o.global_batch(mode, layout);
  const std::string name = mode + "-" + layout.name();
  const fs::path runs = o.out / "runs", metrics = runs / (name + ".jsonl");
  std::error_code ec;
  fs::remove(metrics, ec);
  const std::vector<std::string> argv = train_command(o, run, metrics);
  std::printf("  %s: %d rank(s) ...\n", name.c_str(), layout.ranks());
  std::fflush(stdout);
  const ChildExit exit = run_child(argv, runs / (name + ".log"), runs / (name + ".err"));
  if (!exit.ok()) {
    std::string err = read_text(runs / (name + ".err"));
    if (err.size() > 2000) err = "..." + err.substr(err.size() - 2000);
    throw UsageError(argv[0] + " for " + name + " " + describe_exit(exit) + ":\n" + err);
  }
  const RunMetrics read = read_metrics(metrics);
  run.step_s = mean_step_seconds(read, o.skip, metrics);
  for (const auto& [step, point] : read.steps) {
    if (point.loss) run.loss = *point.loss;
    if (step > o.skip && point.tokens_per_s) run.tokens_per_s += *point.tokens_per_s / (o.steps - o.skip);
  }
  if (o.predict)
    run.predicted_s = predict_cpu_step(o.model, o.seq_len, run.global_batch, o.micro, layout, o.threads, o.calibration);
  return run;
}

// Efficiency against the layout with the fewest ranks (1x1x1 when it is listed).
void set_efficiencies(std::vector<Run>& runs) {
  std::size_t base = 0;
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (runs[i].point.ranks() < runs[base].point.ranks()) base = i;
  for (Run& r : runs) {
    const double n = static_cast<double>(r.point.ranks()), n0 = static_cast<double>(runs[base].point.ranks());
    r.efficiency = r.mode == "strong" ? (runs[base].step_s * n0) / (r.step_s * n) : runs[base].step_s / r.step_s;
  }
}

std::vector<std::string> table_cells(const Run& r, bool predict) {
  return {r.mode, r.point.name(), std::to_string(r.point.ranks()), std::to_string(r.global_batch),
          format_cell("%.0f", 1e3 * r.step_s), format_cell("%.0f", r.tokens_per_s), format_cell("%.2f", r.efficiency),
          format_cell("%.4f", r.loss), predict ? format_cell("%.0f", 1e3 * r.predicted_s) : "-",
          predict ? format_cell("%.2f", r.predicted_s / r.step_s) : "-"};
}

const char* kCsvHeader =
    "mode,layout,ranks,dp,tp,pp,v,global_batch,micro_batch,step_s,tokens_per_s,efficiency,final_loss,predicted_s\n";

std::string csv_line(const Run& r, int micro) {
  return r.mode + "," + r.point.name() + "," + std::to_string(r.point.ranks()) + "," + std::to_string(r.point.dp) + "," +
         std::to_string(r.point.tp) + "," + std::to_string(r.point.pp) + "," + std::to_string(r.point.v) + "," +
         std::to_string(r.global_batch) + "," + std::to_string(micro) + "," + format_cell("%.6f", r.step_s) + "," +
         format_cell("%.1f", r.tokens_per_s) + "," + format_cell("%.4f", r.efficiency) + "," +
         format_cell("%.6f", r.loss) + "," + format_cell("%.6f", r.predicted_s) + "\n";
}

// gnuplot's data: ranks, efficiency, the layout's name (a label), tokens/s.
std::string dat_line(const Run& r) {
  return std::to_string(r.point.ranks()) + " " + format_cell("%.4f", r.efficiency) + " \"" + r.point.name() + "\" " +
         format_cell("%.1f", r.tokens_per_s) + "\n";
}

nlohmann::ordered_json json_row(const Run& r, const ScalingOptions& o) {
  nlohmann::ordered_json row;
  row["bench"] = "scaling";
  row["mode"] = r.mode;
  row["layout"] = r.point.name();
  row["ranks"] = r.point.ranks();
  row["dp"] = r.point.dp;
  row["tp"] = r.point.tp;
  row["pp"] = r.point.pp;
  row["v"] = r.point.v;
  row["global_batch"] = r.global_batch;
  row["micro_batch"] = o.micro;
  row["train_args"] = o.train_args;
  row["step_s"] = r.step_s;
  row["tokens_per_s"] = r.tokens_per_s;
  row["efficiency"] = r.efficiency;
  row["final_loss"] = r.loss;
  if (o.predict) row["predicted_s"] = r.predicted_s;
  return row;
}

// Writes OUT/scaling.gp and draws OUT/scaling.png with gnuplot; a missing gnuplot is a warning.
bool draw_plot(const ScalingOptions& o) {
  const std::string title = o.title.empty() ? "meshtrain train " + o.train_args : o.title;
  const fs::path script = o.out / "scaling.gp";
  write_text(script, gnuplot_script(fs::absolute(o.out), fs::absolute(o.out / "scaling.png"), title, o.mode != "weak",
                                    o.mode != "strong"));
  const ChildExit plot = run_child({"gnuplot", "--default-settings", script.string()}, o.out / "gnuplot.out",
                                   o.out / "gnuplot.err");
  if (!plot.ok())
    std::fprintf(stderr, "meshbench scaling: no plot: gnuplot %s %s\n", describe_exit(plot).c_str(),
                 read_text(o.out / "gnuplot.err").c_str());
  return plot.ok();
}

}  // namespace

int scaling_bench(const std::vector<std::string>& args) {
  const std::optional<po::variables_map> vm = parse_scaling_command(args);
  if (!vm) return 0;
  const ScalingOptions o = read_scaling_options(*vm);
  const BenchJson json(o.json);
  std::printf("meshbench scaling: %zu layout(s), %s; %d steps per run, mean of steps %d..%d; meshtrain train %s\n",
              o.layouts.size(), o.mode.c_str(), o.steps, o.skip + 1, o.steps, o.train_args.c_str());
  TextTable table({"mode", "layout", "ranks", "global batch", "step ms", "tokens/s", "efficiency", "loss",
                   "predicted ms", "predicted/measured"});
  std::string csv = kCsvHeader;
  for (const std::string& mode : o.modes) {
    std::vector<Run> runs;
    for (const ScalingPoint& layout : o.layouts) runs.push_back(run_layout(o, mode, layout));
    set_efficiencies(runs);
    std::string dat;
    for (const Run& r : runs) {
      table.add_row(table_cells(r, o.predict));
      csv += csv_line(r, o.micro);
      dat += dat_line(r);
      json.append(json_row(r, o));
    }
    write_text(o.out / (mode + ".dat"), dat);
  }
  std::printf("%s", table.render().c_str());
  write_text(o.out / "scaling.csv", csv);
  const bool drawn = draw_plot(o);
  std::printf("wrote %s, %s%s\n", (o.out / "scaling.csv").c_str(), (o.out / "scaling.png").c_str(),
              drawn ? "" : " (not drawn)");
  return 0;
}

}  // namespace mt
