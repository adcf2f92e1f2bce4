#include "zero/zero_engine.h"

#include "zero/flat_zero_engine.h"
#include "zero/unit_zero_engine.h"

namespace mt {

std::optional<UnitCut> zero_unit_cut(int stage, const std::vector<ParamSpec>& specs, int dp, DType compute) {
  if (stage < 2) return std::nullopt;
  return gpt_unit_cut(specs, dp, zero_gathers_compute_copy(stage, compute == DType::BF16));
}

std::vector<int> zero_flat_regions(int stage, const std::vector<ParamSpec>& specs, int dp, DType compute) {
  if (stage != 1 || dp == 1 || !zero_gathers_compute_copy(stage, compute == DType::BF16)) return {};
  std::vector<int> regions;
  for (const ParamSpec& spec : specs) regions.push_back(read_only_as_compute_copy(spec.kind) ? 1 : 0);
  return regions;
}

std::unique_ptr<ZeroEngine> make_zero_engine(DeviceContext& ctx, Communicator& dp, Communicator* tied_stages,
                                             Gpt& model, std::optional<UnitCut> cut, const ZeroOptions& options) {
  MT_CHECK(options.stage >= 0 && options.stage <= 3, "ZeRO stage ", options.stage, " is not 0 to 3");
  MT_CHECK(cut.has_value() == (options.stage >= 2), "ZeRO-", options.stage, ": the model's store was built ",
           cut ? "in unit blocks" : "flat", " (zero_unit_cut gives the cut)");
  const ParameterStore& store = model.parameters();
  // What each parameter counts for in the global norm: a replica counts on one rank only. The tied
  // embedding (gpt2) is reduced at the step's end; an untied one (llama) as any parameter.
  std::vector<FlatParam> params;
  std::int64_t tied = -1;
  int tied_pieces = 0;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const ParamShard& shard = model.shards()[i];
    if (shard.full.kind == ParamKind::TokenEmbedding && model.config().tied_head()) {
      if (tied < 0) tied = static_cast<std::int64_t>(i);  // the first of its vocabulary pieces
      ++tied_pieces;
    }
    const double weight = is_primary_copy(shard, model.partition()) ? 1.0 : 0.0;
    params.push_back({shard.local.name, store.offset(i), shard.local.numel(), shard.local.decay, weight,
                      read_only_as_compute_copy(shard.local.kind)});
  }
  if (options.stage < 2)
    return std::make_unique<FlatZeroEngine>(ctx, dp, tied_stages, model, std::move(params), tied, options);
  return std::make_unique<UnitZeroEngine>(ctx, dp, tied_stages, model, std::move(*cut), params, tied, tied_pieces,
                                          options);
}

}  // namespace mt
