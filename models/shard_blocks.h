// ZeRO-2/3's cut of a stage's parameters into shard blocks, as pure arithmetic: zero/unit_shards.h
// shards them, the performance model (perf/model_shape.h) counts their bytes and collectives from
// the same cut. Each parameter unit (models/param_use.h) is cut into blocks: runs of its
// parameters, but a parameter marked `alone` gets a block of its own (the tied token embedding, so
// that the first and the last pipeline stage cut their two copies identically), and the parameters
// marked `compute_only` (read only through the compute copy: the GEMM weights) never share a block
// with the others; each block is padded to a multiple of dp.
// defines: ShardBlock, make_shard_blocks, gpt_shard_blocks
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "models/gpt_parameters.h"  // defines: ParamSpec
#include "models/param_use.h"       // defines: ParamUnit

namespace mt {

struct ShardBlock {
  int unit = 0;
  std::size_t first = 0, count = 0;  // store parameters [first, first + count)
  std::int64_t numel = 0;            // their elements, contiguous in the store's order
  std::int64_t padded = 0;           // numel rounded up to a multiple of dp
  std::int64_t shard_offset = 0;     // this block's piece in the owned buffers (padded/dp elements)
  bool compute_only = false;         // its parameters are read only through the compute copy
};

// Blocks of `units` (in order) over parameters of `numels` elements; `alone[p]` gives parameter p a
// block of its own; `compute_only[p]` (empty: none) marks the parameters read only through the
// compute copy (read_only_as_compute_copy), and a block never mixes marked and unmarked ones. Error
// for dp < 1 or units that do not tile the parameters.
std::vector<ShardBlock> make_shard_blocks(std::span<const ParamUnit> units, std::span<const std::int64_t> numels,
                                          std::span<const char> alone, int dp,
                                          std::span<const char> compute_only = {});

// A Gpt stage's blocks (specs: its store's, from gpt_param_shards) over its units (gpt_param_units):
// the token embedding alone and, with `bf16_gathers` (zero_gathers_compute_copy), the GEMM weights
// apart from the parameters read in fp32. Without it a unit stays one block but for the embedding
// (one collective per unit and use, not one per run of like parameters).
std::vector<ShardBlock> gpt_shard_blocks(const std::vector<ParamSpec>& specs, int dp, bool bf16_gathers);

}  // namespace mt
