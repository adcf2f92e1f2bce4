// Plain-text tables: columns padded to the widest cell plus two spaces, a dashed rule under the
// header, no padding after the last column, short rows filled with blanks.
#include <gtest/gtest.h>

#include <string>

#include "launch/table.h"  // defines: TextTable

namespace mt {
namespace {

TEST(TextTable, AlignsColumnsToTheWidestCell) {
  TextTable t({"rank", "device", "memory"});
  t.add_row({"0", "cuda:0", "80.0 GiB"});
  t.add_row({"12", "cpu", "1.0 MiB"});
  EXPECT_EQ(t.render(),
            "rank  device  memory\n"
            "----  ------  --------\n"
            "0     cuda:0  80.0 GiB\n"
            "12    cpu     1.0 MiB\n");
}

TEST(TextTable, HeaderOnly) {
  TextTable t({"a", "bbb"});
  EXPECT_EQ(t.render(),
            "a  bbb\n"
            "-  ---\n");
}

TEST(TextTable, ShortRowsAreFilledWithBlanks) {
  TextTable t({"a", "bb", "ccc"});
  t.add_row({"xxxx"});
  t.add_row({"y", "zz", "w"});
  t.add_row({});
  // Missing cells are blanks padded like any other, so later columns stay aligned.
  EXPECT_EQ(t.render(),
            "a     bb  ccc\n"
            "----  --  ---\n"
            "xxxx      \n"
            "y     zz  w\n"
            "          \n");
}

TEST(TextTable, SingleColumnHasNoPadding) {
  TextTable t({"host"});
  t.add_row({"node-long-name"});
  t.add_row({"n1"});
  EXPECT_EQ(t.render(),
            "host\n"
            "--------------\n"
            "node-long-name\n"
            "n1\n");
}

}  // namespace
}  // namespace mt
