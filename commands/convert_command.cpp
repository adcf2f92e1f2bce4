#include "commands/convert_command.h"

#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"
#include "models/gpt_weights.h"
#include "models/hf/hf_model.h"
#include "runtime/device.h"  // defines: parse_bytes
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
       "what to convert: a checkpoint (a --checkpoint-dir, meaning its latest, or a step_N directory), an llm.c "
       "weights file, or a Hugging Face folder (config.json with model.safetensors, or shards and "
       "model.safetensors.index.json) of a GPT-2 (names with or without `transformer.`, lm_head.weight absent or "
       "tied) or a Llama (LlamaForCausalLM's names, untied lm_head), picked by config.json's model_type")
      ("to", po::value<std::string>()->required(),
       "where: an llm.c weights file when it ends in .bin, a safetensors folder with --to-format safetensors, "
       "else a checkpoint directory (step_N and `latest` are made inside it)")
      ("to-format", po::value<std::string>()->default_value(""),
       "llmc, checkpoint or safetensors (default: llmc for a --to ending in .bin, else checkpoint). llmc is GPT-2 "
       "only. safetensors writes config.json and the weights in Hugging Face's names, the vocabulary unpadded: a "
       "GPT-2 as GPT2LMHeadModel.save_pretrained (transposed Conv1D weights, no lm_head: tied), a llama as "
       "LlamaForCausalLM's (k_proj and v_proj, gate_proj and up_proj apart); it holds the model twice in memory "
       "while writing")
      ("dtype", po::value<std::string>()->default_value("fp32"),
       "stored precision: fp32 or bf16 (llm.c: version 3 or 5); safetensors also takes fp16")
      ("shard-size", po::value<std::string>()->default_value("5G"),
       "safetensors output: at most this many bytes per file (K, M, G suffixes); past it the weights are cut into "
       "model-0000N-of-0000M.safetensors files with model.safetensors.index.json; 0: always one file")
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
                                   "Converts offline, in one process: a checkpoint of any layout, llm.c weights or a "
                                   "Hugging Face safetensors folder (GPT-2 or Llama) to any of the three, or a checkpoint to "
                                   "another layout's shards. Any "
                                   "layout can resume from any checkpoint; converting only places each rank's "
                                   "shards in its own file.",
                                   desc, args, mpi.world_rank());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  if (mpi.world_rank() != 0) return 0;  // one process does it all
  const std::filesystem::path from = vm["from"].as<std::string>(), to = vm["to"].as<std::string>();
  const std::string dtype = vm["dtype"].as<std::string>();
  std::string format = vm["to-format"].as<std::string>();
  if (format.empty()) format = to.extension() == ".bin" ? "llmc" : "checkpoint";
  if (format != "llmc" && format != "checkpoint" && format != "safetensors")
    throw UsageError("unknown --to-format '" + format + "' (known: llmc, checkpoint, safetensors)");
  const bool to_llmc = format == "llmc", to_safetensors = format == "safetensors";
  if (dtype != "fp32" && dtype != "bf16" && !(to_safetensors && dtype == "fp16"))
    throw UsageError("unknown --dtype '" + dtype + "' (known: fp32, bf16" + (to_safetensors ? ", fp16)" : "; fp16 for safetensors)"));
  const std::int64_t shard_bytes = static_cast<std::int64_t>(parse_bytes(vm["shard-size"].as<std::string>()));
  if (!std::filesystem::exists(from)) throw UsageError("--from " + from.string() + " does not exist");
  check_path("to", to.string(), to_llmc ? PathKind::WriteFile : PathKind::WriteDir);  // a file or a directory by its name

  FullState state;
  ckpt::Manifest base;
  std::string source;
  const auto refuse_llama_to_llmc = [&](const GptConfig& config, const std::string& what) {
    if (to_llmc && config.is_llama())
      throw UsageError("--to-format llmc: llm.c's weights file holds a GPT-2 only, and " + what +
                       " is a llama (convert it to a checkpoint or safetensors)");
  };
  if (is_hf_folder(from)) {
    refuse_llama_to_llmc(read_hf_config(from), "safetensors folder " + from.string());  // before reading the weights
    state.config = read_hf_safetensors(from, std::nullopt, [&](const ParamSpec&, std::span<const float> values) {
      state.params.insert(state.params.end(), values.begin(), values.end());  // visited in spec order
    });
    base.step = 0;
    base.training = {{"optimizer_steps", 0}};
    base.data = {{"sequences_consumed", 0}};
    base.rng = {{"state", "converted from safetensors"}};
    source = "safetensors folder " + from.string();
  } else if (std::filesystem::is_directory(from)) {
    const std::filesystem::path step_dir = ckpt::resolve_checkpoint(from.string(), "", "--from");
    state = read_full_state(step_dir, !to_llmc && !to_safetensors && !vm["weights-only"].as<bool>());
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

  refuse_llama_to_llmc(state.config, source);
  if (to_llmc) {
    save_llmc_weights(state.config, state.params, to, dtype == "bf16" ? DType::BF16 : DType::F32);
    std::printf("converted %s to llm.c weights %s (%s)\n", source.c_str(), to.c_str(), dtype.c_str());
    return 0;
  }
  if (to_safetensors) {
    const StDtype stored = dtype == "fp32" ? StDtype::F32 : dtype == "bf16" ? StDtype::BF16 : StDtype::F16;
    const std::vector<ParamSpec> specs = gpt_parameter_specs(state.config);
    const std::vector<std::int64_t> offsets = spec_offsets(specs);
    write_hf_safetensors(
        to, state.config,
        [&](const ParamSpec& spec) {
          const std::size_t i = spec_index(specs, spec.name);
          return std::span<const float>(state.params).subspan(static_cast<std::size_t>(offsets[i]),
                                                              static_cast<std::size_t>(spec.numel()));
        },
        stored, shard_bytes);
    std::printf("converted %s to safetensors folder %s (%s, Hugging Face %s names)\n", source.c_str(), to.c_str(),
                dtype.c_str(), hf_family(state.config.family).model);
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
