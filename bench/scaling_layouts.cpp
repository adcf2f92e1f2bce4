#include "bench/scaling_layouts.h"

#include <optional>
#include <sstream>

#include "runtime/error.h"  // defines: UsageError
#include "launch/command_line.h"

namespace mt {

std::string ScalingPoint::name() const {
  std::string n = std::to_string(dp) + "x" + std::to_string(tp) + "x" + std::to_string(pp);
  return v > 1 ? n + "x" + std::to_string(v) : n;
}

std::vector<ScalingPoint> parse_scaling_layouts(const std::string& text) {
  if (!text.empty() && text.back() == ',') throw UsageError("--layouts '" + text + "' ends with a comma");
  std::vector<ScalingPoint> points;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    std::vector<int> numbers;
    std::stringstream parts(item);
    bool ok = !item.empty();
    for (std::string part; ok && std::getline(parts, part, 'x');) {
      const std::optional<int> value = parse_whole_number(part);
      ok = value && *value >= 1;
      numbers.push_back(value.value_or(0));
    }
    if (!ok || item.back() == 'x' || (numbers.size() != 3 && numbers.size() != 4))
      throw UsageError("--layouts: '" + item + "' is not DPxTPxPP or DPxTPxPPxV with positive integers");
    ScalingPoint p{numbers[0], numbers[1], numbers[2], numbers.size() == 4 ? numbers[3] : 1};
    if (p.v > 1 && p.pp < 2) throw UsageError("--layouts: '" + item + "' interleaves (V > 1) without pipeline stages");
    points.push_back(p);
  }
  if (points.empty()) throw UsageError("--layouts is empty");
  return points;
}

}  // namespace mt
