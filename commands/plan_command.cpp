// `meshtrain plan --model M --global-batch B [--cluster C] [--layout ...]`: the performance model
// of perf/ on the command line. Runs anywhere, one process is enough; under mpirun every rank
// parses the options (usage errors are the same everywhere) and rank 0 alone prints.
#include "commands/plan_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "launch/command_line.h"  // defines: parse_command_line
#include "launch/table.h"         // defines: TextTable
#include "perf/calibration.h"
#include "perf/cost_model.h"
#include "perf/layout_search.h"
#include "runtime/attention.h"  // defines: nn::attention_kernel_for
#include "runtime/error.h"

namespace po = boost::program_options;

namespace mt {
namespace {

using namespace mt::perf;

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

int parse_int(const std::string& what, const std::string& text) {
  const std::optional<int> v = parse_whole_number(text);
  if (!v) throw UsageError(what + ": '" + text + "' is not a whole number");
  return *v;
}

// "dp=2,tp=2,cp=2,pp=2,v=1,zero=1,micro=4,schedule=1f1b,recompute=full,sp=1"; dp defaults to what
// the cluster's devices leave, cp to 1, recompute and sp to --recompute and --sequence-parallel.
Layout parse_layout(const std::string& text, int devices, std::optional<int> micro_batch, Recompute recompute,
                    bool sequence_parallel) {
  std::map<std::string, std::string> fields;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw UsageError("--layout: expected key=value, got '" + item + "' in '" + text + "'");
    const std::string key = item.substr(0, eq);
    if (key != "dp" && key != "tp" && key != "cp" && key != "pp" && key != "v" && key != "zero" && key != "micro" &&
        key != "schedule" && key != "recompute" && key != "sp")
      throw UsageError("--layout: unknown key '" + key +
                       "' (known: dp, tp, cp, pp, v, zero, micro, schedule, recompute, sp)");
    fields[key] = item.substr(eq + 1);
  }
  Layout l;
  const auto get = [&](const char* key, int fallback) {
    return fields.count(key) ? parse_int(std::string("--layout ") + key, fields[key]) : fallback;
  };
  l.tp = get("tp", 1);
  l.cp = get("cp", 1);
  l.pp = get("pp", 1);
  if (l.tp < 1 || l.cp < 1 || l.pp < 1) throw UsageError("--layout: tp, cp and pp must be at least 1");
  l.dp = get("dp", devices / (l.tp * l.cp * l.pp));
  l.virtual_stages = get("v", 1);
  l.zero = get("zero", 0);
  l.micro_batch = get("micro", micro_batch.value_or(1));
  try {
    l.recompute = fields.count("recompute") ? parse_recompute(fields["recompute"]) : recompute;
  } catch (const Error& e) {
    throw UsageError("--layout " + text + ": " + e.message());
  }
  l.sequence_parallel = sequence_parallel && l.tp > 1;
  if (fields.count("sp")) {
    const int sp = get("sp", 0);
    if (sp != 0 && sp != 1) throw UsageError("--layout " + text + ": sp must be 0 or 1, got " + fields["sp"]);
    if (sp == 1 && l.tp < 2)
      throw UsageError("--layout " + text + ": sp=1 (sequence parallelism) splits the sequence over tp: it needs tp of at least 2");
    l.sequence_parallel = sp == 1;
  }
  try {
    l.schedule = fields.count("schedule") ? parse_schedule_kind(fields["schedule"])
                 : l.virtual_stages > 1   ? ScheduleKind::Interleaved
                                          : ScheduleKind::OneFOneB;
  } catch (const Error& e) {
    throw UsageError("--layout: " + e.message());
  }
  if (l.world_size() != devices)
    throw UsageError("--layout " + text + (l.cp > 1 ? ": dp x tp x cp x pp = " : ": dp x tp x pp = ") +
                     std::to_string(l.world_size()) +
                     ", but the cluster has " + std::to_string(devices) + " devices (see --nodes, --gpus-per-node)");
  // A plan takes micro-batch 0 for a default, and names ZeRO's problems as the option --zero's:
  // here they are --layout's fields, refused as before.
  if (l.zero < 0 || l.zero > 3)
    throw UsageError("--layout " + text + ": zero must be 0, 1, 2 or 3, got " + std::to_string(l.zero));
  if (l.micro_batch == 0) throw UsageError("--layout " + text + ": --micro-batch must be at least 1, got 0");
  return l;
}

Cluster read_cluster(const po::variables_map& vm) {
  const std::string name = vm["cluster"].as<std::string>();
  Cluster c = name.size() > 4 && name.substr(name.size() - 4) == ".ini" ? read_cluster_file(name) : cluster_preset(name);
  if (vm.count("nodes")) c.nodes = vm["nodes"].as<int>();
  if (vm.count("gpus-per-node")) c.devices_per_node = vm["gpus-per-node"].as<int>();
  if (vm.count("set")) {
    for (const std::string& kv : vm["set"].as<std::vector<std::string>>()) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) throw UsageError("--set: expected KEY=VALUE, got '" + kv + "'");
      set_cluster_field(c, kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  if (vm.count("calibrate")) {
    std::vector<std::filesystem::path> files;
    for (const std::string& f : vm["calibrate"].as<std::vector<std::string>>()) files.emplace_back(f);
    const Calibration cal = calibrate(read_calibration(files), c);
    apply_calibration(cal, c);
    std::cout << describe(cal) << "\n";
  }
  c.validate();
  return c;
}

ModelShape read_model(const po::variables_map& vm) {
  ModelShape m = gpt_preset(vm["model"].as<std::string>());
  if (vm.count("layers")) m.layers = vm["layers"].as<int>();
  if (vm.count("heads")) m.heads = vm["heads"].as<int>();
  if (vm.count("channels")) m.channels = vm["channels"].as<int>();
  if (vm.count("vocab")) m.vocab_size = vm["vocab"].as<int>();
  if (vm.count("max-seq-len")) m.max_seq_len = vm["max-seq-len"].as<int>();
  if (vm.count("kv-heads")) m.kv_heads = vm["kv-heads"].as<int>();
  if (vm.count("ffn-hidden")) m.ffn_hidden = vm["ffn-hidden"].as<int>();
  m.validate();
  return m;
}

// A preset's family: "llama" for every llama-shaped preset (llama-tiny to llama3-70b), else its name
// up to the first '-' ("gpt3-13b": gpt3).
std::string family_of(const std::string& preset) {
  if (gpt_preset(preset).is_llama()) return model_family_name(ModelFamily::Llama);
  return preset.substr(0, preset.find('-'));
}

std::vector<std::string> preset_families() {
  std::vector<std::string> families;
  for (const std::string& name : gpt_preset_names())
    if (std::find(families.begin(), families.end(), family_of(name)) == families.end()) families.push_back(family_of(name));
  return families;
}

// "recompute full, sp": the memory options of a layout besides ZeRO; "-" for none.
std::string memory_options_cell(const Layout& l) {
  std::string out = l.recompute == Recompute::None ? "" : recompute_name(l.recompute);
  if (l.sequence_parallel) out += out.empty() ? "sp" : ",sp";
  return out.empty() ? "-" : out;
}

// The mesh's cell: "2x4x1" (dp x tp x pp), "2x4x2x1" (dp x tp x cp x pp) in a table that shows cp.
std::string mesh_cell(const Layout& l, bool with_cp) {
  return std::to_string(l.dp) + "x" + std::to_string(l.tp) + "x" + (with_cp ? std::to_string(l.cp) + "x" : "") +
         std::to_string(l.pp);
}

std::vector<std::string> plan_row(int rank, const Prediction& p, bool with_cp) {
  const TimeBreakdown& t = p.time;
  const Layout& l = p.layout;
  const auto share = [&](double s) { return format_cell("%.3g", s); };
  std::vector<std::string> row{std::to_string(rank),
          mesh_cell(l, with_cp),
          // interleaved/v; zb-v always runs 2 chunks per stage, its name says so
          std::string(schedule_kind_name(l.schedule)) +
              (l.schedule == ScheduleKind::Interleaved ? std::string("/").append(std::to_string(l.virtual_stages)) : ""),
          std::to_string(l.zero),
          std::to_string(l.micro_batch),
          std::to_string(p.micro_batches),
          format_cell("%.2f", p.memory.total() / GiB),
          format_cell("%.4g", p.step_s),
          format_cell("%.4g", p.tokens_per_s),
          format_cell("%.3f", p.mfu),
          share(t.compute),
          share(t.tp_comm),
          share(t.pp_comm),
          share(t.bubble),
          share(t.dp_exposed + t.zero_gather),
          share(t.optimizer + t.embedding_sync + t.norm + t.core_wait)};
  if (with_cp) row.insert(row.begin() + 12, share(t.cp_comm));  // after tp
  return row;
}

// "a, b, c"
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

po::options_description plan_options() {
  const std::string models = joined(gpt_preset_names()), clusters = joined(cluster_preset_names());
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value<std::string>()->default_value("gpt2"), ("model preset: " + models).c_str())
      ("layers", po::value<int>(), "transformer blocks (overrides the preset)")
      ("heads", po::value<int>(), "attention heads (overrides the preset)")
      ("channels", po::value<int>(), "model width C (overrides the preset)")
      ("vocab", po::value<int>(), "vocabulary size (overrides the preset's: 50257 for GPT-2, 128256 for Llama 3; "
       "padded to a multiple of 128)")
      ("max-seq-len", po::value<int>(), "context length of the model (overrides the preset)")
      ("kv-heads", po::value<int>(), "llama presets: key/value heads, dividing --heads (overrides the preset; "
       "fewer shrink attn.kv's weights and qkv's activations; tp that does not divide them keeps them whole on every rank)")
      ("ffn-hidden", po::value<int>(), "llama presets: SwiGLU's hidden width F (overrides the preset; the MLP "
       "holds 3 F C weights and keeps [N, 3F/tp] activations per layer)")
      ("seq-len", po::value<int>(), "tokens per sequence (default: the model's context)")
      ("global-batch", po::value<int>()->required(), "sequences per optimizer step, whole job")
      ("micro-batch", po::value<int>(), "sequences per forward pass (default: every divisor is tried)")
      ("dtype", po::value<std::string>(), "compute dtype, fp32 or bf16 (default: the cluster's peak dtype)")
      ("cluster", preset_or_file_value(".ini")->default_value("dgx-a100"),
       ("a preset (" + clusters + ") or an .ini file of `key = value` lines with the keys of --set "
        "(and optionally `preset = NAME` first)").c_str())
      ("nodes", po::value<int>(), "number of nodes (overrides the cluster)")
      ("gpus-per-node", po::value<int>(), "devices (ranks) per node (overrides the cluster)")
      ("set", po::value<std::vector<std::string>>(),
       ("KEY=VALUE, repeatable: override one cluster field (SI units: bytes, bytes/s, seconds, FLOP/s). "
        "Keys: " + joined(cluster_field_names())).c_str())
      ("calibrate", path_values(PathKind::ReadFile)->multitoken(),
       "JSON-lines files of `meshbench --json`: fit link latency and bandwidth from allreduce rows "
       "(hosts 1: intra-node, more: inter-node) and the GEMM rate and achieved fraction from train rows")
      ("layout", po::value<std::string>(),
       "predict this one layout in full, e.g. dp=2,tp=2,cp=2,pp=2,v=1,zero=1,micro=4,schedule=1f1b "
       "(dp defaults to the devices left, cp to 1, micro to --micro-batch or 1, schedule to 1f1b or interleaved "
       "for v > 1; schedule is gpipe, 1f1b, interleaved, zb-h1 or zb-v, whose v is always 2; cp splits each "
       "sequence over cp ranks, as `train --cp`)")
      ("top", po::value<int>()->default_value(10), "how many of the best layouts to list")
      ("bucket-mb", po::value<double>()->default_value(25.0), "data-parallel gradient bucket size (as `train`)")
      ("no-overlap", po::bool_switch(),
       "predict `train --no-overlap`: no bucket, gather or pipeline transfer hidden under compute (ring "
       "attention's transfers stay overlapped, as in train)")
      ("allow-cross-node-tp", po::bool_switch(), "also try tensor-parallel groups larger than a node")
      ("recompute", po::value<std::string>()->default_value("none"),
       "recomputation of every layout (as `train --recompute`): none; selective (attention probabilities and "
       "the MLP activation's output (GELU, SwiGLU) not kept, their forward run again in backward: small extra "
       "compute); full (only each "
       "layer's input kept, the layer's forward run again in backward: about one more forward of the layers)")
      ("sequence-parallel", po::bool_switch(),
       "sequence parallelism on every layout with tp >= 2 (as `train --sequence-parallel`): layernorm, residual and embedding-output activations "
       "and the messages between stages fall by tp, the tensor-parallel time stays the same")
      ("memory-options", po::bool_switch(),
       "search every memory option too: recompute none/selective/full, sequence parallelism off and on "
       "(tp >= 2, not zb-h1 or zb-v), ZeRO 0-3 (1-3 with dp >= 2), and list the fastest that fit; every ZeRO "
       "stage is predicted, but more recomputation than a variant of the same layout, ZeRO stage and "
       "sequence parallelism that already fits is not (it only costs time). Slower: a few times the plain "
       "search")
      ("largest", po::value<std::string>(),
       ("FAMILY: the largest model of a preset family that fits the cluster (families: " + joined(preset_families()) +
        "), each of its presets searched with --memory-options, smallest first, with the fastest layout that "
        "fits and its memory split; --seq-len defaults to each model's context").c_str());
  return desc;
}

constexpr const char* kSummary =
    "meshtrain plan --model M --global-batch B [--cluster C] [--layout ...]\n\n"
    "Predicts, without running anything, the memory per device and the time of a training step for\n"
    "every dp x tp x cp x pp layout (schedule, virtual stages, micro-batch, ZeRO) meshtrain could train\n"
    "the model with on the cluster, and lists the fastest that fit (cp, context parallelism, is tried\n"
    "where each rank keeps at least 8192 rows of a sequence). The model of a step: GEMM FLOPs at an\n"
    "achieved fraction of the peak, tensor-parallel allreduces exposed, ring attention's kv blocks beyond\n"
    "the block attention they overlap, the pipeline schedule simulated, data-parallel (dp x cp) buckets\n"
    "overlapped with backward, the optimizer bound by memory bandwidth; links per group inside or\n"
    "across nodes (mesh order tp, cp, dp, pp). Memory as meshtrain allocates it: fp32 master\n"
    "weights, gradients and AdamW moments, activations of every micro-batch in flight, as the memory\n"
    "options (recomputation, sequence parallelism, ZeRO 0-3) leave them. --largest FAMILY instead finds\n"
    "the largest model of a family that fits.\n"
    "Under mpirun only rank 0 prints.";

// What to predict, besides the model and the cluster.
struct PlanSettings {
  TrainingShape training;
  std::string dtype;               // "fp32" or "bf16"
  std::optional<int> micro_batch;  // --micro-batch
  int top = 10;
  SearchOptions search;            // its micro-batch, bucket size and overlap as above
};

PlanSettings read_settings(const po::variables_map& vm, const ModelShape& model, const Cluster& cluster) {
  PlanSettings s;
  TrainingShape& training = s.training;
  training.seq_len = vm.count("seq-len") ? vm["seq-len"].as<int>() : model.max_seq_len;
  training.global_batch = vm["global-batch"].as<int>();
  if (training.seq_len < 1 || training.seq_len > model.max_seq_len)
    throw UsageError("--seq-len " + std::to_string(training.seq_len) + " must be in [1, " +
                     std::to_string(model.max_seq_len) + "] (the model's context; see --max-seq-len)");
  if (training.global_batch < 1) throw UsageError("--global-batch must be at least 1");
  s.dtype = vm.count("dtype") ? vm["dtype"].as<std::string>() : cluster.peak_dtype;
  if (s.dtype != "fp32" && s.dtype != "bf16") throw UsageError("--dtype must be fp32 or bf16, got '" + s.dtype + "'");
  training.precision = s.dtype == "bf16" ? Precision::BF16 : Precision::FP32;
  // The attention implementation train would run there (its saved state differs): the CPU's for
  // clusters rated in fp32 (the CPU presets, as train rates the CPU), else CUDA's.
  training.attention = nn::attention_kernel_for(cluster.peak_dtype == "fp32");
  s.search.recompute = parse_recompute(vm["recompute"].as<std::string>());
  s.search.sequence_parallel = vm["sequence-parallel"].as<bool>();
  s.search.memory_options = vm["memory-options"].as<bool>();
  if (vm.count("micro-batch")) {
    s.micro_batch = vm["micro-batch"].as<int>();
    if (*s.micro_batch < 1) throw UsageError("--micro-batch must be at least 1");
  }
  s.top = vm["top"].as<int>();
  if (s.top < 1) throw UsageError("--top must be at least 1");
  s.search.micro_batch = s.micro_batch;
  s.search.bucket_mb = vm["bucket-mb"].as<double>();
  if (!(s.search.bucket_mb > 0)) throw UsageError("--bucket-mb must be positive");
  s.search.overlap = !vm["no-overlap"].as<bool>();
  s.search.allow_cross_node_tp = vm["allow-cross-node-tp"].as<bool>();
  return s;
}

void print_job(const ModelShape& model, const PlanSettings& s, const Cluster& cluster) {
  const TrainingShape& training = s.training;
  std::printf("model %s: %.4g B parameters, %.4g GFLOP per token (seq %d), %s compute\n", model.describe().c_str(),
              static_cast<double>(model.real_parameter_count()) / 1e9, model.training_flops_per_token(training.seq_len) / 1e9,
              training.seq_len, s.dtype.c_str());
  std::string options;
  if (s.search.memory_options) {
    options = ", every memory option tried (recompute, sequence parallelism, ZeRO 0-3)";
  } else {
    if (s.search.recompute != Recompute::None) options += std::string(", recompute ") + recompute_name(s.search.recompute);
    if (s.search.sequence_parallel) options += ", sequence parallel where tp >= 2";
  }
  std::printf("training: global batch %d x %d tokens%s\n%s\n", training.global_batch, training.seq_len,
              options.c_str(), describe(cluster).c_str());
}

// --layout: the full breakdown of one layout.
void predict_layout(const std::string& text, const ModelShape& model, const PlanSettings& s, const Cluster& cluster) {
  Layout layout = parse_layout(text, cluster.devices(), s.micro_batch, s.search.recompute, s.search.sequence_parallel);
  layout.bucket_mb = s.search.bucket_mb;
  layout.overlap = s.search.overlap;
  const int seq_len = s.training.seq_len;
  if (seq_len % (2 * layout.cp) != 0)
    throw UsageError("--layout " + text + ": cp=" + std::to_string(layout.cp) + " cuts each sequence into " +
                     std::to_string(2 * layout.cp) + " chunks: --seq-len " + std::to_string(seq_len) +
                     " must be a multiple of " + std::to_string(2 * layout.cp));
  Prediction p;
  try {
    p = predict_step(model, s.training, layout, cluster);
  } catch (const Error& e) {
    throw UsageError("--layout " + text + ": " + e.message());
  }
  std::printf("\n%s\n", describe(p).c_str());
}

// The search's outcome when no layout can be listed, as a usage error.
void require_plans(const SearchResult& result, const PlanSettings& s, const Cluster& cluster) {
  if (result.considered == 0)
    throw UsageError("no valid layout of " + std::to_string(cluster.devices()) + " devices for this model and --global-batch " +
                     std::to_string(s.training.global_batch) + " (dp must divide the batch, tp the heads, pp at most the layers)");
  if (result.plans.empty()) {
    const Prediction& p = *result.smallest_rejected;
    throw UsageError("the model fits in no layout of " + std::to_string(cluster.devices()) + " devices with " +
                     format_cell("%.1f", cluster.memory_bytes / GiB) + " GiB each: all " +
                     std::to_string(result.rejected_for_memory) + " layouts need more; the smallest, " +
                     describe(p.layout) + ", needs " + describe(p.memory) +
                     " (try more devices: --nodes, or a smaller --micro-batch or model)");
  }
}

// The table of the fastest layouts that fit, what was rejected, and the best one in full. With
// memory options a column says each row's recomputation and sequence parallelism.
// Why the best layout splits sequences (cp > 1): against the fastest layout without context
// parallelism that fits, or, where none fits, the least hungry of them.
std::string why_context_parallel(const SearchResult& result, int seq_len) {
  const Prediction& best = result.plans.front();
  const int cp = best.layout.cp;
  const auto gib = [](double bytes) { return format_cell("%.1f", bytes / GiB); };
  std::string why = "why cp " + std::to_string(cp) + ": it splits each sequence's " + std::to_string(seq_len) +
                    " tokens over " + std::to_string(cp) + " ranks (" + std::to_string(seq_len / cp) +
                    " rows each), activations " + gib(best.memory.activations) + " GiB per device; ";
  const auto without = std::find_if(result.plans.begin(), result.plans.end(),
                                    [](const Prediction& p) { return p.layout.cp == 1; });
  if (without != result.plans.end())
    return why + "the fastest layout without it, " + describe(without->layout) + ", fits but takes " +
           format_cell("%.4g", without->step_s) + " s per step (" + format_cell("%.2f", without->step_s / best.step_s) +
           "x as long)";
  if (!result.smallest_rejected_without_cp) return why + "no layout without it is valid for this model and batch";
  const Prediction& least = *result.smallest_rejected_without_cp;
  return why + "no layout without it fits: the least hungry, " + describe(least.layout) + ", needs " +
         gib(least.memory.total()) + " GiB per device of " + gib(least.memory_capacity) + " (activations " +
         gib(least.memory.activations) + " GiB)";
}

void report_search(const SearchResult& result, int top, const SearchOptions& search, int seq_len) {
  const bool options_column = search.memory_options || search.recompute != Recompute::None || search.sequence_parallel;
  const int shown = std::min<int>(top, static_cast<int>(result.plans.size()));
  // cp's factor and its ring's time where a listed layout splits sequences.
  const bool with_cp = std::any_of(result.plans.begin(), result.plans.begin() + shown,
                                   [](const Prediction& p) { return p.layout.cp > 1; });
  std::vector<std::string> header{"#", with_cp ? "dpxtpxcpxpp" : "dpxtpxpp", "schedule", "zero", "micro", "M", "GiB/dev",
                                  "step s", "tokens/s", "MFU", "compute", "tp", "pp", "bubble", "dp", "opt+other"};
  if (with_cp) header.insert(header.begin() + 12, "cp");
  if (options_column) header.insert(header.begin() + 4, "memory");
  TextTable table(header);
  for (int i = 0; i < shown; ++i) {
    const Prediction& p = result.plans[static_cast<std::size_t>(i)];
    std::vector<std::string> row = plan_row(i + 1, p, with_cp);
    if (options_column) row.insert(row.begin() + 4, memory_options_cell(p.layout));
    table.add_row(row);
  }
  std::printf("\n%d valid layouts predicted; the %d fastest that fit (times in seconds per step):\n%s", result.considered,
              shown, table.render().c_str());
  if (result.rejected_for_memory > 0) {
    const Prediction& s = *result.smallest_rejected;
    std::printf("%d layouts rejected for memory, e.g. %s: needs %s\n", result.rejected_for_memory,
                describe(s.layout).c_str(), describe(s.memory).c_str());
  } else {
    std::printf("no layout was rejected for memory\n");
  }
  std::printf("\nbest plan:\n%s\n", describe(result.plans.front()).c_str());
  if (result.plans.front().layout.cp > 1) std::printf("%s\n", why_context_parallel(result, seq_len).c_str());
}

// --largest FAMILY: each preset of the family, smallest first, searched with every memory option;
// a row per model (its fastest layout that fits, or what the least hungry layout needs), then the
// largest that fits in full.
// The presets of a family, smallest first; a UsageError for an unknown family.
std::vector<std::string> family_presets(const std::string& family) {
  std::vector<std::string> names;
  for (const std::string& name : gpt_preset_names())
    if (family_of(name) == family) names.push_back(name);
  if (names.empty())
    throw UsageError("--largest: unknown model family '" + family + "' (known: " + joined(preset_families()) + ")");
  std::stable_sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return gpt_preset(a).real_parameter_count() < gpt_preset(b).real_parameter_count();
  });
  return names;
}

void report_largest(const std::string& family, const po::variables_map& vm, const Cluster& cluster) {
  const std::vector<std::string> names = family_presets(family);
  std::printf("the largest %s model that fits, every memory option tried\n%s\n", family.c_str(), describe(cluster).c_str());
  TextTable table({"model", "parameters", "seq", "fits", "dpxtpxcpxpp", "schedule", "zero", "memory", "micro",
                   "GiB/dev", "step s", "MFU"});
  std::optional<std::pair<std::string, Prediction>> largest;
  for (const std::string& name : names) {
    const ModelShape model = gpt_preset(name);
    const std::string params = format_cell("%.4g B", static_cast<double>(model.real_parameter_count()) / 1e9);
    if (vm.count("seq-len") && vm["seq-len"].as<int>() > model.max_seq_len) {
      table.add_row({name, params, "-", "context " + std::to_string(model.max_seq_len) + " < --seq-len", "", "", "", "",
                     "", "", "", ""});
      continue;
    }
    PlanSettings s = read_settings(vm, model, cluster);
    s.search.memory_options = true;
    const SearchResult result = search_layouts(model, s.training, cluster, s.search);
    const std::string seq = std::to_string(s.training.seq_len);
    if (result.plans.empty()) {
      const std::string need =
          result.smallest_rejected ? format_cell("%.2f", result.smallest_rejected->memory.total() / GiB) : "-";
      table.add_row({name, params, seq, result.considered == 0 ? "no valid layout" : "no", "", "", "", "", "", need, "", ""});
      continue;
    }
    const Prediction& p = result.plans.front();
    const Layout& l = p.layout;
    table.add_row({name, params, seq, "yes", mesh_cell(l, /*with_cp=*/true),
                   std::string(schedule_kind_name(l.schedule)) +
                       (l.schedule == ScheduleKind::Interleaved ? "/" + std::to_string(l.virtual_stages) : ""),
                   std::to_string(l.zero), memory_options_cell(l), std::to_string(l.micro_batch),
                   format_cell("%.2f", p.memory.total() / GiB), format_cell("%.4g", p.step_s), format_cell("%.3f", p.mfu)});
    largest = {name, p};
  }
  std::printf("\n%s", table.render().c_str());
  if (!largest) {
    std::printf("\nno %s model fits on %d devices of %.1f GiB (GiB/dev: what the least hungry layout needs)\n",
                family.c_str(), cluster.devices(), cluster.memory_bytes / GiB);
    return;
  }
  std::printf("\nlargest that fits: %s, its fastest layout:\n%s\n", largest->first.c_str(),
              describe(largest->second).c_str());
}

}  // namespace

int plan_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc = plan_options();
  const auto parsed = parse_command_line("plan", kSummary, desc, args, mpi.world_rank());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const ModelShape model = read_model(vm);
  if (vm.count("largest") && vm.count("layout"))
    throw UsageError("--largest searches every layout of a family's models; --layout predicts one: give one of them");
  if (vm.count("largest")) family_presets(vm["largest"].as<std::string>());  // an unknown family, said by every rank
  if (mpi.world_rank() != 0) return 0;
  const Cluster cluster = read_cluster(vm);
  if (vm.count("largest")) {
    report_largest(vm["largest"].as<std::string>(), vm, cluster);
    std::fflush(stdout);
    return 0;
  }
  const PlanSettings settings = read_settings(vm, model, cluster);
  print_job(model, settings, cluster);
  if (vm.count("layout")) {
    predict_layout(vm["layout"].as<std::string>(), model, settings, cluster);
  } else {
    const SearchResult result = search_layouts(model, settings.training, cluster, settings.search);
    require_plans(result, settings, cluster);
    report_search(result, settings.top, settings.search, settings.training.seq_len);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace mt
