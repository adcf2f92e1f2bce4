#include "train/checkpoint_convert.h"

#include <span>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/dir_lock.h"
#include "checkpoint/tensor_io.h"
#include "runtime/error.h"
#include "train/checkpointing.h"

namespace mt {

FullState read_full_state(const std::filesystem::path& step_dir, bool with_optimizer) {
  ckpt::CheckpointReader reader(step_dir);
  FullState state;
  state.config = gpt_config_from_json(reader.manifest().model, "checkpoint " + step_dir.string() + " (model)");
  const std::vector<ParamSpec> specs = gpt_parameter_specs(state.config);
  with_optimizer = with_optimizer && reader.has_tensor(adam_m_tensor(specs.front().name));
  for (const ParamSpec& spec : specs) {
    const auto append = [&](const std::string& tensor, std::vector<float>& out) {
      const std::vector<float> values = reader.read_whole(tensor);
      MT_REQUIRE(reader.shape(tensor) == spec.shape, "checkpoint ", step_dir.string(), ": tensor ", tensor,
                 " has another shape than the model's");
      out.insert(out.end(), values.begin(), values.end());
    };
    append(param_tensor(spec.name), state.params);
    if (with_optimizer) {
      append(adam_m_tensor(spec.name), state.adam_m);
      append(adam_v_tensor(spec.name), state.adam_v);
    }
  }
  return state;
}

std::filesystem::path write_checkpoint_for_layout(const std::filesystem::path& root, const FullState& state,
                                                  const LayoutPlan& plan, ckpt::Manifest base) {
  const GptConfig& config = state.config;
  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  const std::vector<std::int64_t> offsets = spec_offsets(specs);
  MT_CHECK(static_cast<std::int64_t>(state.params.size()) == offsets.back(), "parameters of another model");
  const bool moments = !state.adam_m.empty();
  const MeshShape& mesh = plan.mesh();
  const Mesh layout(mesh);
  base.model = gpt_config_json(config);
  base.layout = layout_json(plan);
  base.tensors.clear();
  base.files.clear();
  base.pieces.clear();

  // The directory's lock while writing, as a training job holds it: no job saves into it or prunes
  // it meanwhile, and a running job's directory is refused, naming the holder.
  const ckpt::CheckpointDirLock lock(root);
  ckpt::prepare_partial(root, base.step);
  const std::filesystem::path partial = ckpt::partial_dir(root, base.step);
  for (int rank = 0; rank < mesh.world_size(); ++rank) {
    ckpt::RankWriter writer(partial, rank, base.step);
    const MeshCoord coord = layout.coord_of(rank);
    // One copy of each shard: rank 0 of the data- and context-parallel ranks (they hold the same weights).
    if (coord.dp == 0 && coord.cp == 0) {
      const GptPartition partition = plan.partition(coord);
      for (const ParamShard& shard : gpt_param_shards(config, partition)) {
        if (!is_primary_copy(shard, partition)) continue;
        const std::size_t f = spec_index(specs, shard.full.name);
        const ckpt::Slice slice = shard_slice(shard, 0, shard.local.numel());
        const auto add = [&](const std::string& tensor, const std::vector<float>& full) {
          std::vector<float> local(static_cast<std::size_t>(shard.local.numel()));
          for (const ckpt::Run& run : ckpt::slice_runs(shard.full.shape, slice))
            std::copy_n(full.begin() + offsets[f] + run.global, run.count, local.begin() + run.local);
          writer.add(tensor, shard.full.shape, slice, local);
        };
        add(param_tensor(shard.full.name), state.params);
        if (moments) {
          add(adam_m_tensor(shard.full.name), state.adam_m);
          add(adam_v_tensor(shard.full.name), state.adam_v);
        }
      }
    }
    writer.finish();
  }
  const ckpt::Manifest manifest = ckpt::assemble_manifest(partial, mesh.world_size(), base);
  const std::filesystem::path dir = ckpt::commit_checkpoint(root, manifest);
  ckpt::set_latest(root, base.step);
  return dir;
}

}  // namespace mt
