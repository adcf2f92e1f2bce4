// `meshtrain train`: trains a GPT on token shards on any dp x tp x pp layout of the job's ranks
// (one rank included), through the ParallelTrainer.
#include "commands/train_command.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "data/shard.h"
#include "checkpoint/checkpoint_dir.h"
#include "comm/agreement.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "launch/model_options.h"
#include "launch/session.h"
#include "models/gpt_weights.h"
#include "parallel/groups.h"
#include "parallel/layout_check.h"
#include "parallel/schedule.h"
#include "parallel/stage_partition.h"
#include "perf/memory_model.h"
#include "train/checkpointing.h"
#include "train/parallel_trainer.h"
#include "runtime/gemm_rate.h"
#include "train/train_settings.h"

namespace po = boost::program_options;

namespace mt {
namespace {

template <class T>
T get(const po::variables_map& vm, const char* name) {
  return vm[name].as<T>();
}

// --micro-batch when not given: the largest of 4, 2, 1 that divides each replica's share of the
// global batch (1 where dp does not divide it, so the layout check names only what must change).
int default_micro_batch(int global_batch, int dp) {
  for (const int m : {4, 2}) {
    if (global_batch % (std::int64_t{dp} * m) == 0) return m;
  }
  return 1;
}

}  // namespace

po::options_description train_options() {
  po::options_description desc("options");
  desc.add_options()
      ("config", path_value(PathKind::ReadFile),
       "read options from this ini file: one `name = value` per line, names as below without the "
       "dashes; options given on the command line win. A relative path in the file (data, metrics, "
       "checkpoint-dir...) is taken from the file's own folder, not the current directory")
      ("data", path_value(PathKind::ReadDir)->default_value("assets/corpus/fortunes"),
       "directory of llm.c token shards: *_train_NNNNNN.bin and, for validation, *_val_NNNNNN.bin "
       "(made by `meshtrain prepare`)")
      ("global-batch", po::value<int>()->default_value(8),
       "sequences per optimizer step, whatever the layout (a multiple of dp x --micro-batch)")
      ("micro-batch", po::value<int>(),
       "sequences per forward/backward pass; gradients accumulate over global-batch / (dp x micro-batch) "
       "passes (default: the largest of 4, 2, 1 that divides --global-batch / dp, so the defaults run on "
       "any rank count that divides the global batch)")
      ("seq-len", po::value<int>()->default_value(64), "tokens per sequence T (at most the model's context)")
      ("steps", po::value<int>()->default_value(100), "optimizer steps to run")
      ("lr", po::value<float>()->default_value(6e-4f, "6e-4"), "peak learning rate")
      ("lr-schedule", po::value<std::string>()->default_value("cosine"),
       "cosine, linear or constant decay after the warmup")
      ("warmup", po::value<int>()->default_value(0), "steps of linear learning-rate warmup")
      ("lr-decay-steps", po::value<int>(),
       "steps the learning rate decays over, reaching its floor there (default: --steps). A checkpoint keeps "
       "it: --resume with another --steps continues the saved decay (past its end at the floor) unless this "
       "option sets a new horizon")
      ("min-lr-fraction", po::value<float>()->default_value(0.1f, "0.1"),
       "final learning rate as a fraction of --lr (cosine and linear)")
      ("weight-decay", po::value<float>()->default_value(0.1f, "0.1"),
       "AdamW decoupled weight decay, applied to matrices and embeddings (not to biases or layernorms)")
      ("beta1", po::value<float>()->default_value(0.9f, "0.9"), "AdamW first-moment decay")
      ("beta2", po::value<float>()->default_value(0.95f, "0.95"), "AdamW second-moment decay")
      ("eps", po::value<float>()->default_value(1e-8f, "1e-8"), "AdamW epsilon")
      ("grad-clip", po::value<float>()->default_value(1.0f),
       "clip the global gradient norm to this value; 0 disables clipping")
      ("seed", po::value<std::uint64_t>()->default_value(1337),
       "seeds the initialization and the data order: the same seed gives the same run, bit for bit")
      ("eval-every", po::value<int>()->default_value(0),
       "steps between validation losses (0: only after the last step)")
      ("eval-batches", po::value<int>()->default_value(4), "global batches of validation data per evaluation (the same sequences every time)")
      ("log-every", po::value<int>()->default_value(10),
       "steps between progress lines (loss, tokens/s, MFU, ETA); the first and last steps are always shown")
      ("metrics", path_value(PathKind::WriteFile), "write one JSON line per step to this file")
      ("init-weights", path_value(PathKind::ReadFile),
       "start from this llm.c GPT-2 checkpoint (its shape must match the model options)")
      ("save-weights", path_value(PathKind::WriteFile), "write the trained weights as an llm.c checkpoint here")
      ("save-dtype", po::value<std::string>()->default_value("fp32"), "fp32 (llm.c version 3) or bf16 (version 5)")
      ("compute-dtype", po::value<std::string>()->default_value("fp32"),
       "fp32, or bf16: bf16 matrix multiplies and activations over fp32 master weights, gradients and "
       "optimizer state. bf16 is meant for CUDA; on the CPU it runs, slowly (its GEMMs widen to fp32), "
       "for testing")
      ("peak-tflops", po::value<double>(),
       "the device's matrix-multiply peak per rank, in TFLOP/s, for MFU (default on the CPU: the fastest of a "
       "few 1024^3 sgemm calls at start, about 0.2 s; on GPUs MFU is not reported unless given). An MFU over "
       "100% means the peak is too low: the progress line says so");
  po::options_description layout("parallel layout (dp x tp x pp must equal the number of ranks)");
  layout.add_options()
      ("dp", po::value<int>()->default_value(0),
       "data-parallel replicas: each takes global-batch/dp sequences per step (0: ranks / (tp x pp))")
      ("tp", po::value<int>()->default_value(1),
       "tensor-parallel ranks per layer: split heads, MLP and vocabulary (must divide each); keep them on one node")
      ("pp", po::value<int>()->default_value(1), "pipeline stages: the layers cut into pp consecutive parts")
      ("mesh-order", po::value<std::string>()->default_value("tp-dp-pp"),
       "how ranks map to coordinates, fastest-varying first: the default puts tensor-parallel groups on "
       "neighbouring ranks (one node), then data parallel, then pipeline stages")
      ("schedule", po::value<std::string>()->default_value("1f1b"),
       "pipeline schedule: gpipe (all forwards, then all backwards), 1f1b (one forward one backward: "
       "activations of at most pp micro-batches held), or interleaved (1F1B over --virtual-stages chunks per "
       "stage: a smaller bubble)")
      ("virtual-stages", po::value<int>()->default_value(1),
       "model chunks per pipeline stage for --schedule interleaved (at least 2; layers divisible by pp x v)")
      ("pp-layers", po::value<std::string>()->default_value(""),
       "layers per pipeline stage, e.g. 3,2,1 (default: balanced by estimated cost, the embedding on the "
       "first stage and the LM head on the last)")
      ("zero", po::value<int>()->default_value(0),
       "0: every data-parallel rank keeps the whole AdamW state; 1 (ZeRO-1): the state is sharded over the "
       "dp group (gradients reduce-scattered, parameters all-gathered)")
      ("bucket-mb", po::value<double>()->default_value(25.0),
       "size of the gradient buckets, in MiB: each bucket's reduction starts during backward as soon as its "
       "gradients are complete")
      ("no-overlap", po::bool_switch(),
       "do not overlap communication with compute (buckets reduced after backward, pipeline transfers waited "
       "for in place): the baseline that shows what overlap gains");
  desc.add(layout);
  po::options_description checkpoints("checkpoints (resuming works on any layout: dp, tp, pp, v, zero and the rank count may change)");
  checkpoints.add_options()
      ("checkpoint-dir", path_value(PathKind::WriteDir),
       "save checkpoints here as step_NNNNNNNN/ (every rank writes its shards, rank 0 a manifest.json with "
       "checksums); `latest` names the newest complete one. Saves are atomic: a run killed while saving leaves "
       "the previous checkpoint in force. One job at a time: rank 0 locks DIR/.lock (flock) for the run, a second "
       "job is refused naming the holder, a killed job's lock goes with it")
      ("save-every", po::value<int>()->default_value(0),
       "steps between checkpoints (0: only after the last step); needs --checkpoint-dir")
      ("keep", po::value<int>()->default_value(3), "keep the newest K checkpoints, deleting older ones (0: keep all)")
      ("resume", path_value(PathKind::ReadDir, "latest")->implicit_value("latest"),
       "continue a run: --resume alone takes the latest checkpoint of --checkpoint-dir, --resume DIR/step_N a given "
       "one. Parameters, AdamW state, the step and the data position are restored, so the same layout continues "
       "bit for bit and another layout within fp32 rounding; --steps is the total to reach, and the learning "
       "rate keeps the checkpoint's decay horizon (see --lr-decay-steps)");
  desc.add(checkpoints);
  add_model_options(desc);
  add_tokenizer_options(desc);
  add_runtime_options(desc);
  return desc;
}

// The layout options, checked against the job and the model; every rank reaches the same verdict.
LayoutChoice read_layout(const po::variables_map& vm, int world_size, const GptConfig& config,
                         TrainSettings& settings) {
  LayoutChoice c;
  c.mesh.tp = get<int>(vm, "tp");
  c.mesh.pp = get<int>(vm, "pp");
  c.mesh.order = get<std::string>(vm, "mesh-order");
  c.mesh.dp = get<int>(vm, "dp");
  MT_REQUIRE(c.mesh.dp >= 0, "--dp must be at least 1 (or 0 for ranks / (tp x pp)), got ", c.mesh.dp);
  MT_REQUIRE(c.mesh.tp >= 1 && c.mesh.pp >= 1, "--tp and --pp must be at least 1");
  if (c.mesh.dp == 0) {
    const std::int64_t tp_pp = std::int64_t{c.mesh.tp} * c.mesh.pp;
    MT_REQUIRE(world_size % tp_pp == 0, "--tp ", c.mesh.tp, " x --pp ", c.mesh.pp, " = ", tp_pp,
               " does not divide the job's ", world_size, " ranks (launch a multiple of it, or give --dp)");
    c.mesh.dp = static_cast<int>(world_size / tp_pp);
  }
  if (!vm.count("micro-batch") && c.mesh.dp >= 1) settings.micro_batch = default_micro_batch(settings.global_batch, c.mesh.dp);
  c.parallel.schedule = parse_schedule_kind(get<std::string>(vm, "schedule"));
  c.parallel.virtual_stages = get<int>(vm, "virtual-stages");
  const std::string pp_layers = get<std::string>(vm, "pp-layers");
  LayoutRequest request{c.mesh, c.parallel.schedule, c.parallel.virtual_stages, {}};
  if (!pp_layers.empty()) {
    MT_REQUIRE(c.parallel.virtual_stages == 1, "--pp-layers cannot be combined with --virtual-stages");
    request.pp_layers = parse_stage_layers(pp_layers, config.layers, c.mesh.pp);
  }
  c.parallel.pp_layers = request.pp_layers;
  LayoutLimits limits;
  limits.world_size = world_size;
  limits.layers = config.layers;
  limits.heads = config.heads;
  limits.mlp_width = 4 * config.channels;
  limits.vocab_rows = config.vocab_rows();
  limits.global_batch = settings.global_batch;
  limits.micro_batch = settings.micro_batch;
  check_layout(request, limits);
  c.parallel.zero = get<int>(vm, "zero");
  MT_REQUIRE(c.parallel.zero == 0 || c.parallel.zero == 1, "--zero must be 0 or 1, got ", c.parallel.zero);
  c.parallel.bucket_mb = get<double>(vm, "bucket-mb");
  MT_REQUIRE(c.parallel.bucket_mb > 0 && std::isfinite(c.parallel.bucket_mb), "--bucket-mb must be positive, got ",
             c.parallel.bucket_mb);
  c.parallel.overlap = !get<bool>(vm, "no-overlap");
  return c;
}

// Reads the options into settings; any invalid value is a usage error (same on every rank).
TrainSettings read_settings(const po::variables_map& vm) {
  TrainSettings s;
  s.global_batch = get<int>(vm, "global-batch");
  s.micro_batch = vm.count("micro-batch") ? get<int>(vm, "micro-batch") : default_micro_batch(s.global_batch, 1);
  s.seq_len = get<int>(vm, "seq-len");
  s.steps = get<int>(vm, "steps");
  s.grad_clip = get<float>(vm, "grad-clip");
  s.eval_every = get<int>(vm, "eval-every");
  s.eval_batches = get<int>(vm, "eval-batches");
  s.adamw = {get<float>(vm, "beta1"), get<float>(vm, "beta2"), get<float>(vm, "eps"), get<float>(vm, "weight-decay")};
  s.schedule.kind = parse_lr_schedule_kind(get<std::string>(vm, "lr-schedule"));
  s.schedule.max_lr = get<float>(vm, "lr");
  s.schedule.warmup_steps = get<int>(vm, "warmup");
  s.schedule.total_steps = vm.count("lr-decay-steps") ? get<int>(vm, "lr-decay-steps") : s.steps;
  MT_REQUIRE(s.schedule.total_steps >= 1, "--lr-decay-steps must be at least 1, got ", s.schedule.total_steps);
  s.schedule.min_lr_fraction = get<float>(vm, "min-lr-fraction");
  s.validate();
  return s;
}

namespace {

// A cap below what the model needs would fail at the first allocation over it, on some ranks and deep
// inside a step, where only MPI_Abort can free the ranks waiting for them. The cap and the model's
// size are known on every rank before anything is allocated, and the estimate is arithmetic
// (perf/memory_model.h): an upper bound on each rank's allocator peak, counted block by block from
// what the model, the optimizer, the pipeline executor's slots (validation's included: it is
// counted whether or not the data has a val split) and a step's temporary buffers hold. A cap at
// the estimate runs; one below it is a usage error, said once. save_weights: --save-weights gathers
// the whole model's fp32 parameters into one buffer on every rank after the last step.
void check_memory_cap(std::size_t cap, const GptConfig& config, DType compute, const TrainSettings& settings,
                      const LayoutChoice& layout, bool save_weights = false) {
  if (cap == 0) return;
  perf::Layout l;
  l.dp = layout.mesh.dp;
  l.tp = layout.mesh.tp;
  l.pp = layout.mesh.pp;
  l.virtual_stages = layout.parallel.virtual_stages;
  l.schedule = layout.parallel.schedule;
  l.zero = layout.parallel.zero;
  l.micro_batch = settings.micro_batch;
  l.bucket_mb = layout.parallel.bucket_mb;
  perf::TrainingShape training;
  training.seq_len = settings.seq_len;
  training.global_batch = settings.global_batch;
  training.precision = compute == DType::BF16 ? perf::Precision::BF16 : perf::Precision::FP32;
  const std::vector<int> chunk_layers = plan_stage_layers(config, layout.mesh, layout.parallel, settings.seq_len);
  const int micro = perf::micro_batches(training, l);
  const Schedule schedule = make_schedule(l.schedule, l.pp, micro, l.virtual_stages);
  const Schedule eval = make_forward_only_schedule(l.pp, micro, l.virtual_stages);
  perf::MemoryBreakdown m = perf::estimate_memory(config, training, l, perf::Cluster{}, chunk_layers,
                                                  perf::held_slots(schedule, &eval));
  if (save_weights) m.transient = std::max(m.transient, 4.0 * static_cast<double>(config.parameter_count()) + 256.0);
  const auto need = m.total();
  if (need <= static_cast<double>(cap)) return;
  const auto bytes = [](double b) { return format_bytes(static_cast<std::size_t>(b)); };
  const std::string who = l.pp > 1 ? "a rank of pipeline stage " + std::to_string(m.stage) : std::string("a rank");
  throw UsageError("--device-memory-limit " + bytes(static_cast<double>(cap)) + " is too small for this model: " + who +
                   " needs up to " + bytes(need) + ", " + bytes(need - static_cast<double>(cap)) +
                   " more (parameters " + bytes(m.parameters) + ", gradients " + bytes(m.gradients) +
                   ", AdamW moments " + bytes(m.optimizer) + ", activations " + bytes(m.activations + m.logits) +
                   " in " + std::to_string(m.in_flight) + " micro-batch slot(s), workspace " +
                   bytes(m.workspace + m.transient) +
                   "); raise the cap, or lower --micro-batch or --seq-len, or spread the model with --tp or --pp");
}

// Validation is optional: a corpus prepared with --val-fraction 0 has none.
bool has_split(const std::filesystem::path& dir, const std::string& split) {
  try {
    return !data::find_shards(dir, split).empty();
  } catch (const Error&) {
    return false;
  }
}

// Every rank's time breakdown since the last progress line, per step, and a line for the terminal.
struct TimingSummary {
  std::vector<TimeBreakdown> ranks;  // per step, in rank order
  int steps = 0;
  std::string line;
};

TimingSummary gather_timing(Communicator& world, DeviceContext& ctx, const TimeBreakdown& mine, int steps) {
  const std::vector<float> local{static_cast<float>(mine.compute_s / steps), static_cast<float>(mine.comm_s / steps),
                                 static_cast<float>(mine.bubble_s / steps)};
  Tensor all = Tensor::empty({3 * static_cast<std::int64_t>(world.size())}, DType::F32, ctx);
  world.allgather(Tensor::from_host(local, {3}, ctx), all);
  const std::vector<float> values = all.to_host<float>();
  TimingSummary t;
  t.steps = steps;
  TimeBreakdown mean;
  std::size_t most_bubble = 0, most_comm = 0;
  for (std::size_t r = 0; r < static_cast<std::size_t>(world.size()); ++r) {
    t.ranks.push_back({values[3 * r], values[3 * r + 1], values[3 * r + 2]});
    mean += t.ranks.back();
    if (t.ranks[r].bubble_s > t.ranks[most_bubble].bubble_s) most_bubble = r;
    if (t.ranks[r].comm_s > t.ranks[most_comm].comm_s) most_comm = r;
  }
  const double total = mean.compute_s + mean.comm_s + mean.bubble_s;
  const auto pct = [total](double x) { return total > 0 ? 100.0 * x / total : 0.0; };
  const auto rank_pct = [](const TimeBreakdown& b, double x) {
    const double sum = b.compute_s + b.comm_s + b.bubble_s;
    return sum > 0 ? 100.0 * x / sum : 0.0;
  };
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "     time: compute %.0f%% | exposed comm %.0f%% | bubble %.0f%% (mean of %d ranks; most comm: rank %zu "
                "%.0f%%, most bubble: rank %zu %.0f%%)",
                pct(mean.compute_s), pct(mean.comm_s), pct(mean.bubble_s), world.size(), most_comm,
                rank_pct(t.ranks[most_comm], t.ranks[most_comm].comm_s), most_bubble,
                rank_pct(t.ranks[most_bubble], t.ranks[most_bubble].bubble_s));
  t.line = buf;
  return t;
}

// {"timing": {"step": N, "steps": k, "ranks": [{"rank": 0, "compute_ms": .., "comm_ms": .., "bubble_ms": ..}]}}:
// each rank's mean per step over the k steps up to step N.
nlohmann::ordered_json timing_json(int step, const TimingSummary& t) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (std::size_t r = 0; r < t.ranks.size(); ++r)
    ranks.push_back({{"rank", r},
                     {"compute_ms", 1e3 * t.ranks[r].compute_s},
                     {"comm_ms", 1e3 * t.ranks[r].comm_s},
                     {"bubble_ms", 1e3 * t.ranks[r].bubble_s}});
  nlohmann::ordered_json j;
  j["timing"] = {{"step", step}, {"steps", t.steps}, {"ranks", ranks}};
  return j;
}

}  // namespace

int train_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc = train_options();
  auto parsed = parse_command_line("train",
                                   "Trains a GPT-2 style model on llm.c token shards with AdamW, gradient "
                                   "accumulation, clipping and a warmup + decay schedule, printing progress "
                                   "lines and validation losses.",
                                   desc, args, mpi.world_rank());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const std::string tokenizer = tokenizer_name(vm);
  const GptConfig config = read_model_config(vm, tokenizer_vocab_size(tokenizer));
  TrainSettings settings = read_settings(vm);  // read_layout settles the default micro-batch
  const std::string save_dtype = get<std::string>(vm, "save-dtype");
  if (save_dtype != "fp32" && save_dtype != "bf16")
    throw UsageError("unknown --save-dtype '" + save_dtype + "' (known: fp32, bf16)");
  const std::string compute_name = get<std::string>(vm, "compute-dtype");
  if (compute_name != "fp32" && compute_name != "bf16")
    throw UsageError("unknown --compute-dtype '" + compute_name + "' (known: fp32, bf16)");
  const DType compute = compute_name == "bf16" ? DType::BF16 : DType::F32;
  if (settings.seq_len > config.max_seq_len)
    throw UsageError("--seq-len " + std::to_string(settings.seq_len) + " exceeds the model's context of " +
                     std::to_string(config.max_seq_len));
  const int log_every = get<int>(vm, "log-every");
  if (log_every < 1) throw UsageError("--log-every must be at least 1");
  const std::filesystem::path checkpoint_dir = vm.count("checkpoint-dir") ? get<std::string>(vm, "checkpoint-dir") : "";
  const int save_every = get<int>(vm, "save-every");
  const int keep = get<int>(vm, "keep");
  if (save_every < 0 || keep < 0) throw UsageError("--save-every and --keep must be at least 0");
  if (save_every > 0 && checkpoint_dir.empty()) throw UsageError("--save-every needs --checkpoint-dir");
  const std::optional<std::string> resume =
      vm.count("resume") ? std::optional<std::string>(get<std::string>(vm, "resume")) : std::nullopt;
  if (resume && vm.count("init-weights"))
    throw UsageError("--resume and --init-weights exclude each other (a checkpoint holds the weights)");
  const LayoutChoice layout = read_layout(vm, mpi.world_size(), config, settings);
  const RuntimeOptions runtime = read_runtime_options(vm);
  check_memory_cap(runtime.device_memory_limit, config, compute, settings, layout, vm.count("save-weights") > 0);

  Session session = open_session(runtime);
  DeviceContext& ctx = *session.context;
  const bool root = session.placement.world_rank == 0;
  // Held until the run ends: no other job saves into (or prunes) this directory meanwhile.
  const auto checkpoint_lock = claim_checkpoint_dir(*session.world, ctx, checkpoint_dir);

  // Every rank opens every shard, so a missing directory or a bad shard fails every rank alike:
  // agreed, it is said once, and no rank waits for one that has already gone. The token ids are
  // checked here too (one pass at memory speed over each rank's share), not when a sequence holding
  // a bad one is first read: that would be one rank, steps later, in the middle of a step.
  const std::filesystem::path data_dir = get<std::string>(vm, "data");
  const std::uint64_t seed = get<std::uint64_t>(vm, "seed");
  std::unique_ptr<data::DataLoader> train_data, val;
  run_agreed(*session.world, ctx, [&] {
    train_data = std::make_unique<data::DataLoader>(
        data::DataLoader::for_split(data_dir, "train", settings.seq_len, seed, config.vocab_size));
    if (has_split(data_dir, "val"))
      val = std::make_unique<data::DataLoader>(
          data::DataLoader::for_split(data_dir, "val", settings.seq_len, seed, config.vocab_size));
    // Each rank scans its share of the shards (every world-size-th), so start-up does not grow with
    // the rank count; the agreement names the rank that found a bad one.
    std::size_t index = 0;
    for (const data::DataLoader* loader : {train_data.get(), val.get()})
      if (loader != nullptr)
        for (const data::ShardFile& shard : loader->shards())
          if (index++ % static_cast<std::size_t>(mpi.world_size()) == static_cast<std::size_t>(mpi.world_rank()))
            shard.check_vocab(config.vocab_size);
  });
  data::DataLoader& train = *train_data;

  TrainSettings run = settings;
  if (vm.count("peak-tflops")) {
    run.peak_flops = get<double>(vm, "peak-tflops") * 1e12;
  } else if (ctx.device().is_cpu()) {
    // The rate is only for MFU: under a cap too small for the measurement's matrices, MFU goes
    // unreported. Nothing is allocated yet, so every rank decides alike.
    try {
      run.peak_flops = measure_gemm_flops(ctx);
    } catch (const OutOfMemoryError&) {
      run.peak_flops = 0;
    }
  }
  check_pipeline_backend(layout.parallel.schedule, layout.mesh.pp, session.world->capabilities(),
                         session.world->backend_name());
  ParallelGroups groups = build_groups(*session.world, Mesh(layout.mesh));
  // No collective runs while the trainer is built: a rank that cannot build its part (out of memory
  // under --device-memory-limit) agrees with the others instead of leaving them in the first step.
  std::unique_ptr<ParallelTrainer> built;
  run_agreed(*session.world, ctx, [&] {
    built = std::make_unique<ParallelTrainer>(ctx, *session.world, groups, config, compute, train, val.get(), run,
                                              layout.parallel);
  });
  ParallelTrainer& trainer = *built;
  Gpt& model = trainer.model();
  std::optional<ResumeReport> resumed;
  if (resume) {
    std::filesystem::path from;
    run_agreed(*session.world, ctx, [&] { from = ckpt::resolve_checkpoint(*resume, checkpoint_dir); });
    resumed = load_checkpoint(trainer, from, {.lr_decay_steps_given = vm.count("lr-decay-steps") > 0});
    if (resumed->step >= settings.steps)
      MT_FAIL_AS(JobError, "the checkpoint ", from.string(), " is at step ", resumed->step, ": --steps ", settings.steps,
                 " leaves nothing to train (--steps is the total to reach)");
  } else if (vm.count("init-weights")) {
    // Every rank reads the same file: another shape (or a file cut short) fails every rank alike.
    run_agreed(*session.world, ctx, [&] { load_llmc_weights(model, ctx, get<std::string>(vm, "init-weights")); });
  } else {
    trainer.init(seed);
  }
  // Every rank's place, printed by rank 0 in rank order.
  const std::vector<std::string> places = gather_strings(MPI_COMM_WORLD, trainer.describe_rank());
  std::unique_ptr<MetricsWriter> metrics;
  if (root && vm.count("metrics")) {
    metrics = std::make_unique<MetricsWriter>(get<std::string>(vm, "metrics"), resumed.has_value());
    nlohmann::ordered_json header;
    header["run"] = {{"model", config.describe()},
                     {"parameters", config.real_parameter_count()},
                     {"global_batch", settings.global_batch},
                     {"micro_batch", settings.micro_batch},
                     {"seq_len", settings.seq_len},
                     {"steps", settings.steps},
                     {"schedule", trainer.settings().schedule.describe()},
                     {"seed", seed},
                     {"device", ctx.device().str()},
                     {"compute_dtype", dtype_name(compute)},
                     {"layout", {{"dp", layout.mesh.dp}, {"tp", layout.mesh.tp}, {"pp", layout.mesh.pp},
                                 {"schedule", schedule_kind_name(layout.parallel.schedule)},
                                 {"virtual_stages", layout.parallel.virtual_stages}, {"zero", layout.parallel.zero},
                                 {"bucket_mb", layout.parallel.bucket_mb}, {"overlap", layout.parallel.overlap}}},
                     {"peak_flops", run.peak_flops}};
    if (resumed) header["run"]["resumed_from"] = {{"dir", resumed->dir.string()}, {"step", resumed->step}};
    metrics->write_json(header.dump());
  }

  if (root) {
    std::printf("meshtrain train: %s, %s parameters\n", config.describe().c_str(),
                format_count(static_cast<double>(config.real_parameter_count())).c_str());
    std::printf("  data %s: %s train tokens in %zu shard(s)%s\n", data_dir.c_str(),
                format_count(static_cast<double>(train.tokens_per_epoch())).c_str(), train.num_shards(),
                val ? (", " + format_count(static_cast<double>(val->tokens_per_epoch())) + " validation").c_str()
                    : ", no validation split");
    std::printf("  batch %d x %d tokens (%d micro-batch(es) of %d), %d steps, %s\n", settings.global_batch,
                settings.seq_len, settings.micro_steps(), settings.micro_batch, settings.steps,
                trainer.settings().schedule.describe().c_str());
    std::printf("  device %s, %s compute, %d CPU thread(s)%s\n", ctx.device().str().c_str(), dtype_name(compute),
                ctx.cpu_threads(),
                run.peak_flops > 0 ? (", MFU against " + format_count(run.peak_flops) + "FLOP/s per rank").c_str() : "");
    const std::vector<int> stage_layers = plan_stage_layers(config, layout.mesh, layout.parallel, settings.seq_len);
    std::string split;
    for (std::size_t i = 0; i < stage_layers.size(); ++i) split += (i ? "," : "") + std::to_string(stage_layers[i]);
    std::printf("  layout %s, %s schedule%s, %d micro-batch(es) per step, layers per %s %s, zero %d, buckets %.3g MiB%s\n",
                layout.mesh.describe().c_str(), schedule_kind_name(layout.parallel.schedule),
                layout.parallel.virtual_stages > 1 ? (" (" + std::to_string(layout.parallel.virtual_stages) + " chunks per stage)").c_str() : "",
                trainer.micro_batches(), layout.parallel.virtual_stages > 1 ? "chunk" : "stage", split.c_str(),
                layout.parallel.zero, layout.parallel.bucket_mb, layout.parallel.overlap ? "" : ", no overlap");
    for (const std::string& place : places) std::printf("  %s\n", place.c_str());
    if (resumed) {
      std::printf("  resumed from %s: step %d, %s sequences consumed (saved on %s)%s\n", resumed->dir.c_str(),
                  resumed->step, format_count(static_cast<double>(resumed->sequences)).c_str(),
                  resumed->saved_layout.c_str(), resumed->optimizer_state ? "" : ", weights only");
      for (const std::string& note : resumed->notes) std::printf("  note: %s\n", note.c_str());
    }
    std::fflush(stdout);
  }

  const RunIdentity identity{seed, data_dir.string(), tokenizer};
  const int first_step = trainer.steps_done() + 1;
  double elapsed_after_first = 0.0;
  StepRecord last;
  TimeBreakdown since_log;
  int steps_since_log = 0;
  while (trainer.steps_done() < settings.steps) {
    session.watchdog->mark("began step " + std::to_string(trainer.steps_done() + 1) + " of " +
                           std::to_string(settings.steps));
    last = trainer.step();
    if (last.step > first_step) elapsed_after_first += last.step_ms / 1e3;
    since_log += last.time;
    ++steps_since_log;
    if (metrics) metrics->write(last);
    const bool show = last.step == first_step || last.step == settings.steps || last.step % log_every == 0 || last.val_loss;
    if (show) {
      // Collective: every rank reaches the same decision.
      const TimingSummary timing = gather_timing(*session.world, ctx, since_log, steps_since_log);
      since_log = {};
      steps_since_log = 0;
      if (root) {
        // ETA from the mean step time so far, leaving out the first (warm-up) step when possible.
        const double mean = last.step > first_step ? elapsed_after_first / (last.step - first_step) : last.step_ms / 1e3;
        std::printf("%s\n", format_progress(last, settings.steps, mean * (settings.steps - last.step)).c_str());
        // One rank has no communication or bubble to show.
        if (session.world->size() > 1) {
          std::printf("%s\n", timing.line.c_str());
          if (metrics) metrics->write_json(timing_json(last.step, timing).dump());
        }
        std::fflush(stdout);
      }
    }
    if (!checkpoint_dir.empty() && ((save_every > 0 && last.step % save_every == 0) || last.step == settings.steps)) {
      session.watchdog->mark("saving the checkpoint of step " + std::to_string(last.step));
      const SaveResult saved = save_checkpoint(trainer, checkpoint_dir, keep, identity);
      if (root) {
        std::printf("saved checkpoint %s (%s bytes, %.1f s)", saved.dir.c_str(),
                    format_count(static_cast<double>(saved.bytes)).c_str(), saved.seconds);
        for (const std::int64_t step : saved.pruned) std::printf(", removed %s", ckpt::step_dir_name(step).c_str());
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  if (vm.count("save-weights")) {
    const std::filesystem::path out = get<std::string>(vm, "save-weights");
    const std::vector<float> full = trainer.gather_parameters();  // collective
    if (root) {
      save_llmc_weights(config, full, out, save_dtype == "bf16" ? DType::BF16 : DType::F32);
      std::printf("saved weights to %s\n", out.c_str());
    }
  }
  if (root && last.val_loss) std::printf("final validation loss %.4f\n", *last.val_loss);
  return 0;
}

}  // namespace mt
