// `meshtrain train`: trains a GPT on token shards on any dp x tp x pp layout of the job's ranks
// (one rank included), through the ParallelTrainer. The command is a sequence of phases:
// parse -> plan (commands/train_options.h) -> session (with --device auto, the memory cap) ->
// checkpoint directory -> data -> trainer -> restore -> loop (until the last step, or a stop asked by
// SIGTERM or Ctrl-C) -> finish.
#include "commands/train_command.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_dir.h"
#include "comm/agreement.h"
#include "commands/train_op_profile.h"
#include "commands/train_options.h"
#include "commands/train_progress.h"
#include "data/loader.h"
#include "data/shard.h"
#include "launch/command_line.h"
#include "launch/session.h"
#include "launch/stop_signals.h"
#include "launch/table.h"
#include "models/gpt_weights.h"
#include "parallel/groups.h"
#include "parallel/mesh.h"
#include "perf/memory_model.h"
#include "runtime/gemm_rate.h"
#include "train/checkpointing.h"
#include "train/parallel_trainer.h"

namespace po = boost::program_options;

namespace mt {
namespace {

// Validation is optional: a corpus prepared with --val-fraction 0 has none.
bool has_split(const std::filesystem::path& dir, const std::string& split) {
  try {
    return !data::find_shards(dir, split).empty();
  } catch (const Error&) {
    return false;
  }
}

struct TrainData {
  std::unique_ptr<data::DataLoader> train, val;  // val may be null
};

// Every rank opens every shard, so a missing directory or a bad shard fails every rank alike:
// agreed, it is said once, and no rank waits for one that has already gone. The token ids are
// checked here too (one pass at memory speed over each rank's share), not when a sequence holding
// a bad one is first read: that would be one rank, steps later, in the middle of a step.
TrainData open_data(Session& session, const TrainJob& job) {
  TrainData d;
  const int vocab = job.config.vocab_size, seq_len = job.settings.seq_len;
  run_agreed(*session.world, *session.context, [&] {
    d.train = std::make_unique<data::DataLoader>(
        data::DataLoader::for_split(job.data_dir, "train", seq_len, job.seed, vocab));
    if (has_split(job.data_dir, "val"))
      d.val = std::make_unique<data::DataLoader>(
          data::DataLoader::for_split(job.data_dir, "val", seq_len, job.seed, vocab));
    // Each rank scans its share of the shards (every world-size-th), so start-up does not grow with
    // the rank count; the agreement names the rank that found a bad one.
    const auto ranks = static_cast<std::size_t>(session.world->size());
    const auto rank = static_cast<std::size_t>(session.world->rank());
    std::size_t index = 0;
    for (const data::DataLoader* loader : {d.train.get(), d.val.get()})
      if (loader != nullptr)
        for (const data::ShardFile& shard : loader->shards())
          if (index++ % ranks == rank) shard.check_vocab(vocab);
  });
  return d;
}

// The matrix-multiply peak per rank for MFU: given, or measured on the CPU. The measurement is
// only for MFU: under a cap too small for its matrices, MFU goes unreported. Nothing is allocated
// yet, so every rank decides alike. Its matrices (12 MiB) leave neither cached blocks nor the
// allocator's peak behind: the peak reported at the end is the training's.
double peak_flops(const TrainJob& job, DeviceContext& ctx) {
  if (job.peak_tflops) return *job.peak_tflops * 1e12;
  if (!ctx.device().is_cpu()) return 0;
  double flops = 0;
  try {
    flops = measure_gemm_flops(ctx);
  } catch (const OutOfMemoryError&) {
  }
  ctx.allocator().release_cached();
  ctx.allocator().reset_peak();
  return flops;
}

// No collective runs while the trainer is built: a rank that cannot build its part (out of memory
// under --device-memory-limit) agrees with the others instead of leaving them in the first step.
std::unique_ptr<ParallelTrainer> build_trainer(Session& session, ParallelGroups& groups, const TrainJob& job,
                                               TrainData& data, TrainSettings run) {
  std::unique_ptr<ParallelTrainer> built;
  run_agreed(*session.world, *session.context, [&] {
    built = std::make_unique<ParallelTrainer>(*session.context, *session.world, groups, job.config, job.compute,
                                              *data.train, data.val.get(), std::move(run), job.plan);
  });
  return built;
}

// Where the weights come from: a checkpoint (with the optimizer and the data position), llm.c
// weights or a safetensors folder, or the seed.
std::optional<ResumeReport> restore(ParallelTrainer& trainer, Session& session, const TrainJob& job,
                                    const std::filesystem::path& from) {
  DeviceContext& ctx = *session.context;
  if (!from.empty()) {
    ResumeReport resumed = load_checkpoint(trainer, from, {.lr_decay_steps_given = job.lr_decay_steps_given});
    if (resumed.step >= job.settings.steps)
      MT_FAIL_AS(JobError, "the checkpoint ", from.string(), " is at step ", resumed.step, ": --steps ",
                 job.settings.steps, " leaves nothing to train (--steps is the total to reach)");
    return resumed;
  }
  if (job.init_weights) {
    // Every rank reads the same file: another shape (or a file cut short) fails every rank alike.
    run_agreed(*session.world, ctx, [&] { trainer.load_weights(*job.init_weights); });
  } else {
    trainer.init(job.seed);
  }
  return std::nullopt;
}

// The metrics file's first line: the run, its layout and where it resumed from.
std::unique_ptr<MetricsWriter> open_metrics(const TrainJob& job, const ParallelTrainer& trainer, DeviceContext& ctx,
                                            double peak, const std::optional<ResumeReport>& resumed) {
  auto metrics = std::make_unique<MetricsWriter>(*job.metrics, resumed.has_value());
  const LayoutRequest& layout = job.plan.layout();
  nlohmann::ordered_json header;
  header["run"] = {{"model", job.config.describe()},
                   {"parameters", job.config.real_parameter_count()},
                   {"global_batch", job.plan.global_batch()},
                   {"micro_batch", job.plan.micro_batch()},
                   {"seq_len", job.settings.seq_len},
                   {"steps", job.settings.steps},
                   {"schedule", trainer.settings().schedule.describe()},
                   {"seed", job.seed},
                   {"device", ctx.device().str()},
                   {"compute_dtype", dtype_name(job.compute)},
                   {"layout", {{"dp", layout.dp}, {"tp", layout.tp}, {"cp", layout.cp}, {"pp", layout.pp},
                               {"schedule", schedule_kind_name(layout.schedule)},
                               {"virtual_stages", layout.virtual_stages}, {"zero", layout.zero},
                               {"bucket_mb", layout.bucket_mb}, {"overlap", layout.overlap}}},
                   {"peak_flops", peak}};
  if (resumed) header["run"]["resumed_from"] = {{"dir", resumed->dir.string()}, {"step", resumed->step}};
  metrics->write_json(header.dump());
  return metrics;
}

// "layers per stage 3,2,1" and the rest of the layout line.
void print_layout(const TrainJob& job, const ParallelTrainer& trainer) {
  const LayoutRequest& layout = job.plan.layout();
  std::string split;
  for (std::size_t i = 0; i < job.plan.chunk_layers().size(); ++i)
    split += (i ? "," : "") + std::to_string(job.plan.chunk_layers()[i]);
  std::string memory_options;
  if (layout.recompute != Recompute::None) memory_options += std::string(", recompute ") + recompute_name(layout.recompute);
  if (layout.sequence_parallel) memory_options += ", sequence parallel";
  std::printf("  layout %s, %s schedule%s, %d pass(es) per step per rank, layers per %s %s, zero %d%s, buckets %.3g MiB%s\n",
              job.plan.mesh().describe().c_str(), schedule_kind_name(layout.schedule),
              layout.virtual_stages > 1 ? (" (" + std::to_string(layout.virtual_stages) + " chunks per stage)").c_str() : "",
              trainer.micro_batches(), layout.virtual_stages > 1 ? "chunk" : "stage", split.c_str(), layout.zero,
              memory_options.c_str(), layout.bucket_mb, layout.overlap ? "" : ", no overlap");
}

// The estimate of a rank's memory (commands/train_options.h estimate_run_memory) for the stage
// needing the most, split as the options change it: "memory per rank (estimate, stage 1 of
// 2): parameters 861.5 KiB, gradients ..., optimizer state ..., activations ... in 2 slots, workspace
// ...; total ...". Validation's slots count where the data has a val split.
perf::MemoryBreakdown estimated_memory(const TrainJob& job, const DeviceContext& ctx, bool validation) {
  return estimate_run_memory(job.config, job.compute, job.settings.seq_len, job.plan, ctx.device().is_cpu(), validation);
}

std::string memory_split(const TrainJob& job, const DeviceContext& ctx, bool validation) {
  const perf::MemoryBreakdown m = estimated_memory(job, ctx, validation);
  const auto bytes = [](double b) { return format_bytes(static_cast<std::size_t>(b)); };
  const int stages = job.plan.mesh().pp;
  const std::string where = stages > 1 ? ", stage " + std::to_string(m.stage) + " of " + std::to_string(stages) : "";
  // The head's one chunk of logits is the same whatever the slots: workspace, not activations.
  const std::string head = m.logits > 0 ? " (the LM head's logits chunk " + bytes(m.logits) + ")" : "";
  return "memory per rank (estimate" + where + "): parameters " + bytes(m.parameters) + ", gradients " +
         bytes(m.gradients) + ", optimizer state " + bytes(m.optimizer) + ", activations " + bytes(m.activations) +
         " in " + std::to_string(m.in_flight) + " slot(s), workspace " + bytes(m.workspace + m.transient + m.logits) +
         head + "; total " + bytes(m.total());
}

// What rank 0 prints before the first step: model, data, batches, device, layout, every rank's place.
void print_start(const TrainJob& job, const ParallelTrainer& trainer, const TrainData& data, DeviceContext& ctx,
                 double peak, const std::vector<std::string>& places, const std::optional<ResumeReport>& resumed,
                 const std::vector<std::string>& checkpoint_dir_notes) {
  const GptConfig& config = job.config;
  const TrainSettings& settings = job.settings;
  std::printf("meshtrain train: %s, %s parameters\n", config.describe().c_str(),
              format_count(static_cast<double>(config.real_parameter_count())).c_str());
  std::printf("  data %s: %s train tokens in %zu shard(s)%s\n", job.data_dir.c_str(),
              format_count(static_cast<double>(data.train->tokens_per_epoch())).c_str(), data.train->num_shards(),
              data.val ? (", " + format_count(static_cast<double>(data.val->tokens_per_epoch())) + " validation").c_str()
                       : ", no validation split");
  std::printf("  batch %d x %d tokens (micro-batches of %d), %d steps, %s\n", job.plan.global_batch(),
              settings.seq_len, job.plan.micro_batch(), settings.steps, trainer.settings().schedule.describe().c_str());
  std::printf("  device %s, %s compute, %d CPU thread(s)%s\n", ctx.device().str().c_str(), dtype_name(job.compute),
              ctx.cpu_threads(), peak > 0 ? (", MFU against " + format_count(peak) + "FLOP/s per rank").c_str() : "");
  print_layout(job, trainer);
  std::printf("  %s\n", memory_split(job, ctx, data.val != nullptr).c_str());
  for (const std::string& place : places) std::printf("  %s\n", place.c_str());
  if (job.plan.mesh().cp > 1) {
    // The ranks that split one sequence and pass key/value blocks around their ring.
    std::printf("  cp groups (one sequence each, cut into %d chunks): %s\n", 2 * job.plan.mesh().cp,
                format_groups(Mesh(job.plan.mesh()).all_cp_groups()).c_str());
  }
  if (resumed) {
    std::printf("  resumed from %s: step %d, %s sequences consumed (saved on %s)%s\n", resumed->dir.c_str(),
                resumed->step, format_count(static_cast<double>(resumed->sequences)).c_str(),
                resumed->saved_layout.c_str(), resumed->optimizer_state ? "" : ", weights only");
    for (const std::string& note : resumed->notes) std::printf("  note: %s\n", note.c_str());
  }
  for (const std::string& note : checkpoint_dir_notes) std::printf("  note: %s\n", note.c_str());
  std::fflush(stdout);
}

std::filesystem::path save_and_report(ParallelTrainer& trainer, Session& session, const TrainJob& job, int step) {
  session.watchdog->mark("saving the checkpoint of step " + std::to_string(step));
  const SaveResult saved = save_checkpoint(trainer, job.checkpoints.dir, job.checkpoints.keep,
                                           RunIdentity{job.seed, job.data_dir.string(), job.tokenizer});
  if (session.world->rank() != 0) return saved.dir;
  std::printf("saved checkpoint %s (%s bytes, %.1f s)", saved.dir.c_str(),
              format_count(static_cast<double>(saved.bytes)).c_str(), saved.seconds);
  for (const std::int64_t pruned : saved.pruned) std::printf(", removed %s", ckpt::step_dir_name(pruned).c_str());
  std::printf("\n");
  std::fflush(stdout);
  return saved.dir;
}

// How the loop ended: every step done, or a stop asked for by a signal (StopSignals).
struct LoopEnd {
  StepRecord last;
  int stop_signal = 0;  // 0: every step done
};

// Whether any rank was asked to stop (collective: every rank stops after the same step).
int agreed_stop(Session& session) {
  return agree_on_max(*session.world, *session.context, StopSignals::requested());
}

// Rank 0's one line on a stop: what was saved and how to go on.
void report_stop(int signal, int step, const std::filesystem::path& saved) {
  const std::string why = "stopped by " + StopSignals::describe(signal);
  if (step == 0) {
    std::printf("%s before the first step: nothing to save\n", why.c_str());
  } else if (saved.empty()) {
    std::printf("%s at step %d: nothing saved (no --checkpoint-dir)\n", why.c_str(), step);
  } else {
    std::printf("%s at step %d: saved %s; resume with --resume\n", why.c_str(), step, saved.c_str());
  }
  std::fflush(stdout);
}

// Steps to the end, with progress lines and checkpoints as due, until every step is done or a rank
// is asked to stop (SIGTERM, Ctrl-C): then the ranks save the step they are at (unless it was just
// saved) and end. With --profile-ops, the last steps are timed op by op and reported after the last.
LoopEnd run_loop(ParallelTrainer& trainer, Session& session, const TrainJob& job, MetricsWriter* metrics) {
  const int steps = job.settings.steps;
  const bool root = session.world->rank() == 0;
  LoopEnd end;
  end.stop_signal = agreed_stop(session);
  if (end.stop_signal != 0) {
    if (root) report_stop(end.stop_signal, 0, {});
    return end;
  }
  ProgressReporter progress(*session.world, *session.context, trainer.steps_done() + 1, steps, job.log_every, metrics);
  using clock = std::chrono::steady_clock;
  clock::duration slowest{};  // of the steps so far, validation included
  TrainOpProfile profile(steps, job.profile_steps);
  while (trainer.steps_done() < steps) {
    session.watchdog->mark("began step " + std::to_string(trainer.steps_done() + 1) + " of " + std::to_string(steps));
    profile.before_step(trainer.steps_done());
    const clock::time_point began = clock::now();
    end.last = trainer.step();
    slowest = std::max(slowest, clock::now() - began);
    profile.after_step(end.last);
    progress.after_step(end.last);
    std::filesystem::path saved;
    if (job.checkpoints.due(end.last.step, steps)) {
      StopSignals::set_agreement_deadline({});  // a save takes what it takes
      saved = save_and_report(trainer, session, job, end.last.step);
    }
    if (trainer.steps_done() == steps) {
      profile.report(*session.world, *session.context);
      break;
    }
    // A stop must be agreed on within ten steps' time (the slowest yet, validation included), or a
    // rank is gone (launch/stop_signals.h).
    StopSignals::set_agreement_deadline(
        std::chrono::duration_cast<std::chrono::milliseconds>(10 * slowest + std::chrono::seconds(10)));
    // Asked after the save, so a signal that came during it finds the step saved already.
    end.stop_signal = agreed_stop(session);
    if (end.stop_signal == 0) continue;
    StopSignals::agreed();
    if (saved.empty() && !job.checkpoints.dir.empty()) saved = save_and_report(trainer, session, job, end.last.step);
    if (root) report_stop(end.stop_signal, end.last.step, saved);
    break;
  }
  return end;
}

// The allocator's peak of every rank (collective), the highest next to the estimate printed at the
// start: "peak memory per rank (the allocator's): 3.1 MiB on rank 2, lowest 2.9 MiB; estimate 3.4 MiB".
void report_peak_memory(Session& session, const TrainJob& job, bool validation) {
  DeviceContext& ctx = *session.context;
  const std::vector<std::string> peaks =
      allgather_strings(*session.world, ctx, std::to_string(ctx.allocator().stats().peak));
  if (session.world->rank() != 0) return;
  std::size_t high = 0, low = SIZE_MAX;
  int high_rank = 0;
  for (std::size_t r = 0; r < peaks.size(); ++r) {
    const std::size_t peak = std::stoull(peaks[r]);
    if (peak > high) high = peak, high_rank = static_cast<int>(r);
    low = std::min(low, peak);
  }
  std::printf("peak memory per rank (the allocator's): %s on rank %d, lowest %s; estimate %s\n",
              format_bytes(high).c_str(), high_rank, format_bytes(low).c_str(),
              format_bytes(static_cast<std::size_t>(estimated_memory(job, ctx, validation).total())).c_str());
}

void finish(ParallelTrainer& trainer, const TrainJob& job, bool root, const StepRecord& last) {
  if (job.save_weights) {
    const std::vector<float> full = trainer.gather_parameters();  // collective
    if (root) {
      save_llmc_weights(job.config, full, *job.save_weights, job.save_dtype);
      std::printf("saved weights to %s\n", job.save_weights->c_str());
    }
  }
  if (root && last.val_loss) std::printf("final validation loss %.4f\n", *last.val_loss);
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
  const TrainJob job = read_train_job(*parsed, mpi.world_size());

  Session session = open_session(job.runtime);
  DeviceContext& ctx = *session.context;
  // --device auto: the device's kind is known now, before anything is allocated on it.
  if (job.runtime.device == DeviceRequest::Auto) check_memory_cap(job, ctx.device().is_cpu());
  const bool root = session.world->rank() == 0;
  // From here a SIGTERM or Ctrl-C ends the run after a step, saved (launch/stop_signals.h). The
  // handlers are never taken down: a SIGTERM that reaches a rank late, once the others have stopped,
  // must find them even while this process finalizes and exits.
  static const StopSignals* const stop_signals =
      new StopSignals(stop_options_for(session.launch.launcher, session.world->rank()));
  (void)stop_signals;
  // The lock is held until the run ends: no other job saves into (or prunes) this directory meanwhile.
  const ClaimedDir checkpoint_dir =
      claim_checkpoint_dir(*session.world, ctx, job.checkpoints.dir, job.resume, job.checkpoints.overwrite);
  TrainData data = open_data(session, job);
  TrainSettings run = job.settings;
  run.peak_flops = peak_flops(job, ctx);
  ParallelGroups groups = build_groups(*session.world, Mesh(job.plan.mesh()));
  const std::unique_ptr<ParallelTrainer> trainer = build_trainer(session, groups, job, data, run);
  const std::optional<ResumeReport> resumed = restore(*trainer, session, job, checkpoint_dir.start.resume_dir);
  const std::vector<std::string> dir_notes =
      settle_checkpoint_dir(*session.world, ctx, job.checkpoints.dir, checkpoint_dir.start);

  // Every rank's place, printed by rank 0 in rank order.
  const std::vector<std::string> places = allgather_strings(*session.world, ctx, trainer->describe_rank());
  std::unique_ptr<MetricsWriter> metrics;
  if (root && job.metrics) metrics = open_metrics(job, *trainer, ctx, run.peak_flops, resumed);
  if (root) print_start(job, *trainer, data, ctx, run.peak_flops, places, resumed, dir_notes);
  const LoopEnd end = run_loop(*trainer, session, job, metrics.get());
  if (end.stop_signal != 0) {
    if (StopSignals::launcher_is_ending(end.stop_signal)) {
      // Saved and said: mpirun would only kill the ranks waiting in MPI_Finalize for it.
      metrics.reset();
      std::fflush(nullptr);
      std::_Exit(kExitStopped);
    }
    return kExitStopped;
  }
  report_peak_memory(session, job, data.val != nullptr);
  finish(*trainer, job, root, end.last);
  return 0;
}

}  // namespace mt
