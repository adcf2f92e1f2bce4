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
      ("cp", po::value<int>()->default_value(1),
       "checkpoint output: context-parallel ranks per sequence (as `train --cp`: they hold the same weights, so "
       "the shards are cut over dp x cp; --seq-len must be a multiple of 2 x cp)")
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

// Where and how to write: --to, its format, the stored precision and the safetensors shard size.
struct ConvertTarget {
  std::filesystem::path to;
  std::string format, dtype;
  std::int64_t shard_bytes = 0;
  bool llmc() const { return format == "llmc"; }
  bool safetensors() const { return format == "safetensors"; }
};

ConvertTarget read_target(const po::variables_map& vm) {
  ConvertTarget t;
  t.to = vm["to"].as<std::string>();
  t.dtype = vm["dtype"].as<std::string>();
  t.format = vm["to-format"].as<std::string>();
  if (t.format.empty()) t.format = t.to.extension() == ".bin" ? "llmc" : "checkpoint";
  if (t.format != "llmc" && t.format != "checkpoint" && t.format != "safetensors")
    throw UsageError("unknown --to-format '" + t.format + "' (known: llmc, checkpoint, safetensors)");
  if (t.dtype != "fp32" && t.dtype != "bf16" && !(t.safetensors() && t.dtype == "fp16"))
    throw UsageError("unknown --dtype '" + t.dtype + "' (known: fp32, bf16" +
                     (t.safetensors() ? ", fp16)" : "; fp16 for safetensors)"));
  t.shard_bytes = static_cast<std::int64_t>(parse_bytes(vm["shard-size"].as<std::string>()));
  return t;
}

// What was read: the full state, the manifest sections a checkpoint output starts from, and a name
// for messages ("checkpoint DIR (step N)").
struct ConvertSource {
  FullState state;
  ckpt::Manifest base;
  std::string what;
};

// The manifest of a source that is not a checkpoint: step 0, nothing consumed.
ckpt::Manifest fresh_manifest(const std::string& origin) {
  ckpt::Manifest base;
  base.step = 0;
  base.training = {{"optimizer_steps", 0}};
  base.data = {{"sequences_consumed", 0}};
  base.rng = {{"state", "converted from " + origin}};
  return base;
}

ConvertSource read_source(const std::filesystem::path& from, const ConvertTarget& target, bool weights_only) {
  const auto refuse_llama_to_llmc = [&](const GptConfig& config, const std::string& what) {
    if (target.llmc() && config.is_llama())
      throw UsageError("--to-format llmc: llm.c's weights file holds a GPT-2 only, and " + what +
                       " is a llama (convert it to a checkpoint or safetensors)");
  };
  ConvertSource src;
  if (is_hf_folder(from)) {
    src.what = "safetensors folder " + from.string();
    refuse_llama_to_llmc(read_hf_config(from), src.what);  // before reading the weights
    src.state.config = read_hf_safetensors(from, std::nullopt, [&](const ParamSpec&, std::span<const float> values) {
      src.state.params.insert(src.state.params.end(), values.begin(), values.end());  // visited in spec order
    });
    src.base = fresh_manifest("safetensors");
  } else if (std::filesystem::is_directory(from)) {
    const std::filesystem::path step_dir = ckpt::resolve_checkpoint(from.string(), "", "--from");
    src.state = read_full_state(step_dir, target.format == "checkpoint" && !weights_only);
    src.base = ckpt::read_manifest(step_dir);
    src.what = "checkpoint " + step_dir.string() + " (step " + std::to_string(src.base.step) + ")";
  } else {
    const LlmcWeights w = read_llmc_weights(from);
    src.state.config = w.config;
    for (const std::vector<float>& values : w.values)
      src.state.params.insert(src.state.params.end(), values.begin(), values.end());
    src.base = fresh_manifest("llm.c weights");
    src.what = "llm.c weights " + from.string();
  }
  refuse_llama_to_llmc(src.state.config, src.what);
  return src;
}

void write_safetensors_target(const ConvertSource& src, const ConvertTarget& target) {
  const StDtype stored = target.dtype == "fp32" ? StDtype::F32 : target.dtype == "bf16" ? StDtype::BF16 : StDtype::F16;
  const std::vector<ParamSpec> specs = gpt_parameter_specs(src.state.config);
  const std::vector<std::int64_t> offsets = spec_offsets(specs);
  write_hf_safetensors(
      target.to, src.state.config,
      [&](const ParamSpec& spec) {
        const std::size_t i = spec_index(specs, spec.name);
        return std::span<const float>(src.state.params)
            .subspan(static_cast<std::size_t>(offsets[i]), static_cast<std::size_t>(spec.numel()));
      },
      stored, target.shard_bytes);
  std::printf("converted %s to safetensors folder %s (%s, Hugging Face %s names)\n", src.what.c_str(),
              target.to.c_str(), target.dtype.c_str(), hf_family(src.state.config.family).model);
}

void write_checkpoint_target(const ConvertSource& src, const ConvertTarget& target, const po::variables_map& vm) {
  LayoutRequest request;
  request.dp = vm["dp"].as<int>();
  request.tp = vm["tp"].as<int>();
  request.cp = vm["cp"].as<int>();
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
    seq_len = src.base.training.contains("seq_len")
                  ? required_json_int(src.base.training, "seq_len", src.what + ": training")
                  : 64;
    if (seq_len < 1)
      throw UsageError(src.what + ": its training.seq_len is " + std::to_string(seq_len) + "; give --seq-len");
  }
  // Batches do not matter offline: any that the schedule takes.
  const LayoutPlan plan(request, layout_dims(src.state.config, seq_len), request.world_size(), request.dp * request.pp);
  const MeshShape& mesh = plan.mesh();
  // Context parallelism cuts each sequence into 2 x cp chunks (parallel/causal_split.h), as train checks it.
  if (seq_len % (2 * mesh.cp) != 0)
    throw UsageError("--cp " + std::to_string(mesh.cp) + " cuts each sequence into " + std::to_string(2 * mesh.cp) +
                     " chunks: --seq-len " + std::to_string(seq_len) + " must be a multiple of " +
                     std::to_string(2 * mesh.cp));
  const std::filesystem::path dir = write_checkpoint_for_layout(target.to, src.state, plan, src.base);
  std::printf("converted %s to checkpoint %s for dp %d x tp %d%s x pp %d%s\n", src.what.c_str(), dir.c_str(), mesh.dp,
              mesh.tp, mesh.cp > 1 ? (" x cp " + std::to_string(mesh.cp)).c_str() : "", mesh.pp,
              src.state.adam_m.empty() ? " (weights only)" : "");
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
  const std::filesystem::path from = vm["from"].as<std::string>();
  const ConvertTarget target = read_target(vm);
  if (!std::filesystem::exists(from)) throw UsageError("--from " + from.string() + " does not exist");
  // A file or a directory by its name.
  check_path("to", target.to.string(), target.llmc() ? PathKind::WriteFile : PathKind::WriteDir);

  const ConvertSource src = read_source(from, target, vm["weights-only"].as<bool>());
  if (target.llmc()) {
    save_llmc_weights(src.state.config, src.state.params, target.to, target.dtype == "bf16" ? DType::BF16 : DType::F32);
    std::printf("converted %s to llm.c weights %s (%s)\n", src.what.c_str(), target.to.c_str(), target.dtype.c_str());
  } else if (target.safetensors()) {
    write_safetensors_target(src, target);
  } else {
    write_checkpoint_target(src, target, vm);
  }
  return 0;
}

}  // namespace mt
