// Slices: runs of boxes, column boxes, ZeRO ranges and scalars; plan_transfers over the layouts a
// checkpoint meets (qkv boxes, column splits, ZeRO ranges, replicas), its error for a missing
// element, and a randomized check against an element-by-element reference.
#include "checkpoint/slices.h"  // defines: Shape, Box, Slice, Run, Transfer, slice_runs, plan_transfers

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt::ckpt {

// How gtest prints runs and transfers in failures (found by argument-dependent lookup).
inline void PrintTo(const Run& r, std::ostream* out) {
  *out << "{global " << r.global << ", local " << r.local << ", count " << r.count << "}";
}
inline void PrintTo(const Transfer& t, std::ostream* out) {
  *out << "{source " << t.source << ", from " << t.from << ", to " << t.to << ", count " << t.count << "}";
}

namespace {

using testing::contains;
using testing::error_of;
using Runs = std::vector<ckpt::Run>;  // in a test body, plain Run names gtest's Test::Run

// The global flat indices of the slice's elements in local order, one element at a time.
std::vector<std::int64_t> naive_globals(const Shape& shape, const Slice& slice) {
  std::vector<std::int64_t> all;
  for (const Box& box : slice.boxes) {
    Shape index(shape.size(), 0);
    for (std::int64_t i = 0; i < box.numel(); ++i) {
      std::int64_t flat = 0, rest = i;
      for (std::size_t d = shape.size(); d-- > 0;) {
        index[d] = box.offset[d] + rest % box.shape[d];
        rest /= box.shape[d];
      }
      for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
      all.push_back(flat);
    }
  }
  return {all.begin() + slice.begin, all.begin() + slice.end};
}

// "[3, 17]": the multi-index of a global flat index.
std::string index_text(std::int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string text = "[";
  for (std::size_t d = 0; d < index.size(); ++d) text += (d ? ", " : "") + std::to_string(index[d]);
  return text + "]";
}

std::vector<std::int64_t> expand(const std::vector<Run>& runs) {
  std::vector<std::int64_t> out;
  for (const Run& r : runs) {
    EXPECT_EQ(r.local, static_cast<std::int64_t>(out.size()));
    for (std::int64_t i = 0; i < r.count; ++i) out.push_back(r.global + i);
  }
  return out;
}

Box box(Shape offset, Shape shape) { return Box{std::move(offset), std::move(shape)}; }

Slice boxes(std::vector<Box> b) {
  Slice s{std::move(b), 0, 0};
  s.end = s.boxes_numel();
  return s;
}

Slice range(Slice s, std::int64_t begin, std::int64_t end) {
  s.begin = begin;
  s.end = end;
  return s;
}

// Fills the target from sources whose values are their elements' global flat indices.
std::vector<float> fill(const Shape& shape, const Slice& target, const std::vector<Slice>& sources) {
  std::vector<std::vector<float>> data;
  for (const Slice& s : sources) {
    std::vector<float> values;
    for (std::int64_t g : naive_globals(shape, s)) values.push_back(static_cast<float>(g));
    data.push_back(values);
  }
  std::vector<float> out(static_cast<std::size_t>(target.numel()), -1.0f);
  for (const Transfer& t : plan_transfers(shape, target, sources, "w")) {
    for (std::int64_t i = 0; i < t.count; ++i) {
      out[static_cast<std::size_t>(t.to + i)] = data[t.source][static_cast<std::size_t>(t.from + i)];
    }
  }
  return out;
}

std::vector<float> expected(const Shape& shape, const Slice& target) {
  std::vector<float> out;
  for (std::int64_t g : naive_globals(shape, target)) out.push_back(static_cast<float>(g));
  return out;
}

// Tensor [12, 4] with qkv-style rows split 2 ways: rank r holds rows [2r, 2r+2) of q, k and v.
Slice qkv_rank(int r) {
  return boxes({box({2 * r, 0}, {2, 4}), box({4 + 2 * r, 0}, {2, 4}), box({8 + 2 * r, 0}, {2, 4})});
}

TEST(Slices, NumelAndWhole) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 4}), 12);
  EXPECT_EQ(shape_numel({0, 5}), 0);
  const Slice whole = Slice::whole({3, 4});
  EXPECT_EQ(whole, (Slice{{box({0, 0}, {3, 4})}, 0, 12}));
  EXPECT_EQ(whole.boxes_numel(), 12);
  EXPECT_EQ(whole.numel(), 12);
}

TEST(Slices, WholeTensorIsOneRun) {
  const Shape shape{50304, 768};
  EXPECT_EQ(slice_runs(shape, Slice::whole(shape)), (Runs{{0, 0, 50304 * 768}}));
}

TEST(Slices, ScalarIsOneRun) { EXPECT_EQ(slice_runs({}, Slice::whole({})), (Runs{{0, 0, 1}})); }

TEST(Slices, BoxOfColumnsIsOneRunPerRow) {
  const Shape shape{4, 8};
  EXPECT_EQ(slice_runs(shape, boxes({box({0, 2}, {4, 3})})), (Runs{{2, 0, 3}, {10, 3, 3}, {18, 6, 3}, {26, 9, 3}}));
}

TEST(Slices, BoxesThatContinueEachOtherMerge) {
  const Shape shape{12, 4};
  // One tp rank: q, k and v rows back to back are the whole tensor.
  EXPECT_EQ(slice_runs(shape, boxes({box({0, 0}, {4, 4}), box({4, 0}, {4, 4}), box({8, 0}, {4, 4})})),
            (Runs{{0, 0, 48}}));
  EXPECT_EQ(slice_runs(shape, qkv_rank(1)), (Runs{{8, 0, 8}, {24, 8, 8}, {40, 16, 8}}));
}

TEST(Slices, RangeClipsRuns) {
  const Shape shape{4, 8};
  // Columns [4, 8) of every row, elements [5, 11) of them: row 1 from column 5, row 2 to column 6.
  EXPECT_EQ(slice_runs(shape, range(boxes({box({0, 4}, {4, 4})}), 5, 11)), (Runs{{13, 0, 3}, {20, 3, 3}}));
  EXPECT_TRUE(slice_runs(shape, range(boxes({box({0, 4}, {4, 4})}), 7, 7)).empty());
}

TEST(Slices, ThreeDimensionalBoxes) {
  const Shape shape{2, 3, 4};
  const Slice s = boxes({box({1, 1, 0}, {1, 2, 4}), box({0, 0, 1}, {2, 1, 2})});
  EXPECT_EQ(slice_runs(shape, s), (Runs{{16, 0, 8}, {1, 8, 2}, {13, 10, 2}}));
  EXPECT_EQ(expand(slice_runs(shape, s)), naive_globals(shape, s));
}

TEST(Slices, ValidateNamesWhatIsWrong) {
  const Shape shape{4, 8};
  auto message = [&](const Slice& s) { return error_of([&] { validate_slice(shape, s, "tensor w of rank 3"); }); };
  EXPECT_TRUE(contains(message(boxes({box({0}, {4})})), "tensor w of rank 3: box 0"));
  EXPECT_TRUE(contains(message(boxes({box({0}, {4})})), "does not have the 2 dimensions"));
  EXPECT_TRUE(contains(message(boxes({box({0, 0}, {4, 8}), box({2, 6}, {2, 3})})), "box 1"));
  EXPECT_TRUE(
      contains(message(boxes({box({2, 6}, {2, 3})})), "does not lie inside the tensor [4, 8] along dimension 1"));
  EXPECT_TRUE(contains(message(boxes({box({-1, 0}, {2, 3})})), "does not lie inside"));
  EXPECT_TRUE(contains(message(boxes({box({1, 0}, {-1, 3})})), "does not lie inside"));
  EXPECT_TRUE(contains(message(range(boxes({box({0, 0}, {2, 3})}), 4, 3)), "range [4, 3)"));
  EXPECT_TRUE(contains(message(range(boxes({box({0, 0}, {2, 3})}), 0, 7)), "not within the 6 elements"));
  EXPECT_NO_THROW(validate_slice(shape, boxes({box({4, 8}, {0, 0})}), "empty box at the far corner"));
  EXPECT_NO_THROW(validate_slice({}, Slice::whole({}), "scalar"));
}

TEST(PlanTransfers, QkvRowsIntoWhole) {
  const Shape shape{12, 4};
  const std::vector<Slice> sources{qkv_rank(0), qkv_rank(1)};
  EXPECT_EQ(plan_transfers(shape, Slice::whole(shape), sources, "qkv"),
            (std::vector<Transfer>{
                {0, 0, 0, 8}, {1, 0, 8, 8}, {0, 8, 16, 8}, {1, 8, 24, 8}, {0, 16, 32, 8}, {1, 16, 40, 8}}));
  EXPECT_EQ(fill(shape, Slice::whole(shape), sources), expected(shape, Slice::whole(shape)));
  // Resharded to a single tp rank holding all three boxes: transfers merge where both sides continue.
  const Slice one_rank = boxes({box({0, 0}, {4, 4}), box({4, 0}, {4, 4}), box({8, 0}, {4, 4})});
  EXPECT_EQ(fill(shape, one_rank, sources), expected(shape, one_rank));
}

TEST(PlanTransfers, ColumnSplitToOtherColumnSplit) {
  const Shape shape{4, 8};
  const std::vector<Slice> halves{boxes({box({0, 0}, {4, 4})}), boxes({box({0, 4}, {4, 4})})};
  const Slice middle = boxes({box({0, 3}, {4, 3})});  // columns [3, 6): both halves, every row
  const std::vector<Transfer> plan = plan_transfers(shape, middle, halves, "w");
  EXPECT_EQ(plan.size(), 8u);
  EXPECT_EQ(plan[0], (Transfer{0, 3, 0, 1}));
  EXPECT_EQ(plan[1], (Transfer{1, 0, 1, 2}));
  EXPECT_EQ(fill(shape, middle, halves), expected(shape, middle));
  EXPECT_EQ(fill(shape, Slice::whole(shape), halves), expected(shape, Slice::whole(shape)));
}

TEST(PlanTransfers, ZeroRangesOfTensorParallelShards) {
  const Shape shape{12, 4};
  // Each tp rank's qkv shard split over 3 ZeRO owners (24 elements: 8 each).
  std::vector<Slice> sources;
  for (int r = 0; r < 2; ++r) {
    for (int z = 0; z < 3; ++z) sources.push_back(range(qkv_rank(r), 8 * z, 8 * z + 8));
  }
  EXPECT_EQ(fill(shape, Slice::whole(shape), sources), expected(shape, Slice::whole(shape)));
  const Slice target = range(qkv_rank(1), 5, 19);
  EXPECT_EQ(fill(shape, target, sources), expected(shape, target));
}

TEST(PlanTransfers, OneDimensionalAndScalar) {
  const std::vector<Slice> thirds{boxes({box({0}, {3})}), boxes({box({3}, {4})}), boxes({box({7}, {3})})};
  EXPECT_EQ(plan_transfers({10}, Slice::whole({10}), thirds, "bias"),
            (std::vector<Transfer>{{0, 0, 0, 3}, {1, 0, 3, 4}, {2, 0, 7, 3}}));
  const std::vector<Slice> scalar{Slice::whole({})};
  EXPECT_EQ(plan_transfers({}, Slice::whole({}), scalar, "scale"), (std::vector<Transfer>{{0, 0, 0, 1}}));
}

TEST(PlanTransfers, LowestNumberedReplicaWins) {
  const Shape shape{4, 8};
  // Source 0 holds rows 1-2 only, sources 1 and 2 hold everything: source 0 wins where it can,
  // source 1 elsewhere, source 2 never.
  const std::vector<Slice> sources{boxes({box({1, 0}, {2, 8})}), Slice::whole(shape), Slice::whole(shape)};
  EXPECT_EQ(plan_transfers(shape, Slice::whole(shape), sources, "w"),
            (std::vector<Transfer>{{1, 0, 0, 8}, {0, 0, 8, 16}, {1, 24, 24, 8}}));
  const std::vector<Slice> reversed{Slice::whole(shape), boxes({box({1, 0}, {2, 8})})};
  EXPECT_EQ(plan_transfers(shape, Slice::whole(shape), reversed, "w"), (std::vector<Transfer>{{0, 0, 0, 32}}));
}

TEST(PlanTransfers, MissingElementIsNamed) {
  const Shape shape{4, 20};
  // Columns [0, 17) and [18, 20): column 17 of every row is missing; the first is [0, 17].
  const std::vector<Slice> sources{boxes({box({0, 0}, {4, 17})}), boxes({box({0, 18}, {4, 2})})};
  const std::string message = error_of([&] { plan_transfers(shape, Slice::whole(shape), sources, "param/wte"); });
  EXPECT_TRUE(contains(message, "param/wte")) << message;
  EXPECT_TRUE(contains(message, "no source holds element [0, 17]")) << message;
  // Reading rows 3.. only: the first missing element is [3, 17].
  const std::string later = error_of([&] { plan_transfers(shape, boxes({box({3, 0}, {1, 20})}), sources, "w"); });
  EXPECT_TRUE(contains(later, "[3, 17]")) << later;
  EXPECT_TRUE(contains(error_of([&] { plan_transfers(shape, Slice::whole(shape), {}, "w"); }), "[0, 0]"));
  EXPECT_TRUE(contains(error_of([&] { plan_transfers({}, Slice::whole({}), {}, "s"); }), "element []"));
}

TEST(PlanTransfers, InvalidSlicesAreNamed) {
  const Shape shape{4, 8};
  const std::vector<Slice> sources{Slice::whole(shape), boxes({box({0, 0}, {5, 8})})};
  EXPECT_TRUE(contains(error_of([&] { plan_transfers(shape, Slice::whole(shape), sources, "w"); }),
                       "tensor w: source 1: box 0"));
  EXPECT_TRUE(contains(error_of([&] { plan_transfers(shape, Slice::whole({4}), sources, "w"); }),
                       "tensor w: the slice to read"));
}

// Random layouts: a tensor of 1-3 dimensions split into sources of several kinds.
class RandomLayouts {
 public:
  explicit RandomLayouts(unsigned seed) : rng_(seed) {}

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  Shape shape() {
    Shape s(static_cast<std::size_t>(pick(1, 3)));
    for (auto& extent : s) extent = pick(1, 6);
    return s;
  }

  // Cut points 0 = c0 <= c1 <= ... <= ck = n.
  std::vector<std::int64_t> cuts(std::int64_t n, int parts) {
    std::vector<std::int64_t> c{0, n};
    for (int i = 1; i < parts; ++i) c.push_back(pick(0, static_cast<int>(n)));
    std::sort(c.begin(), c.end());
    return c;
  }

  // Slices that together hold every element (some possibly more than once), in random order.
  std::vector<Slice> partition(const Shape& shape) {
    std::vector<Slice> out;
    const std::size_t dim = static_cast<std::size_t>(pick(0, static_cast<int>(shape.size()) - 1));
    switch (pick(0, 2)) {
      case 0: {  // one box per part along one dimension (row or column split)
        const auto c = cuts(shape[dim], pick(1, 4));
        for (std::size_t i = 0; i + 1 < c.size(); ++i) out.push_back(boxes({along(shape, dim, c[i], c[i + 1])}));
        break;
      }
      case 1: {  // qkv-style: groups along the dimension, each split over the same ranks
        const int ranks = pick(1, 3);
        const auto groups = cuts(shape[dim], pick(1, 3));
        out.assign(static_cast<std::size_t>(ranks), Slice{});
        for (std::size_t g = 0; g + 1 < groups.size(); ++g) {
          const auto c = cuts(groups[g + 1] - groups[g], ranks);
          for (std::size_t r = 0; r + 1 < c.size(); ++r) {
            out[r].boxes.push_back(along(shape, dim, groups[g] + c[r], groups[g] + c[r + 1]));
          }
        }
        for (Slice& s : out) s.end = s.boxes_numel();
        break;
      }
      default:
        out.push_back(Slice::whole(shape));
    }
    if (pick(0, 1)) {  // ZeRO: each piece split into flat ranges
      std::vector<Slice> ranges;
      for (const Slice& s : out) {
        const auto c = cuts(s.boxes_numel(), pick(1, 3));
        for (std::size_t i = 0; i + 1 < c.size(); ++i) ranges.push_back(range(s, c[i], c[i + 1]));
      }
      out = ranges;
    }
    if (pick(0, 3) == 0) out.push_back(random_box(shape));  // an overlapping extra replica
    std::shuffle(out.begin(), out.end(), rng_);
    return out;
  }

  Slice target(const Shape& shape) {
    if (pick(0, 2) == 0) {
      Slice s = random_box(shape);
      const auto c = cuts(s.boxes_numel(), 2);
      return range(s, c[0], c[1]);
    }
    std::vector<Slice> layout = partition(shape);
    return layout[static_cast<std::size_t>(pick(0, static_cast<int>(layout.size()) - 1))];
  }

 private:
  static Box along(const Shape& shape, std::size_t dim, std::int64_t begin, std::int64_t end) {
    Box b{Shape(shape.size(), 0), shape};
    b.offset[dim] = begin;
    b.shape[dim] = end - begin;
    return b;
  }

  Slice random_box(const Shape& shape) {
    Box b{Shape(shape.size(), 0), Shape(shape.size(), 0)};
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const auto c = cuts(shape[d], 2);
      b.offset[d] = c[0];
      b.shape[d] = c[1] - c[0];
    }
    return boxes({b});
  }

  std::mt19937 rng_;
};

TEST(PlanTransfers, RandomLayoutsReproduceEveryElement) {
  RandomLayouts random(20240531);
  for (int trial = 0; trial < 2000; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Shape shape = random.shape();
    std::vector<Slice> sources = random.partition(shape);
    const Slice target = random.target(shape);
    for (const Slice& s : sources) ASSERT_EQ(expand(slice_runs(shape, s)), naive_globals(shape, s));
    ASSERT_EQ(expand(slice_runs(shape, target)), naive_globals(shape, target));
    if (random.pick(0, 4) == 0) sources.erase(sources.begin() + random.pick(0, static_cast<int>(sources.size()) - 1));

    // The reference: each element's lowest-numbered source, or the first element none holds.
    std::map<std::int64_t, std::size_t> owner;
    for (std::size_t s = sources.size(); s-- > 0;) {
      for (std::int64_t g : naive_globals(shape, sources[s])) owner[g] = s;
    }
    std::optional<std::int64_t> missing;
    for (std::int64_t g : naive_globals(shape, target)) {
      if (!owner.contains(g)) {
        missing = g;
        break;
      }
    }
    if (missing) {
      const std::string message = error_of([&] { plan_transfers(shape, target, sources, "w"); });
      ASSERT_TRUE(contains(message, "element " + index_text(*missing, shape))) << message;
      continue;
    }

    const std::vector<Transfer> plan = plan_transfers(shape, target, sources, "w");
    std::int64_t next = 0;
    const std::vector<std::int64_t> want = naive_globals(shape, target);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const Transfer& t = plan[i];
      ASSERT_EQ(t.to, next) << "transfers cover the target once, in order";
      ASSERT_GT(t.count, 0);
      for (std::int64_t k = 0; k < t.count; ++k) {
        ASSERT_EQ(owner.at(want[static_cast<std::size_t>(t.to + k)]), t.source);
      }
      if (i > 0) {
        const Transfer& p = plan[i - 1];
        ASSERT_FALSE(p.source == t.source && p.from + p.count == t.from) << "adjacent transfers merged";
      }
      next += t.count;
    }
    ASSERT_EQ(next, target.numel());
    ASSERT_EQ(fill(shape, target, sources), expected(shape, target));
  }
}

}  // namespace
}  // namespace mt::ckpt
