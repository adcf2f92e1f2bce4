#include "commands/convert_command.h"

#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "models/gpt_weights.h"
#include "models/llmc/llmc_weights.h"
#include "parallel/layout_plan.h"
#include "train/checkpoint_convert.h"
#include "train/checkpointing.h"

namespace po = boost::program_options;

namespace mt {
namespace {

po::options_description convert_options() {
  po::options_description desc("options");
  desc.add_options()
      ("from", path_value(PathKind::ReadFileOrDir)->required(),
       "what to convert: a checkpoint (a --checkpoint-dir, meaning its latest, or a step_N directory) or an llm.c "
       "weights file")
      ("to", po::value<std::string>()->required(),
       "where: an llm.c weights file when it ends in .bin, else a checkpoint directory (step_N and `latest` are "
       "made inside it)")
      ("dtype", po::value<std::string>()->default_value("fp32"), "llm.c output: fp32 (version 3) or bf16 (version 5)")
      ("weights-only", po::bool_switch(),
       "checkpoint output: leave AdamW's moments out (a resume then starts the optimizer afresh)")
      ("dp", po::value<int>()->default_value(1), "checkpoint output: the layout to cut the shards for (data parallel)")
      ("tp", po::value<int>()->default_value(1), "checkpoint output: tensor-parallel ranks")
      ("pp", po::value<int>()->default_value(1), "checkpoint output: pipeline stages")
      ("mesh-order", po::value<std::string>()->default_value("tp-dp-pp"), "checkpoint output: rank order of the mesh")
      ("virtual-stages", po::value<int>()->default_value(1), "checkpoint output: chunks per pipeline stage")
      ("schedule", po::value<std::string>()->default_value(""),
       "checkpoint output: the pipeline schedule, which places the chunks (zb-v puts two per stage in a V); "
       "default 1f1b, or interleaved with --virtual-stages > 1")
      ("seq-len", po::value<int>()->default_value(0),
       "checkpoint output: the sequence length the stage balance assumes (0: the source checkpoint's, or 64)");
  return desc;
}

}  // namespace

int convert_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc = convert_options();
  auto parsed = parse_command_line("convert",
                                   "Converts offline, in one process: a checkpoint of any layout to llm.c weights, "
                                   "llm.c weights to a checkpoint, or a checkpoint to another layout's shards. Any "
                                   "layout can resume from any checkpoint; converting only places each rank's "
                                   "shards in its own file.",
                                   desc, args, mpi.world_rank());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  if (mpi.world_rank() != 0) return 0;  // one process does it all
  const std::filesystem::path from = vm["from"].as<std::string>(), to = vm["to"].as<std::string>();
  const std::string dtype = vm["dtype"].as<std::string>();
  if (dtype != "fp32" && dtype != "bf16") throw UsageError("unknown --dtype '" + dtype + "' (known: fp32, bf16)");
  if (!std::filesystem::exists(from)) throw UsageError("--from " + from.string() + " does not exist");
  const bool to_llmc = to.extension() == ".bin";
  check_path("to", to.string(), to_llmc ? PathKind::WriteFile : PathKind::WriteDir);  // a file or a directory by its name

  FullState state;
  ckpt::Manifest base;
  std::string source;
  if (std::filesystem::is_directory(from)) {
    const std::filesystem::path step_dir = ckpt::resolve_checkpoint(from.string(), "");
    state = read_full_state(step_dir, !to_llmc && !vm["weights-only"].as<bool>());
    base = ckpt::read_manifest(step_dir);
    source = "checkpoint " + step_dir.string() + " (step " + std::to_string(base.step) + ")";
  } else {
    const LlmcWeights w = read_llmc_weights(from);
    state.config = w.config;
    for (const std::vector<float>& values : w.values) state.params.insert(state.params.end(), values.begin(), values.end());
    base.step = 0;
    base.training = {{"optimizer_steps", 0}};
    base.data = {{"sequences_consumed", 0}};
    base.rng = {{"state", "converted from llm.c weights"}};
    source = "llm.c weights " + from.string();
  }

  if (to_llmc) {
    save_llmc_weights(state.config, state.params, to, dtype == "bf16" ? DType::BF16 : DType::F32);
    std::printf("converted %s to llm.c weights %s (%s)\n", source.c_str(), to.c_str(), dtype.c_str());
    return 0;
  }
  LayoutRequest request;
  request.dp = vm["dp"].as<int>();
  request.tp = vm["tp"].as<int>();
  request.pp = vm["pp"].as<int>();
  request.order = vm["mesh-order"].as<std::string>();
  request.virtual_stages = vm["virtual-stages"].as<int>();
  const std::string schedule = vm["schedule"].as<std::string>();
  if (!schedule.empty()) {
    request.schedule = parse_schedule_kind(schedule);
  } else if (request.virtual_stages > 1) {
    request.schedule = ScheduleKind::Interleaved;
  }
  int seq_len = vm["seq-len"].as<int>();
  if (seq_len == 0) {
    seq_len = base.training.contains("seq_len") ? required_json_int(base.training, "seq_len", source + ": training") : 64;
    if (seq_len < 1) throw UsageError(source + ": its training.seq_len is " + std::to_string(seq_len) + "; give --seq-len");
  }
  // Batches do not matter offline: any that the schedule takes.
  const LayoutPlan plan(request, layout_dims(state.config, seq_len), request.world_size(), request.dp * request.pp);
  const MeshShape& mesh = plan.mesh();
  const std::filesystem::path dir = write_checkpoint_for_layout(to, state, plan, base);
  std::printf("converted %s to checkpoint %s for dp %d x tp %d x pp %d%s\n", source.c_str(), dir.c_str(), mesh.dp,
              mesh.tp, mesh.pp, state.adam_m.empty() ? " (weights only)" : "");
  return 0;
}

}  // namespace mt
