#include "bench/scaling_layouts.h"

#include <gtest/gtest.h>

#include "runtime/error.h"  // defines: UsageError

namespace mt {
namespace {

TEST(ScalingLayouts, ParsesThreeAndFourFields) {
  const auto points = parse_scaling_layouts("1x1x1,2x2x1,1x1x2x2");
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0].ranks(), 1);
  EXPECT_EQ(points[1].dp, 2);
  EXPECT_EQ(points[1].tp, 2);
  EXPECT_EQ(points[1].ranks(), 4);
  EXPECT_EQ(points[2].pp, 2);
  EXPECT_EQ(points[2].v, 2);
  EXPECT_EQ(points[2].name(), "1x1x2x2");
  EXPECT_EQ(points[1].name(), "2x2x1");
}

TEST(ScalingLayouts, RejectsMalformedItems) {
  for (const char* bad : {"", "2x2", "2x2x2x2x2", "0x1x1", "ax1x1", "2x1x1,", "2x1x1x", "1x1x1x2", "2x-1x1", "2 x1x1"}) {
    EXPECT_THROW(parse_scaling_layouts(bad), UsageError) << bad;
  }
}

}  // namespace
}  // namespace mt
