// `meshtrain train`'s options and what they ask for, read and checked before any device, data or
// MPI is touched: the run's settings and its one LayoutPlan, identical on every rank, so that a bad
// option is one UsageError said once (the config-file fuzzer, commands/tests/fuzz_config_file.cpp,
// runs these alone).
// defines: train_options, read_settings, read_layout, CheckpointPolicy, TrainJob, read_train_job, estimate_run_memory,
//          check_memory_cap
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "launch/options.h"           // defines: RuntimeOptions
#include "models/gpt_config.h"        // defines: GptConfig
#include "parallel/layout_plan.h"     // defines: LayoutPlan
#include "perf/memory_model.h"         // defines: MemoryBreakdown
#include "runtime/dtype.h"
#include "train/train_settings.h"     // defines: TrainSettings

namespace mt {

// Every option of `meshtrain train` (--config names an ini file of the same options).
boost::program_options::options_description train_options();
// The training settings; an invalid value throws UsageError (the same on every rank).
TrainSettings read_settings(const boost::program_options::variables_map& vm);
// The layout and batch options as one LayoutPlan for this job, model and sequence length (the batch
// sizes live in the plan alone; without --micro-batch the plan chooses it); UsageError when they
// do not fit.
LayoutPlan read_layout(const boost::program_options::variables_map& vm, int world_size, const GptConfig& config,
                       int seq_len);

// When checkpoints are written and how many are kept.
struct CheckpointPolicy {
  std::filesystem::path dir;  // empty: none
  int save_every = 0;         // 0: after the last step only
  int keep = 3;               // 0: all
  bool overwrite = false;     // --overwrite-checkpoints: an earlier run's checkpoints in `dir` are deleted
  bool due(int step, int last_step) const {
    return !dir.empty() && ((save_every > 0 && step % save_every == 0) || step == last_step);
  }
};

// Everything `meshtrain train` was asked to do.
struct TrainJob {
  std::string tokenizer;
  GptConfig config;
  TrainSettings settings;
  LayoutPlan plan;
  DType compute = DType::F32;
  DType save_dtype = DType::F32;
  int log_every = 10;
  int profile_steps = 0;  // --profile-ops: the last steps timed op by op (commands/train_op_profile.h)
  CheckpointPolicy checkpoints;
  std::optional<std::string> resume;  // "latest", "auto" or a step directory
  bool lr_decay_steps_given = false;
  std::optional<std::filesystem::path> init_weights, save_weights, metrics;
  std::filesystem::path data_dir;
  std::uint64_t seed = 0;
  std::optional<double> peak_tflops;
  RuntimeOptions runtime;
};

// A rank's memory estimate for the run (perf/memory_model.h: an upper bound on the allocator's peak,
// for the stage needing the most). on_cpu: the device's kind sets the LM head's chunk budget
// (models/head_chunks.h), which the memory model reads off the cluster's peak dtype (fp32 for a
// CPU). validation: validation's slots count too.
perf::MemoryBreakdown estimate_run_memory(const GptConfig& config, DType compute, int seq_len, const LayoutPlan& plan,
                                          bool on_cpu, bool validation);

// Refuses a --device-memory-limit below the run's estimated peak (perf/memory_model.h) on a device
// of this kind (the CPU's LM head takes smaller chunks): one UsageError, the same on every rank.
void check_memory_cap(const TrainJob& job, bool on_cpu);

// Reads and checks every option in the order a user would fix them, the device memory cap too
// where --device names the device's kind (cpu, cuda); with auto, the session checks it once it
// has bound one.
TrainJob read_train_job(const boost::program_options::variables_map& vm, int world_size);

}  // namespace mt
