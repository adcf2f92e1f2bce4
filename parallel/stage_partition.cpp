// Balancing is a small dynamic programme over (stage, first layer): layers and stages are at most a
// few hundred, so O(stages * layers^2) is instant and exact, unlike bisection on the bottleneck.
#include "parallel/stage_partition.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/error.h"

namespace mt {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Cost of stage `stage` of `stages` holding `count` layers.
double cost_of(int stage, int stages, int count, const StageCosts& costs) {
  double cost = count * costs.layer;
  if (stage == 0) cost += costs.embedding;
  if (stage == stages - 1) cost += costs.head;
  return cost;
}

bool at_most(double a, double b, double tolerance) { return a <= b + tolerance; }

// table[stage][first]: the best value for stages stage.. holding layers first..layers-1, where a
// stage's contribution is combined by `combine` (max for the bottleneck, + for squares). Stages
// whose cost exceeds `limit` are not allowed.
template <class Value, class Combine>
std::vector<std::vector<double>> suffix_table(int layers, int stages, const StageCosts& costs, double limit,
                                              double tolerance, Value value, Combine combine) {
  std::vector<std::vector<double>> table(stages + 1, std::vector<double>(layers + 1, kInfinity));
  table[stages][layers] = 0;
  for (int stage = stages - 1; stage >= 0; --stage) {
    const int later = stages - stage - 1;  // each later stage needs a layer
    for (int first = stage; first + later < layers; ++first) {
      for (int count = 1; first + count + later <= layers; ++count) {
        const double cost = cost_of(stage, stages, count, costs);
        const double rest = table[stage + 1][first + count];
        if (!at_most(cost, limit, tolerance) || rest == kInfinity) continue;
        table[stage][first] = std::min(table[stage][first], combine(value(cost), rest));
      }
    }
  }
  return table;
}

}  // namespace

double stage_cost(const std::vector<int>& layers_per_stage, int stage, const StageCosts& costs) {
  const int stages = static_cast<int>(layers_per_stage.size());
  MT_CHECK(stage >= 0 && stage < stages, "stage ", stage, " of ", stages);
  return cost_of(stage, stages, layers_per_stage[stage], costs);
}

std::vector<int> balance_stages(int layers, int stages, const StageCosts& costs) {
  MT_REQUIRE(stages >= 1, "a pipeline needs at least 1 stage, got ", stages);
  MT_REQUIRE(layers >= stages, "cannot split ", layers, " layers over ", stages,
             " pipeline stages (every stage needs at least one layer)");
  MT_REQUIRE(costs.layer >= 0 && costs.embedding >= 0 && costs.head >= 0,
             "stage costs must not be negative (layer ", costs.layer, ", embedding ", costs.embedding, ", head ",
             costs.head, ")");
  const double scale = std::max({1.0, costs.layer * layers + costs.embedding + costs.head});
  const double tolerance = 1e-9 * scale;
  const auto identity = [](double c) { return c; };
  const auto square = [](double c) { return c * c; };
  const auto maximum = [](double a, double b) { return std::max(a, b); };
  const auto plus = [](double a, double b) { return a + b; };

  const double bottleneck = suffix_table(layers, stages, costs, kInfinity, tolerance, identity, maximum)[0][0];
  const auto squares = suffix_table(layers, stages, costs, bottleneck, tolerance, square, plus);
  const double square_tolerance = tolerance * scale;

  // Walk forward, each stage taking the most layers that still reach the best even split.
  std::vector<int> split;
  int first = 0;
  for (int stage = 0; stage < stages; ++stage) {
    const int later = stages - stage - 1;
    for (int count = layers - first - later; count >= 1; --count) {
      const double cost = cost_of(stage, stages, count, costs);
      const double rest = squares[stage + 1][first + count];
      if (at_most(cost, bottleneck, tolerance) && rest != kInfinity &&
          at_most(cost * cost + rest, squares[stage][first], square_tolerance)) {
        split.push_back(count);
        first += count;
        break;
      }
    }
    MT_CHECK(static_cast<int>(split.size()) == stage + 1, "no layer count fits stage ", stage);
  }
  return split;
}

std::vector<int> parse_stage_layers(std::string_view text) {
  std::vector<int> split;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    std::string_view item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int value = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    MT_REQUIRE(!item.empty() && error == std::errc() && end == item.data() + item.size(), "--pp-layers '", text,
               "': '", item, "' is not a layer count (expected comma-separated whole numbers, e.g. 3,2,1)");
    split.push_back(value);
    if (comma == text.size()) break;
    start = comma + 1;
  }
  return split;
}

std::vector<int> uniform_stage_layers(int layers, int chunks) {
  MT_REQUIRE(chunks >= 1, "need at least 1 model chunk, got ", chunks);
  MT_REQUIRE(layers >= chunks && layers % chunks == 0, "cannot split ", layers, " layers evenly over ", chunks,
             " model chunks (the layers must be a positive multiple of the chunks)");
  return std::vector<int>(chunks, layers / chunks);
}

std::vector<int> stage_first_layers(const std::vector<int>& layers_per_stage) {
  std::vector<int> firsts;
  int first = 0;
  for (int count : layers_per_stage) {
    firsts.push_back(first);
    first += count;
  }
  return firsts;
}

}  // namespace mt
