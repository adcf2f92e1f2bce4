// `meshtrain train`, and the parts of it that read and check its options before any device, data
// or MPI is touched (the config-file fuzzer, commands/tests/fuzz_config_file.cpp, runs those alone).
// defines: train_command, train_options, read_settings, LayoutChoice, read_layout
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"
#include "models/gpt_config.h"        // defines: GptConfig
#include "parallel/mesh.h"            // defines: MeshShape
#include "train/parallel_trainer.h"   // defines: ParallelSettings
#include "train/train_settings.h"            // defines: TrainSettings

namespace mt {
int train_command(const std::vector<std::string>& args, const MpiRuntime& mpi);

// Every option of `meshtrain train` (--config names an ini file of the same options).
boost::program_options::options_description train_options();
// The training settings; an invalid value throws UsageError (the same on every rank).
TrainSettings read_settings(const boost::program_options::variables_map& vm);

struct LayoutChoice {
  MeshShape mesh;
  ParallelSettings parallel;
};
// The layout options, checked against the job and the model; UsageError when they do not fit.
// Without --micro-batch it sets settings.micro_batch to its default, which depends on dp.
LayoutChoice read_layout(const boost::program_options::variables_map& vm, int world_size, const GptConfig& config,
                         TrainSettings& settings);
}  // namespace mt
