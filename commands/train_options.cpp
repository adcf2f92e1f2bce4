// The options of `meshtrain train` and their reading, before any device, data or MPI is touched:
// the settings of the run and its one LayoutPlan (the config-file fuzzer,
// commands/tests/fuzz_config_file.cpp, runs these alone).
#include "commands/train_options.h"

#include "runtime/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "launch/model_options.h"
#include "launch/options.h"
#include "launch/path_option.h"
#include "launch/seed_option.h"
#include "models/hf/hf_folder.h"  // defines: is_hf_folder
#include "perf/memory_model.h"
#include "runtime/error.h"
#include "train/metrics.h"

namespace po = boost::program_options;

namespace mt {
namespace {

// --micro-batch not given: LayoutRequest's value for "the plan chooses".
constexpr int kMicroBatchFromPlan = 0;

template <class T>
T get(const po::variables_map& vm, const char* name) {
  return vm[name].as<T>();
}

// What a run trains: the model's options aside, the data, the batches, the optimizer and its
// schedule, evaluation, progress and what is written.
void add_run_options(po::options_description& desc) {
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
       "passes (default: the largest of 4, 2, 1 that divides --global-batch / dp into micro-batches enough "
       "for --schedule: at least --pp for 1f1b and zb-*, a multiple of --pp for interleaved; so the defaults "
       "run on any layout whose rank count divides the global batch)")
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
      ("seed", seed_value(1337),
       "seeds the initialization and the data order: the same seed gives the same run, bit for bit")
      ("eval-every", po::value<int>()->default_value(0),
       "steps between validation losses (0: only after the last step)")
      ("eval-batches", po::value<int>()->default_value(4), "global batches of validation data per evaluation (the same sequences every time)")
      ("log-every", po::value<int>()->default_value(10),
       "steps between progress lines (loss, tokens/s, MFU, ETA); the first and last steps are always shown")
      ("metrics", path_value(PathKind::WriteFile), "write one JSON line per step to this file")
      ("profile-ops", po::value<int>()->default_value(0),
       "time every op of the run's last N steps, then print, per rank, how much of such a step its ops "
       "held and how much went outside them (communication waits, the bubble, the host), and the ops that "
       "took the most, as the mean over the ranks (GEMMs by shape). For a GPU without a profiler. Costs: "
       "each op drains its stream before and after, so those steps run slower (on a GPU, much slower) and "
       "their progress lines show it; what they compute is the same. 0: none")
      ("init-weights", path_value(PathKind::ReadFileOrDir),
       "start from these weights (their shape must match the model options): an llm.c GPT-2 file, or a Hugging "
       "Face GPT-2 or Llama folder (config.json with model.safetensors, or shards and model.safetensors.index.json; "
       "F32, BF16 or F16; a llama's kv heads, SwiGLU width, RoPE theta and RMSNorm epsilon must match --kv-heads, "
       "--ffn-hidden, --rope-theta, --norm-eps). Either is streamed tensor by tensor into each rank's shards")
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
}

po::options_description layout_options() {
  po::options_description layout("parallel layout (dp x tp x cp x pp must equal the number of ranks)");
  layout.add_options()
      ("dp", po::value<int>()->default_value(0),
       "data-parallel replicas: each takes global-batch/dp sequences per step (0: ranks / (tp x cp x pp))")
      ("tp", po::value<int>()->default_value(1),
       "tensor-parallel ranks per layer: split heads, MLP and vocabulary (must divide each); keep them on one node")
      ("cp", po::value<int>()->default_value(1),
       "context-parallel ranks per sequence: each sequence is cut into 2 x cp chunks and cp rank r holds "
       "chunks r and 2cp-1-r (a causal split that gives every rank the same attention work), so per-rank "
       "activations and attention work fall by about cp. Costs: every layer passes the key/value heads of a "
       "rank's rows around the cp ring (2 x kv_heads x head_size x rows x bytes per layer per step forward, "
       "twice that backward, for the dK/dV sums), overlapped with the block attention. Pays at long "
       "sequences, where activations or the T^2 attention dominate; at short ones the ring's messages cost "
       "more than they save. cp ranks hold the same weights: gradients (and ZeRO's shards) reduce over "
       "dp x cp. --seq-len must be a multiple of 2 x cp")
      ("pp", po::value<int>()->default_value(1), "pipeline stages: the layers cut into pp consecutive parts")
      ("mesh-order", po::value<std::string>()->default_value("tp-dp-pp"),
       "how ranks map to coordinates, fastest-varying first, naming tp, dp, pp and optionally cp (e.g. "
       "tp-cp-dp-pp): the default puts tensor-parallel groups on neighbouring ranks (one node), then data "
       "parallel, then pipeline stages; an order without cp puts cp right after tp (its ring passes "
       "key/value blocks every layer: keep it close)")
      ("schedule", po::value<std::string>()->default_value("1f1b"),
       "pipeline schedule (pp > 1; interleaved where --virtual-stages is 2 or more and no schedule is "
       "named), with m micro-batches per step and p stages: gpipe (all forwards, then all "
       "backwards: activations of all m micro-batches held; bubble (p-1)/(m+p-1)); 1f1b (one forward one "
       "backward: at most p held, same bubble); interleaved (1F1B over --virtual-stages v chunks per stage: "
       "bubble / v, for v times the stage-to-stage messages); zb-h1 (zero bubble: each backward split into "
       "the input gradient B and the weight gradient W, W filling the bubble: about a third of 1F1B's at "
       "1F1B's activation memory, plus the gradients W waits on); zb-v (two chunks per stage in a V: bubble "
       "near zero once m >= 2p, memory like 1F1B's). zb-* pay most where the bubble is large (m close to p); "
       "with m >> p every schedule's bubble is small")
      ("virtual-stages", po::value<int>()->default_value(1),
       "model chunks per pipeline stage for --schedule interleaved (at least 2, layers divisible by pp x v; "
       "2 or more without --schedule selects interleaved); zb-v always runs 2")
      ("pp-layers", po::value<std::string>()->default_value(""),
       "layers per pipeline stage, e.g. 3,2,1 (default: balanced by estimated cost, the embedding on the "
       "first stage and the LM head on the last)")
      ("zero", po::value<int>()->default_value(0),
       "ZeRO stage over the dp group (per-rank bytes per parameter, fp32, AdamW: 16 at 0): 0: every "
       "data-parallel rank keeps the whole AdamW state; 1: the state (8 bytes) is sharded over dp "
       "(gradients reduce-scattered, parameters all-gathered after the update: an allreduce's bytes; "
       "under bf16 the GEMM weights are gathered as their bf16 copy, 2 bytes, for all of ZeRO 1-3); "
       "2: the gradients (4 bytes) too: each parameter unit (a layer's attention, its MLP, the embedding) is "
       "reduce-scattered after its backward in every micro-batch "
       "and only the owned shard kept (gradient accumulation then communicates once per micro-batch); "
       "3: the parameters (4 bytes) too: each layer's attention and MLP are all-gathered before their "
       "forward and again before their backward, the next layer's prefetched, and freed after use (1.5x "
       "ZeRO-1's bytes per micro-batch); an embedding larger than a layer's MLP is cut into vocabulary-row "
       "pieces gathered one at a time, twice per chunk of the LM head's rows")
      ("recompute", po::value<std::string>()->default_value("none"),
       "activation recomputation: none (forward keeps all backward reads); selective (keep the GEMMs' inputs "
       "and outputs, recompute attention scores/softmax and GELU in backward: saves the [B, heads, T, T] "
       "attention matrix, a few percent more compute); full (keep only each layer's input, run the layer's "
       "forward again in backward: activations fall to about one layer's plus an [N, C] per layer, for about "
       "one more forward, +25-40% step time)")
      ("sequence-parallel", po::bool_switch(),
       "with --tp >= 2: split layernorms, residual adds and the embedding output along the sequence over the "
       "tp ranks (all-gather / reduce-scatter instead of allreduce, the same bytes): their activations fall "
       "by tp")
      ("bucket-mb", po::value<double>()->default_value(25.0),
       "size of the gradient buckets, in MiB: each bucket's reduction starts during backward as soon as its "
       "gradients are complete")
      ("no-overlap", po::bool_switch(),
       "do not overlap communication with compute (buckets reduced after backward, pipeline transfers waited "
       "for in place): the baseline that shows what overlap gains. Ring attention (--cp) still overlaps its "
       "block transfers, as the plan assumes");
  return layout;
}

po::options_description checkpoint_options() {
  po::options_description checkpoints("checkpoints (resuming works on any layout: dp, tp, cp, pp, v, zero and the rank count may change)");
  checkpoints.add_options()
      ("checkpoint-dir", path_value(PathKind::WriteDir),
       "save checkpoints here as step_NNNNNNNN/ (every rank writes its shards, rank 0 a manifest.json with "
       "checksums); `latest` names the newest complete one. Saves are atomic: a run killed while saving leaves "
       "the previous checkpoint in force. One job at a time: rank 0 locks DIR/.lock (flock) for the run, a second "
       "job is refused naming the holder, a killed job's lock goes with it. DIR holds one run's line of "
       "checkpoints: a run without --resume is refused where DIR already holds some, and a --resume of a step "
       "older than DIR's newest moves the newer ones aside to DIR/set_aside/ (said at start)")
      ("overwrite-checkpoints", po::bool_switch(),
       "start afresh in a --checkpoint-dir that holds an earlier run's checkpoints, deleting them once this run "
       "has its weights (without it such a run is refused, so a relaunch that forgets --resume loses nothing)")
      ("save-every", po::value<int>()->default_value(0),
       "steps between checkpoints (0: only after the last step); needs --checkpoint-dir")
      ("keep", po::value<int>()->default_value(3), "keep the newest K checkpoints, deleting older ones (0: keep all)")
      ("resume", path_value(PathKind::ReadDir, {"latest", "auto"})->implicit_value("latest"),
       "continue a run: --resume alone takes the latest checkpoint of --checkpoint-dir, --resume DIR/step_N a given "
       "one, --resume auto the latest when there is one and otherwise the start the other options give (the seed or "
       "--init-weights: for a job script that is requeued). Parameters, AdamW state, the step and the data position "
       "are restored, so the same layout continues bit for bit and another layout within fp32 rounding; --steps is "
       "the total to reach, and the learning rate keeps the checkpoint's decay horizon (see --lr-decay-steps). "
       "A run stopped by SIGTERM, SIGINT (Ctrl-C) or SIGUSR1 saves the step it is at and exits with 3: resume it");
  return checkpoints;
}

}  // namespace

po::options_description train_options() {
  po::options_description desc("options");
  add_run_options(desc);
  desc.add(layout_options());
  desc.add(checkpoint_options());
  add_model_options(desc);
  add_tokenizer_options(desc);
  add_runtime_options(desc);
  return desc;
}

namespace {

// The step and learning-rate options checked by their own names, before TrainSettings::validate and
// LrSchedule::validate speak of fields: --steps 0 was "--lr-decay-steps must be at least 1" (the
// decay defaults to --steps), and --warmup 200 "learning-rate warmup_steps must be in [0,
// total_steps = 100]". The batch options are the plan's to check (read_layout).
void check_schedule_options(const TrainSettings& s, bool decay_given) {
  MT_REQUIRE(s.steps >= 1, "--steps must be at least 1, got ", s.steps);
  const LrSchedule& lr = s.schedule;
  MT_REQUIRE(lr.total_steps >= 1, "--lr-decay-steps must be at least 1, got ", lr.total_steps);
  MT_REQUIRE(std::isfinite(lr.max_lr) && lr.max_lr >= 0.0f, "--lr must be a number of at least 0, got ", lr.max_lr);
  MT_REQUIRE(lr.warmup_steps >= 0, "--warmup must be at least 0, got ", lr.warmup_steps);
  const char* decay = decay_given ? "--lr-decay-steps" : "--steps";
  MT_REQUIRE(lr.warmup_steps <= lr.total_steps, "--warmup ", lr.warmup_steps, " is longer than the ", lr.total_steps,
             " steps the learning rate decays over (", decay, "): give --warmup ", lr.total_steps, " or less, or ",
             decay_given ? "a larger --lr-decay-steps" : "more --steps");
  MT_REQUIRE(lr.min_lr_fraction >= 0.0f && lr.min_lr_fraction <= 1.0f, "--min-lr-fraction must be in [0, 1], got ",
             lr.min_lr_fraction);
}

}  // namespace

// Reads the options into settings; any invalid value is a usage error (same on every rank).
TrainSettings read_settings(const po::variables_map& vm) {
  TrainSettings s;
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
  s.schedule.min_lr_fraction = get<float>(vm, "min-lr-fraction");
  check_schedule_options(s, vm.count("lr-decay-steps") > 0);
  s.validate();
  return s;
}

namespace {

// Virtual stages are the interleaved schedule's: asking for 2 or more without naming a schedule asks
// for it (the default, 1f1b, refused them). A schedule named, in a file too, is kept and checked.
ScheduleKind read_schedule(const po::variables_map& vm, int virtual_stages) {
  if (vm["schedule"].defaulted() && virtual_stages > 1) return ScheduleKind::Interleaved;
  return parse_schedule_kind(get<std::string>(vm, "schedule"));
}

}  // namespace

LayoutPlan read_layout(const po::variables_map& vm, int world_size, const GptConfig& config, int seq_len) {
  LayoutRequest request;
  request.tp = get<int>(vm, "tp");
  request.pp = get<int>(vm, "pp");
  request.cp = get<int>(vm, "cp");
  request.order = get<std::string>(vm, "mesh-order");
  request.dp = get<int>(vm, "dp");
  request.virtual_stages = get<int>(vm, "virtual-stages");
  request.schedule = read_schedule(vm, request.virtual_stages);
  // The CLI reads the whole numbers; the plan checks them against the pipeline and the model.
  const std::string pp_layers = get<std::string>(vm, "pp-layers");
  if (!pp_layers.empty()) request.pp_layers = parse_stage_layers(pp_layers);
  request.zero = get<int>(vm, "zero");
  request.recompute = parse_recompute(get<std::string>(vm, "recompute"));
  request.sequence_parallel = get<bool>(vm, "sequence-parallel");
  // Not given: the plan chooses (its default depends on dp). A 0 given would mean that too: refused here.
  request.micro_batch = vm.count("micro-batch") ? get<int>(vm, "micro-batch") : kMicroBatchFromPlan;
  MT_REQUIRE(!vm.count("micro-batch") || request.micro_batch >= 1, "--micro-batch must be at least 1, got ",
             request.micro_batch);
  request.bucket_mb = get<double>(vm, "bucket-mb");
  request.overlap = !get<bool>(vm, "no-overlap");
  LayoutPlan plan(std::move(request), layout_dims(config, seq_len), world_size, get<int>(vm, "global-batch"));
  // Context parallelism cuts each sequence into 2 x cp chunks (parallel/causal_split.h).
  const int cp = plan.mesh().cp;
  MT_REQUIRE(seq_len % (2 * cp) == 0, "--cp ", cp, " cuts each sequence into ", 2 * cp, " chunks: --seq-len ",
             seq_len, " must be a multiple of ", 2 * cp);
  // Sequence parallelism splits a cp rank's rows of the micro-batch over tp.
  const std::int64_t positions = std::int64_t{plan.micro_batch()} * (seq_len / cp);
  MT_REQUIRE(!plan.layout().sequence_parallel || positions % plan.mesh().tp == 0, "--sequence-parallel splits a "
             "micro-batch's --micro-batch ", plan.micro_batch(), " x --seq-len ", seq_len,
             cp > 1 ? " / --cp " + std::to_string(cp) : std::string(), " = ", positions, " positions over --tp ",
             plan.mesh().tp, ": they must divide evenly");
  return plan;
}

perf::MemoryBreakdown estimate_run_memory(const GptConfig& config, DType compute, int seq_len, const LayoutPlan& plan,
                                          bool on_cpu, bool validation) {
  perf::TrainingShape training;
  training.seq_len = seq_len;
  training.global_batch = plan.global_batch();
  training.precision = compute == DType::BF16 ? perf::Precision::BF16 : perf::Precision::FP32;
  training.attention = nn::attention_kernel_for(on_cpu);
  perf::Cluster device;
  if (on_cpu) device.peak_dtype = "fp32";
  return perf::estimate_memory(config, training, plan, device, perf::held_slots(plan, validation));
}

// A cap below what the model needs would fail at the first allocation over it, on some ranks and deep
// inside a step, where only MPI_Abort can free the ranks waiting for them. The cap and the model's
// size are known on every rank before anything is allocated, and the estimate is arithmetic
// (perf/memory_model.h): an upper bound on each rank's allocator peak, counted block by block from
// what the model, the optimizer, the pipeline executor's slots (validation's included: it is
// counted whether or not the data has a val split) and a step's temporary buffers hold. A cap at
// the estimate runs; one below it is a usage error, said once. save_weights: --save-weights gathers
// the whole model's fp32 parameters into one buffer on every rank after the last step. The device's
// kind sets the LM head's chunk budget (models/head_chunks.h): a run that falls back to the CPU is
// estimated as one.
void check_memory_cap(const TrainJob& job, bool on_cpu) {
  const std::size_t cap = job.runtime.device_memory_limit;
  if (cap == 0) return;
  const GptConfig& config = job.config;
  const LayoutPlan& plan = job.plan;
  perf::MemoryBreakdown m =
      estimate_run_memory(config, job.compute, job.settings.seq_len, plan, on_cpu, /*validation=*/true);
  if (job.save_weights) m.transient = std::max(m.transient, 4.0 * static_cast<double>(config.parameter_count()) + 256.0);
  const auto need = m.total();
  if (need <= static_cast<double>(cap)) return;
  const auto bytes = [](double b) { return format_bytes(static_cast<std::size_t>(b)); };
  const std::string who = plan.mesh().pp > 1 ? "a rank of pipeline stage " + std::to_string(m.stage) : std::string("a rank");
  throw UsageError("--device-memory-limit " + bytes(static_cast<double>(cap)) + " is too small for this model: " + who +
                   " needs up to " + bytes(need) + ", " + bytes(need - static_cast<double>(cap)) +
                   " more (parameters " + bytes(m.parameters) + ", gradients " + bytes(m.gradients) +
                   ", AdamW moments " + bytes(m.optimizer) + ", activations " + bytes(m.activations) + " in " +
                   std::to_string(m.in_flight) + " micro-batch slot(s), workspace " +
                   bytes(m.workspace + m.transient + m.logits) +
                   "); raise the cap, or lower --micro-batch or --seq-len, or spread the model with --tp or --pp (or "
                   "a long sequence with --cp)");
}

namespace {

DType read_dtype(const po::variables_map& vm, const char* option) {
  const std::string name = get<std::string>(vm, option);
  if (name != "fp32" && name != "bf16") throw UsageError("unknown --" + std::string(option) + " '" + name + "' (known: fp32, bf16)");
  return name == "bf16" ? DType::BF16 : DType::F32;
}

CheckpointPolicy read_checkpoint_policy(const po::variables_map& vm) {
  CheckpointPolicy p;
  if (vm.count("checkpoint-dir")) p.dir = get<std::string>(vm, "checkpoint-dir");
  p.save_every = get<int>(vm, "save-every");
  p.keep = get<int>(vm, "keep");
  if (p.save_every < 0 || p.keep < 0) throw UsageError("--save-every and --keep must be at least 0");
  if (p.save_every > 0 && p.dir.empty()) throw UsageError("--save-every needs --checkpoint-dir");
  p.overwrite = get<bool>(vm, "overwrite-checkpoints");
  if (p.overwrite && p.dir.empty()) throw UsageError("--overwrite-checkpoints needs --checkpoint-dir");
  return p;
}

template <class T>
std::optional<T> optional_value(const po::variables_map& vm, const char* name) {
  return vm.count(name) ? std::optional<T>(get<T>(vm, name)) : std::nullopt;
}

}  // namespace

TrainJob read_train_job(const po::variables_map& vm, int world_size) {
  const std::string tokenizer = tokenizer_name(vm);
  const GptConfig config = read_model_config(vm, tokenizer_vocab_size(tokenizer));
  TrainSettings settings = read_settings(vm);
  const DType save_dtype = read_dtype(vm, "save-dtype");
  const DType compute = read_dtype(vm, "compute-dtype");
  if (settings.seq_len > config.max_seq_len)
    throw UsageError("--seq-len " + std::to_string(settings.seq_len) + " exceeds the model's context of " +
                     std::to_string(config.max_seq_len));
  const int log_every = get<int>(vm, "log-every");
  if (log_every < 1) throw UsageError("--log-every must be at least 1");
  const int profile_steps = get<int>(vm, "profile-ops");
  if (profile_steps < 0 || profile_steps > settings.steps)
    throw UsageError("--profile-ops " + std::to_string(profile_steps) + " must be between 0 and --steps " +
                     std::to_string(settings.steps));
  const CheckpointPolicy checkpoints = read_checkpoint_policy(vm);
  const std::optional<std::string> resume = optional_value<std::string>(vm, "resume");
  if (resume && *resume != "auto" && vm.count("init-weights"))
    throw UsageError("--resume and --init-weights exclude each other (a checkpoint holds the weights; --resume auto "
                     "takes --init-weights where there is no checkpoint yet)");
  if (resume == "auto" && checkpoints.dir.empty()) throw UsageError("--resume auto needs --checkpoint-dir");
  if (vm.count("init-weights")) {
    const std::filesystem::path weights = get<std::string>(vm, "init-weights");
    if (std::filesystem::is_directory(weights) && !is_hf_folder(weights))
      throw UsageError("--init-weights '" + weights.string() + "' is a directory, where a file is wanted (or a "
                       "safetensors folder: config.json with model.safetensors or model.safetensors.index.json)");
    if (!std::filesystem::is_directory(weights) && config.is_llama())
      throw UsageError("--init-weights '" + weights.string() + "' is an llm.c weights file, which holds a GPT-2 only; "
                       "the model is a llama (give a safetensors folder, or --resume a checkpoint)");
  }
  if (vm.count("save-weights") && config.is_llama())
    throw UsageError("--save-weights writes llm.c's format, which holds a GPT-2 only; the model is a llama (save a "
                     "checkpoint with --checkpoint-dir and `meshtrain convert --to-format safetensors` it)");
  LayoutPlan plan = read_layout(vm, world_size, config, settings.seq_len);
  const RuntimeOptions runtime = read_runtime_options(vm);
  TrainJob job{.tokenizer = tokenizer,
               .config = config,
               .settings = settings,
               .plan = std::move(plan),
               .compute = compute,
               .save_dtype = save_dtype,
               .log_every = log_every,
               .profile_steps = profile_steps,
               .checkpoints = checkpoints,
               .resume = resume,
               .lr_decay_steps_given = vm.count("lr-decay-steps") > 0,
               .init_weights = optional_value<std::string>(vm, "init-weights"),
               .save_weights = optional_value<std::string>(vm, "save-weights"),
               .metrics = optional_value<std::string>(vm, "metrics"),
               .data_dir = get<std::string>(vm, "data"),
               .seed = get<SeedValue>(vm, "seed").value,
               .peak_tflops = optional_value<double>(vm, "peak-tflops"),
               .runtime = runtime};
  // Where the options name the device's kind; with --device auto, the session checks once it has
  // bound a device (commands/train_command.cpp).
  if (runtime.device != DeviceRequest::Auto) check_memory_cap(job, /*on_cpu=*/runtime.device == DeviceRequest::Cpu);
  return job;
}

}  // namespace mt
