// Which transformer layers each pipeline stage (or model chunk) holds: balanced by cost, given by the
// user (--pp-layers), or uniform for interleaving. Pure arithmetic.
// defines: StageCosts, balance_stages, parse_stage_layers, uniform_stage_layers, stage_cost, stage_first_layers
#pragma once

#include <string_view>
#include <vector>

namespace mt {

// Costs (any unit, e.g. FLOPs or measured ms) of one transformer layer, of the embedding (on the
// first stage) and of the final layernorm + LM head + loss (on the last stage).
struct StageCosts {
  double layer = 1.0;
  double embedding = 0.0;
  double head = 0.0;
};

// Contiguous layers per stage (size = stages, each >= 1, sum = layers) with the smallest largest
// stage cost. Ties, deterministically: among those, the most even split (least sum of squared
// stage costs); among those, the one giving more layers to earlier stages (lexicographically
// largest), so equal costs give e.g. 10 layers over 4 stages as {3,3,2,2}. Costs compare with a
// relative tolerance of 1e-9.
std::vector<int> balance_stages(int layers, int stages, const StageCosts& costs);

// "3,2,1" (--pp-layers): the whole numbers as written. LayoutPlan checks them against the pipeline
// and the model (parallel/layout_check.h).
std::vector<int> parse_stage_layers(std::string_view text);

// layers / chunks each, for the interleaved schedule's model chunks (the division must be exact).
std::vector<int> uniform_stage_layers(int layers, int chunks);

// Cost of one stage: its layers, plus the embedding on the first stage and the head on the last
// (a single stage carries both).
double stage_cost(const std::vector<int>& layers_per_stage, int stage, const StageCosts& costs);

// The index of the first layer of each stage (or chunk): prefix sums, {3,2,1} -> {0,3,5}.
std::vector<int> stage_first_layers(const std::vector<int>& layers_per_stage);

}  // namespace mt
