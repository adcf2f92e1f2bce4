// Where a rank's piece of a tensor lies in the whole tensor, in terms no layout owns: a list of
// boxes (hyper-rectangles of the global tensor: an offset and a shape per dimension), whose
// elements, each box in row-major order and box after box, form the piece's local order; and a
// range [begin, end) of that order, because a ZeRO-1 owner holds an arbitrary flat range of a
// tensor-parallel shard. A tensor-parallel shard of qkv is three boxes (its q, k and v rows), a
// row-parallel weight one box of columns, a replicated tensor one box covering everything.
//
// Loading by slices is what makes resharding work: a reader asks for its own slice of a tensor and
// plan_transfers finds, in whatever pieces some other layout wrote, where each element lies.
// defines: Shape, Box, Slice, Run, Transfer, validate_slice, slice_runs, plan_transfers
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mt::ckpt {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);  // 1 for a scalar (empty shape)

struct Box {
  Shape offset, shape;  // per dimension: first index and extent within the global tensor
  std::int64_t numel() const { return shape_numel(shape); }
  bool operator==(const Box&) const = default;
};

struct Slice {
  std::vector<Box> boxes;
  std::int64_t begin = 0, end = 0;  // elements [begin, end) of the boxes' concatenated order
  std::int64_t numel() const { return end - begin; }
  std::int64_t boxes_numel() const;  // elements of all boxes: end <= boxes_numel()
  // The whole tensor: one box at the origin, every element.
  static Slice whole(const Shape& shape);
  bool operator==(const Slice&) const = default;
};

// Throws Error (naming `what`) unless every box has the tensor's rank, lies inside it with
// non-negative extents, and 0 <= begin <= end <= boxes_numel().
void validate_slice(const Shape& tensor_shape, const Slice& slice, const std::string& what);

// Consecutive elements: global flat (row-major) indices [global, global + count) of the tensor are
// local positions [local, local + count) of the slice.
struct Run {
  std::int64_t global = 0, local = 0, count = 0;
  bool operator==(const Run&) const = default;
};

// The slice's elements as runs, in local order (local ascending, starting at 0, with no gaps),
// where neighbouring runs that continue each other globally are merged: a whole tensor is one run,
// a box of whole rows one run, a box of columns one run per row. The slice must be valid.
std::vector<Run> slice_runs(const Shape& tensor_shape, const Slice& slice);

// Copy `count` elements from position `from` of source `source` to position `to` of the target.
struct Transfer {
  std::size_t source = 0;
  std::int64_t from = 0, to = 0, count = 0;
  bool operator==(const Transfer&) const = default;
};

// How to fill `target` from `sources` (slices of the same tensor, as some layout wrote them):
// transfers that cover every element of the target exactly once, sorted by `to`, adjacent ones
// merged where both positions continue. Where sources overlap (replicas), an element comes from
// the lowest-numbered source holding it. Throws Error naming `tensor` and the first global index
// (as a multi-index, e.g. [3, 17]) no source holds. Cost: O(R log R) in the number of runs.
std::vector<Transfer> plan_transfers(const Shape& tensor_shape, const Slice& target, std::span<const Slice> sources,
                                     const std::string& tensor);

}  // namespace mt::ckpt
