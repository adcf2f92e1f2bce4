// The layouts `meshbench scaling` runs, as written on its command line: "DPxTPxPP" or
// "DPxTPxPPxV" (V model chunks per stage: interleaved 1F1B), comma-separated.
// defines: ScalingPoint, parse_scaling_layouts
#pragma once

#include <string>
#include <vector>

namespace mt {

struct ScalingPoint {
  int dp = 1, tp = 1, pp = 1, v = 1;
  int ranks() const { return dp * tp * pp; }
  std::string name() const;  // "2x1x2", or "1x1x2x2" with V > 1
};

// Throws UsageError naming the bad item: not 3 or 4 positive integers joined by 'x', V > 1
// without PP > 1, or an empty list.
std::vector<ScalingPoint> parse_scaling_layouts(const std::string& text);

}  // namespace mt
