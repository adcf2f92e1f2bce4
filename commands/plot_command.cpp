// `meshtrain plot METRICS... --out FILE.png`: the runs' curves, overlaid, in one PNG of three
// stacked panels: loss (training as lines, validation as points on a dashed line of the same
// colour), throughput (tokens/s) and the gradient norm, against the step.
//
// The drawing is done by gnuplot (Debian: gnuplot-nox), run as a child process on a script and
// data files written to a temporary directory. Why gnuplot: it is maintained in Debian, runs
// headless (the pngcairo terminal needs no display), is driven by a plain-text script, writes PNG
// itself, and brings no Python dependency into a C++ tool.
#include "commands/plot_command.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>  // defines: mkdtemp
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "launch/child_process.h"  // defines: run_child, write_text, read_text
#include "launch/command_line.h"  // defines: parse_command_line
#include "train/metrics_reader.h"
#include "runtime/error.h"        // defines: MT_FAIL, EnvironmentError, errno_message

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace mt {
namespace {

struct PlotOptions {
  std::vector<fs::path> inputs;
  std::vector<std::string> labels;  // --label values, in file order; the rest get default labels
  fs::path out;
  std::string title;
  int width = 1200;
  int height = 900;
  int warmup_steps = 1;
  std::optional<fs::path> keep_files;  // --keep-files DIR
};

// Boost's parser is given no positional options (parse_command_line is shared by every command),
// so the bare METRICS arguments become `--metrics=FILE` before parsing. An option's value is the
// token after it when the option takes one and was not written `--name=value`; after `--` every
// token is a file.
std::vector<std::string> positionals_as_metrics(const std::vector<std::string>& args,
                                                const po::options_description& desc) {
  std::vector<std::string> options, files;
  bool only_files = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_files || a.size() < 2 || a[0] != '-') {
      files.push_back("--metrics=" + a);
      continue;
    }
    if (a == "--") {
      only_files = true;
      continue;
    }
    options.push_back(a);
    if (a.rfind("--", 0) != 0 || a.find('=') != std::string::npos) continue;
    const po::option_description* option = nullptr;
    try {
      option = desc.find_nothrow(a.substr(2), true);
    } catch (const po::error&) {
      // ambiguous: Boost says so when it parses
    }
    if (option != nullptr && option->semantic()->max_tokens() > 0 && i + 1 < args.size())
      options.push_back(args[++i]);
  }
  options.insert(options.end(), files.begin(), files.end());
  return options;
}

// Gnuplot single-quoted string: no escapes are interpreted, a quote is doubled.
std::string quoted(const std::string& text) {
  std::string q = "'";
  for (char c : text) {
    if (c == '\'') q += "''";
    else q += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return q + "'";
}

// The label of each run: its --label, or else the file's stem (with its directory when two files
// share a stem, as every run's "metrics.jsonl" does), then the layout(s) from its headers.
std::vector<std::string> run_labels(const std::vector<RunMetrics>& runs, const std::vector<std::string>& given) {
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::string label;
    if (i < given.size()) {
      label = given[i];
    } else {
      const fs::path& p = runs[i].path;
      label = p.stem().string();
      for (std::size_t j = 0; j < runs.size(); ++j) {
        if (j != i && runs[j].path.stem() == p.stem() && !p.parent_path().filename().empty()) {
          label = (p.parent_path().filename() / p.stem()).string();
          break;
        }
      }
    }
    std::string layouts;
    for (const std::string& layout : runs[i].layouts) layouts += (layouts.empty() ? "" : " -> ") + layout;
    if (!layouts.empty()) label += " (" + layouts + ")";
    labels.push_back(label);
  }
  return labels;
}

// Where the script, the data files and gnuplot's output go: a temporary directory, removed with
// everything in it when the object goes, or the directory of --keep-files, created and kept.
class WorkDir {
 public:
  explicit WorkDir(const std::optional<fs::path>& keep) {
    if (keep) {
      std::error_code ec;
      fs::create_directories(*keep, ec);
      if (ec) MT_FAIL_AS(EnvironmentError, "cannot create --keep-files directory ", keep->string(), ": ", ec.message());
      path_ = fs::absolute(*keep);  // the script names its files by absolute path: it runs from anywhere
      return;
    }
    std::string pattern = (fs::temp_directory_path() / "meshtrain-plot-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr)
      MT_FAIL_AS(EnvironmentError, "cannot create a temporary directory ", pattern, ": ", errno_message(errno));
    path_ = pattern;
    temporary_ = true;
  }
  ~WorkDir() {
    std::error_code ignored;
    if (temporary_) fs::remove_all(path_, ignored);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool temporary_ = false;
};

// Runs `gnuplot --default-settings SCRIPT` (no ~/.gnuplot), its output kept in the work directory.
void run_gnuplot(const fs::path& script, const fs::path& dir) {
  const ChildExit exit = run_child({"gnuplot", "--default-settings", script.string()}, dir / "gnuplot.out",
                                   dir / "gnuplot.err");
  if (!exit.started) throw UsageError("meshtrain plot needs gnuplot (Debian: apt-get install gnuplot-nox)");
  if (exit.ok()) return;
  std::string err = read_text(dir / "gnuplot.err");
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (err.size() > 4000) err = "..." + err.substr(err.size() - 4000);
  MT_FAIL("gnuplot ", describe_exit(exit), (err.empty() ? "" : ":\n" + err));
}

// One line on a panel: a data file of "step value" rows and how to draw it.
struct Series {
  fs::path data;
  std::string style;  // gnuplot `with ...` and colour
  std::string title;  // empty: no key entry
};

struct Panel {
  std::string title, ylabel, yformat;
  std::string yrange;  // gnuplot "[low:high]", "*" for autoscaled ends
  std::vector<Series> series;
};

// Writes the rows of one run's field (steps where it is present and `keep` holds) to `file`;
// returns how many, writing nothing when there are none.
template <class Field, class Keep>
std::size_t write_series(const RunMetrics& run, Field field, Keep keep, const fs::path& file) {
  std::string rows;
  std::size_t count = 0;
  char line[64];
  for (const auto& [step, point] : run.steps) {
    const std::optional<double> value = field(point);
    if (!value || !keep(point)) continue;
    std::snprintf(line, sizeof line, "%lld %.9g\n", static_cast<long long>(step), *value);
    rows += line;
    ++count;
  }
  if (count > 0) write_text(file, rows);
  return count;
}

// A line, or a dot where there is a single point (a line through one point is not drawn).
std::string line_style(std::size_t points, const std::string& style) {
  return points == 1 ? "points pt 7 ps 1 " + style : "lines " + style;
}

std::string gnuplot_script(const std::vector<Panel>& panels, const PlotOptions& options, const fs::path& png,
                           std::int64_t first_step, std::int64_t last_step) {
  if (first_step == last_step) {
    --first_step;
    ++last_step;
  }
  std::ostringstream s;
  s << "set terminal pngcairo size " << options.width << "," << options.height << " noenhanced font 'Sans,10'\n"
    << "set output " << quoted(png.string()) << "\n"
    << "set multiplot layout " << panels.size() << ",1"
    << (options.title.empty() ? "" : " title " + quoted(options.title)) << "\n"
    << "set lmargin 12\nset rmargin 4\nset grid\nset key top right\n"
    << "set xrange [" << first_step << ":" << last_step << "]\n"
    << (last_step - first_step < 10 ? "set xtics 1\n" : "");  // else gnuplot picks whole steps itself
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const Panel& panel = panels[p];
    s << "set title " << quoted(panel.title) << "\nset ylabel " << quoted(panel.ylabel) << "\nset format y "
      << quoted(panel.yformat) << "\nset yrange " << panel.yrange << "\nset ytics\n";
    if (p + 1 == panels.size()) s << "set xlabel 'step'\n";
    if (panel.series.empty()) {
      s << "set label 1 'no data' at graph 0.5, graph 0.5 center\nunset ytics\nplot [] [0:1] NaN notitle\n"
        << "unset label 1\n";
      continue;
    }
    s << "plot ";
    for (std::size_t i = 0; i < panel.series.size(); ++i) {
      const Series& line = panel.series[i];
      s << (i ? ", \\\n     " : "") << quoted(line.data.string()) << " using 1:2 with " << line.style << " "
        << (line.title.empty() ? "notitle" : "title " + quoted(line.title));
    }
    s << "\n";
  }
  s << "unset multiplot\nunset output\n";
  return s.str();
}

PlotOptions read_options(const po::variables_map& vm) {
  PlotOptions o;
  if (vm.count("metrics"))
    for (const std::string& f : vm["metrics"].as<std::vector<std::string>>()) o.inputs.emplace_back(f);
  if (o.inputs.empty()) throw UsageError("no metrics files given (usage: meshtrain plot METRICS... --out FILE.png)");
  if (vm.count("label")) o.labels = vm["label"].as<std::vector<std::string>>();
  if (o.labels.size() > o.inputs.size())
    throw UsageError(std::to_string(o.labels.size()) + " --label values for " + std::to_string(o.inputs.size()) +
                     " metrics file(s)");
  o.out = vm["out"].as<std::string>();
  std::error_code ec;
  if (fs::is_directory(o.out, ec)) throw UsageError("--out " + o.out.string() + " is a directory, not a PNG file name");
  if (vm.count("title")) o.title = vm["title"].as<std::string>();
  const std::string size = vm["size"].as<std::string>();
  std::smatch m;
  if (!std::regex_match(size, m, std::regex("([0-9]{1,5})x([0-9]{1,5})")))
    throw UsageError("--size must be WIDTHxHEIGHT in pixels, e.g. 1200x900, got '" + size + "'");
  o.width = std::stoi(m[1]);
  o.height = std::stoi(m[2]);
  if (o.width < 200 || o.height < 200 || o.width > 10000 || o.height > 10000)
    throw UsageError("--size must be between 200x200 and 10000x10000 pixels, got " + size);
  o.warmup_steps = vm["warmup-steps"].as<int>();
  if (o.warmup_steps < 0) throw UsageError("--warmup-steps must be >= 0");
  if (vm.count("keep-files")) o.keep_files = vm["keep-files"].as<std::string>();
  return o;
}

}  // namespace

int plot_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc("options");
  desc.add_options()
      ("metrics", path_values(PathKind::ReadFile),
       "a metrics file written by `meshtrain train --metrics` (JSON lines); the files may also be given "
       "without the option name, as METRICS... . Each file is one run; when a resumed run repeats steps, "
       "the last record of each step in the file wins")
      ("out", path_value(PathKind::WriteFile)->required(), "the PNG file to write (replaced if it exists)")
      ("label", po::value<std::vector<std::string>>(),
       "the name of a run in the key, repeatable: the first --label names the first file, and so on "
       "(default: the file name without its extension). The layout from the run's header is added, "
       "e.g. \"demo (dp2 tp2 pp2)\"")
      ("title", po::value<std::string>(), "a title above the three panels (default: none)")
      ("size", po::value<std::string>()->default_value("1200x900"), "the image size in pixels, WIDTHxHEIGHT")
      ("warmup-steps", po::value<int>()->default_value(1),
       "leave the first N steps after each start or resume out of the throughput panel: they include "
       "one-off setup (allocation, first kernel launches) and are not the steady rate. 0 keeps every step")
      ("keep-files", path_value(PathKind::WriteDir),
       "write the gnuplot script (plot.gp) and its data files (runR_SERIES.dat: step and value, the "
       "repeated steps of a resumed run resolved) into this directory and keep them, to restyle the plot "
       "by hand with `gnuplot DIR/plot.gp` (default: a temporary directory, removed)");
  auto parsed = parse_command_line(
      "plot",
      "meshtrain plot METRICS... --out FILE.png [options]\n\n"
      "Draws the runs of metrics files into one PNG with gnuplot, the runs overlaid in one colour each,\n"
      "in three panels against the step: (1) loss: training as a solid line, validation (on the steps\n"
      "that evaluated it) as points on a dashed line of the same colour; (2) throughput in tokens/s,\n"
      "on a linear axis from 0, warm-up steps left out (see --warmup-steps); (3) the gradient norm\n"
      "before clipping. Needs gnuplot on PATH (Debian: apt-get install gnuplot-nox). Under mpirun only\n"
      "rank 0 plots.",
      desc, positionals_as_metrics(args, desc), mpi.world_rank());
  if (!parsed) return 0;
  const PlotOptions options = read_options(*parsed);
  if (mpi.world_rank() != 0) return 0;

  std::vector<RunMetrics> runs;
  for (const fs::path& input : options.inputs) runs.push_back(read_metrics(input));
  const std::vector<std::string> labels = run_labels(runs, options.labels);

  WorkDir dir(options.keep_files);
  static const char* const colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  const std::string warmup = options.warmup_steps == 0 ? "every step"
                             : options.warmup_steps == 1
                                 ? "the first step after each start or resume left out: warm-up"
                                 : "the first " + std::to_string(options.warmup_steps) +
                                       " steps after each start or resume left out: warm-up";
  std::vector<Panel> panels = {
      {"loss: training (lines) and validation (points, dashed)", "loss", "%g", "[*:*]", {}},
      {"throughput (" + warmup + ")", "tokens/s", "%.1s%c", "[0:*]", {}},
      {"gradient norm (before clipping)", "norm", "%g", "[0:*]", {}}};
  std::int64_t first_step = runs[0].steps.begin()->first, last_step = first_step;
  std::size_t steps = 0;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const RunMetrics& run = runs[r];
    first_step = std::min(first_step, run.steps.begin()->first);
    last_step = std::max(last_step, run.steps.rbegin()->first);
    steps += run.steps.size();
    const std::string colour = std::string("lc rgb '") + colours[r % std::size(colours)] + "'";
    const auto file = [&](const char* series) {
      return dir.path() / ("run" + std::to_string(r) + "_" + series + ".dat");
    };
    const auto all = [](const MetricsPoint&) { return true; };
    if (auto n = write_series(run, [](const MetricsPoint& p) { return p.loss; }, all, file("loss")))
      panels[0].series.push_back({file("loss"), line_style(n, "lw 2 " + colour), labels[r] + " train"});
    if (write_series(run, [](const MetricsPoint& p) { return p.val_loss; }, all, file("val_loss")))
      panels[0].series.push_back(
          {file("val_loss"), "linespoints dt 2 lw 1.5 pt 7 ps 1.2 " + colour, labels[r] + " val"});
    const int warmup_steps = options.warmup_steps;
    if (auto n = write_series(run, [](const MetricsPoint& p) { return p.tokens_per_s; },
                              [warmup_steps](const MetricsPoint& p) { return p.since_start >= warmup_steps; },
                              file("tokens_per_s")))
      panels[1].series.push_back({file("tokens_per_s"), line_style(n, "lw 1.5 " + colour), ""});
    if (auto n = write_series(run, [](const MetricsPoint& p) { return p.grad_norm; }, all, file("grad_norm")))
      panels[2].series.push_back({file("grad_norm"), line_style(n, "lw 1.5 " + colour), ""});
  }

  const fs::path png = dir.path() / "plot.png";
  const fs::path script = dir.path() / "plot.gp";
  write_text(script, gnuplot_script(panels, options, png, first_step, last_step));
  run_gnuplot(script, dir.path());
  std::error_code ec;
  if (!fs::is_regular_file(png, ec) || fs::file_size(png, ec) == 0)
    MT_FAIL("gnuplot exited without writing the PNG: ", read_text(dir.path() / "gnuplot.err"));
  // (--out may name the PNG in the --keep-files directory itself.) Whole or not at all: a full
  // disk leaves no half PNG, and an older plot of that name stays as it was.
  if (!fs::exists(options.out, ec) || !fs::equivalent(png, options.out, ec)) {
    const std::string bytes = read_text(png);
    AtomicFile out(options.out, "PNG file");
    out.write(bytes.data(), bytes.size());
    out.commit();
  }
  std::printf("wrote %s (%zu run%s, %zu step%s)\n", options.out.string().c_str(), runs.size(),
              runs.size() == 1 ? "" : "s", steps, steps == 1 ? "" : "s");
  std::fflush(stdout);
  return 0;
}

}  // namespace mt
