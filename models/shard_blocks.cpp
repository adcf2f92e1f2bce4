#include "models/shard_blocks.h"

#include "models/gpt_sharding.h"
#include "runtime/error.h"

namespace mt {

std::vector<ShardBlock> make_shard_blocks(std::span<const ParamUnit> units, std::span<const std::int64_t> numels,
                                          std::span<const char> alone, int dp, std::span<const char> compute_only) {
  MT_REQUIRE(dp >= 1, "ZeRO units: the data-parallel size must be >= 1, got ", dp);
  MT_REQUIRE(alone.size() == numels.size(), "ZeRO units: ", alone.size(), " 'alone' flags for ", numels.size(),
             " parameters");
  MT_REQUIRE(compute_only.empty() || compute_only.size() == numels.size(), "ZeRO units: ", compute_only.size(),
             " 'compute only' flags for ", numels.size(), " parameters");
  const auto only = [&](std::size_t p) { return !compute_only.empty() && compute_only[p] != 0; };
  std::vector<ShardBlock> blocks;
  std::size_t next = 0;
  std::int64_t shard_offset = 0;
  const auto add = [&](int unit, std::size_t first, std::size_t count) {
    ShardBlock b;
    b.unit = unit;
    b.first = first;
    b.count = count;
    for (std::size_t p = first; p < first + count; ++p) b.numel += numels[p];
    b.padded = (b.numel + dp - 1) / dp * dp;
    b.shard_offset = shard_offset;
    b.compute_only = only(first);
    shard_offset += b.padded / dp;
    blocks.push_back(b);
  };
  for (std::size_t u = 0; u < units.size(); ++u) {
    const ParamUnit& unit = units[u];
    MT_REQUIRE(unit.count >= 1 && unit.first == next && unit.first + unit.count <= numels.size(), "ZeRO units: unit '",
               unit.name, "' [", unit.first, ", ", unit.first + unit.count, ") does not follow the previous one at ",
               next, " within ", numels.size(), " parameters");
    std::size_t run = unit.first;
    for (std::size_t p = unit.first; p < unit.first + unit.count; ++p) {
      if (alone[p]) {
        if (run < p) add(static_cast<int>(u), run, p - run);
        add(static_cast<int>(u), p, 1);
        run = p + 1;
      } else if (run < p && only(p) != only(run)) {
        add(static_cast<int>(u), run, p - run);  // homogeneous blocks: one kind of gather each
        run = p;
      }
    }
    if (run < unit.first + unit.count) add(static_cast<int>(u), run, unit.first + unit.count - run);
    next = unit.first + unit.count;
  }
  MT_REQUIRE(next == numels.size(), "ZeRO units cover ", next, " of ", numels.size(), " parameters");
  return blocks;
}

std::vector<ShardBlock> gpt_shard_blocks(const std::vector<ParamSpec>& specs, int dp, bool bf16_gathers) {
  std::vector<std::int64_t> numels;
  std::vector<char> alone, compute_only;
  for (const ParamSpec& spec : specs) {
    numels.push_back(spec.numel());
    alone.push_back(spec.kind == ParamKind::TokenEmbedding ? 1 : 0);
    if (bf16_gathers) compute_only.push_back(read_only_as_compute_copy(spec.kind) ? 1 : 0);
  }
  return make_shard_blocks(gpt_param_units(specs), numels, alone, dp, compute_only);
}

}  // namespace mt
