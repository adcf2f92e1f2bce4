// Stage partition: balance_stages against brute force over every split of small models, its tie
// rule, --pp-layers parsing and its messages, uniform chunks and first-layer offsets.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "parallel/stage_partition.h"  // defines: StageCosts, balance_stages, parse_stage_layers
#include "runtime/error.h"             // defines: Error

namespace mt {
namespace {

// Every way to cut `layers` into `stages` non-empty contiguous runs.
std::vector<std::vector<int>> all_splits(int layers, int stages) {
  std::vector<std::vector<int>> out;
  std::vector<int> split;
  std::function<void(int, int)> extend = [&](int left, int stages_left) {
    if (stages_left == 1) {
      split.push_back(left);
      out.push_back(split);
      split.pop_back();
      return;
    }
    for (int count = 1; count + stages_left - 1 <= left; ++count) {
      split.push_back(count);
      extend(left - count, stages_left - 1);
      split.pop_back();
    }
  };
  extend(layers, stages);
  return out;
}

double max_cost(const std::vector<int>& split, const StageCosts& costs) {
  double worst = 0;
  for (int s = 0; s < static_cast<int>(split.size()); ++s) worst = std::max(worst, stage_cost(split, s, costs));
  return worst;
}

double sum_of_squares(const std::vector<int>& split, const StageCosts& costs) {
  double sum = 0;
  for (int s = 0; s < static_cast<int>(split.size()); ++s) sum += stage_cost(split, s, costs) * stage_cost(split, s, costs);
  return sum;
}

// The documented rule, literally: smallest bottleneck, then least sum of squares, then the
// lexicographically largest split, comparing costs with the same tolerance as the library.
std::vector<int> brute_force(int layers, int stages, const StageCosts& costs) {
  const double scale = std::max({1.0, costs.layer * layers + costs.embedding + costs.head});
  const double tolerance = 1e-9 * scale;
  const auto splits = all_splits(layers, stages);
  double bottleneck = max_cost(splits[0], costs);
  for (const auto& split : splits) bottleneck = std::min(bottleneck, max_cost(split, costs));
  double squares = -1;
  for (const auto& split : splits) {
    if (max_cost(split, costs) > bottleneck + tolerance) continue;
    if (squares < 0 || sum_of_squares(split, costs) < squares) squares = sum_of_squares(split, costs);
  }
  std::vector<int> best;
  for (const auto& split : splits) {
    if (max_cost(split, costs) > bottleneck + tolerance) continue;
    if (sum_of_squares(split, costs) > squares + tolerance * scale) continue;
    best = std::max(best, split);
  }
  return best;
}

std::string message_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(StagePartition, MatchesBruteForceOnSmallModels) {
  const std::vector<StageCosts> mixes = {{1, 0, 0},   {1, 2, 0},      {1, 0, 2},     {1, 1.5, 3},
                                         {1, 0.5, 0.5}, {0.3, 0.1, 0.7}, {2, 5, 0},   {1, 0, 10},
                                         {1, 3, 3},   {0.1, 0.25, 0.35}};
  for (const StageCosts& costs : mixes) {
    for (int layers = 1; layers <= 12; ++layers) {
      for (int stages = 1; stages <= std::min(6, layers); ++stages) {
        SCOPED_TRACE("layers " + std::to_string(layers) + " stages " + std::to_string(stages) + " costs " +
                     std::to_string(costs.layer) + "/" + std::to_string(costs.embedding) + "/" +
                     std::to_string(costs.head));
        const std::vector<int> split = balance_stages(layers, stages, costs);
        ASSERT_EQ(static_cast<int>(split.size()), stages);
        int sum = 0;
        for (int count : split) {
          EXPECT_GE(count, 1);
          sum += count;
        }
        EXPECT_EQ(sum, layers);
        const std::vector<int> expected = brute_force(layers, stages, costs);
        EXPECT_NEAR(max_cost(split, costs), max_cost(expected, costs), 1e-12);  // optimal, whatever the ties
        EXPECT_EQ(split, expected);                                              // and the documented tie rule
      }
    }
  }
}

TEST(StagePartition, HeadWorthTwoLayersShortensTheLastStage) {
  EXPECT_EQ(balance_stages(6, 2, {1.0, 0.0, 2.0}), (std::vector<int>{4, 2}));
  EXPECT_EQ(balance_stages(6, 2, {1.0, 2.0, 0.0}), (std::vector<int>{2, 4}));
  // Embedding and head worth one layer each: 4 stages of cost 3 over 10 layers.
  EXPECT_EQ(balance_stages(10, 4, {1.0, 1.0, 1.0}), (std::vector<int>{2, 3, 3, 2}));
}

TEST(StagePartition, EqualCostsSplitEvenlyWithExtraLayersFirst) {
  EXPECT_EQ(balance_stages(8, 4, {}), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(balance_stages(7, 2, {}), (std::vector<int>{4, 3}));
  EXPECT_EQ(balance_stages(10, 4, {}), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(balance_stages(12, 5, {}), (std::vector<int>{3, 3, 2, 2, 2}));
  EXPECT_EQ(balance_stages(5, 5, {}), (std::vector<int>{1, 1, 1, 1, 1}));
}

TEST(StagePartition, ADominantHeadStillSplitsTheRestEvenly) {
  // The bottleneck is the head stage with one layer (11); every split with a last stage of one layer
  // reaches it, and the even rule spreads the rest {3,3,3} rather than e.g. {7,1,1}.
  EXPECT_EQ(balance_stages(10, 4, {1.0, 0.0, 10.0}), (std::vector<int>{3, 3, 3, 1}));
}

TEST(StagePartition, OneStageHoldsEverything) {
  const StageCosts costs{2.0, 3.0, 5.0};
  EXPECT_EQ(balance_stages(7, 1, costs), (std::vector<int>{7}));
  EXPECT_DOUBLE_EQ(stage_cost({7}, 0, costs), 3.0 + 14.0 + 5.0);
  EXPECT_DOUBLE_EQ(stage_cost({3, 2, 2}, 0, costs), 3.0 + 6.0);
  EXPECT_DOUBLE_EQ(stage_cost({3, 2, 2}, 1, costs), 4.0);
  EXPECT_DOUBLE_EQ(stage_cost({3, 2, 2}, 2, costs), 4.0 + 5.0);
}

TEST(StagePartition, RejectsImpossibleBalances) {
  EXPECT_EQ(message_of([] { balance_stages(3, 4, {}); }),
            "cannot split 3 layers over 4 pipeline stages (every stage needs at least one layer)");
  EXPECT_EQ(message_of([] { balance_stages(3, 0, {}); }), "a pipeline needs at least 1 stage, got 0");
  EXPECT_EQ(message_of([] { balance_stages(3, 1, {1.0, -1.0, 0.0}); }),
            "stage costs must not be negative (layer 1, embedding -1, head 0)");
}

// The whole numbers as written: their count, zeros and sum are the plan's to check, in its one
// wording (mesh_test: LayoutCheck.PpLayers*).
TEST(StagePartition, ParsesPpLayers) {
  EXPECT_EQ(parse_stage_layers("3,2,1"), (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(parse_stage_layers(" 4 , 2 "), (std::vector<int>{4, 2}));
  EXPECT_EQ(parse_stage_layers("6"), (std::vector<int>{6}));
  EXPECT_EQ(parse_stage_layers("3,0,-1"), (std::vector<int>{3, 0, -1}));
}

TEST(StagePartition, PpLayersErrorsSayWhatIsWrong) {
  const std::string not_number =
      "' is not a layer count (expected comma-separated whole numbers, e.g. 3,2,1)";
  EXPECT_EQ(message_of([] { parse_stage_layers("3,x,3"); }), "--pp-layers '3,x,3': 'x" + not_number);
  EXPECT_EQ(message_of([] { parse_stage_layers("3,,3"); }), "--pp-layers '3,,3': '" + not_number);
  EXPECT_EQ(message_of([] { parse_stage_layers("3,2.5,1"); }), "--pp-layers '3,2.5,1': '2.5" + not_number);
  EXPECT_EQ(message_of([] { parse_stage_layers(""); }), "--pp-layers '': '" + not_number);
  EXPECT_EQ(message_of([] { parse_stage_layers("3,3,"); }), "--pp-layers '3,3,': '" + not_number);
}

TEST(StagePartition, UniformChunksForInterleaving) {
  EXPECT_EQ(uniform_stage_layers(12, 4), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(uniform_stage_layers(5, 5), (std::vector<int>{1, 1, 1, 1, 1}));
  EXPECT_EQ(message_of([] { uniform_stage_layers(12, 5); }),
            "cannot split 12 layers evenly over 5 model chunks (the layers must be a positive multiple of the chunks)");
  EXPECT_EQ(message_of([] { uniform_stage_layers(2, 4); }),
            "cannot split 2 layers evenly over 4 model chunks (the layers must be a positive multiple of the chunks)");
}

TEST(StagePartition, FirstLayersArePrefixSums) {
  EXPECT_EQ(stage_first_layers({3, 2, 1}), (std::vector<int>{0, 3, 5}));
  EXPECT_EQ(stage_first_layers({4}), (std::vector<int>{0}));
  EXPECT_TRUE(stage_first_layers({}).empty());
}

}  // namespace
}  // namespace mt
