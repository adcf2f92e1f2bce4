#include "checkpoint/slices.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <utility>

#include "runtime/error.h"

namespace mt::ckpt {
namespace {

std::string format_index(const Shape& index) {
  std::ostringstream out;
  out << '[';
  for (std::size_t d = 0; d < index.size(); ++d) out << (d ? ", " : "") << index[d];
  out << ']';
  return out.str();
}

// Row-major strides: stride[d] elements between neighbours along dimension d.
Shape strides_of(const Shape& shape) {
  Shape stride(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  return stride;
}

Shape unflatten(std::int64_t flat, const Shape& shape) {
  Shape index(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// Append `next`, merged into the last entry when it continues it at both positions.
void append_merged(std::vector<Run>& out, const Run& next) {
  if (!out.empty() && out.back().local + out.back().count == next.local &&
      out.back().global + out.back().count == next.global) {
    out.back().count += next.count;
  } else {
    out.push_back(next);
  }
}

void append_merged(std::vector<Transfer>& out, const Transfer& next) {
  if (!out.empty() && out.back().source == next.source && out.back().from + out.back().count == next.from &&
      out.back().to + out.back().count == next.to) {
    out.back().count += next.count;
  } else {
    out.push_back(next);
  }
}

// Appends the runs of box elements [lo, hi) (positions within the box), shifted to local `local0`.
// A box is contiguous in the tensor over its trailing dimensions that span the whole tensor plus
// the one before them: each such chunk is one run, so the work is per chunk, not per element.
void box_runs(const Shape& tensor_shape, const Shape& stride, const Box& box, std::int64_t lo, std::int64_t hi,
              std::int64_t local0, std::vector<Run>& out) {
  const std::size_t rank = tensor_shape.size();
  std::size_t inner = rank == 0 ? 0 : rank - 1;  // chunks cover dimensions inner..rank-1
  while (inner > 0 && box.shape[inner] == tensor_shape[inner]) --inner;
  const std::int64_t chunk = rank == 0 ? 1 : box.shape[inner] * stride[inner];
  const std::int64_t inner_offset = rank == 0 ? 0 : box.offset[inner] * stride[inner];

  for (std::int64_t c = lo / chunk; c * chunk < hi; ++c) {
    std::int64_t global = inner_offset;
    std::int64_t rest = c;
    for (std::size_t d = inner; d-- > 0;) {
      global += (box.offset[d] + rest % box.shape[d]) * stride[d];
      rest /= box.shape[d];
    }
    const std::int64_t first = std::max(lo, c * chunk), last = std::min(hi, (c + 1) * chunk);
    append_merged(out, Run{global + first - c * chunk, local0 + first - lo, last - first});
  }
}

// Where a piece of the tensor lies: global [begin, end) is source `source` from position `local`.
struct Interval {
  std::int64_t begin = 0, end = 0, local = 0;
  std::size_t source = 0;
};

// The sources' runs made disjoint and sorted by global position, each element assigned to the
// lowest-numbered source holding it: a sweep over run boundaries with the sources open there.
std::vector<Interval> owner_map(const Shape& tensor_shape, std::span<const Slice> sources) {
  std::vector<Interval> runs;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    for (const Run& r : slice_runs(tensor_shape, sources[s]))
      runs.push_back({r.global, r.global + r.count, r.local, s});
  }
  struct Event {
    std::int64_t at;
    bool opens;  // else the run closes here
    std::size_t run;
  };
  std::vector<Event> events;
  events.reserve(2 * runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    events.push_back({runs[i].begin, true, i});
    events.push_back({runs[i].end, false, i});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.at < b.at; });

  std::set<std::pair<std::size_t, std::size_t>> open;  // (source, run): the first is the owner
  std::vector<Interval> owned;
  for (std::size_t e = 0; e < events.size();) {
    const std::int64_t at = events[e].at;
    for (; e < events.size() && events[e].at == at; ++e) {
      const auto key = std::pair{runs[events[e].run].source, events[e].run};
      if (events[e].opens) {
        open.insert(key);
      } else {
        open.erase(key);
      }
    }
    if (open.empty() || e == events.size()) continue;
    const Interval& owner = runs[open.begin()->second];
    const Interval piece{at, events[e].at, owner.local + (at - owner.begin), owner.source};
    if (!owned.empty() && owned.back().end == piece.begin && owned.back().source == piece.source &&
        owned.back().local + (owned.back().end - owned.back().begin) == piece.local) {
      owned.back().end = piece.end;  // the same run continuing past another run's boundary
    } else {
      owned.push_back(piece);
    }
  }
  return owned;
}

}  // namespace

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t extent : shape) n *= extent;
  return n;
}

std::int64_t Slice::boxes_numel() const {
  std::int64_t n = 0;
  for (const Box& box : boxes) n += box.numel();
  return n;
}

Slice Slice::whole(const Shape& shape) { return Slice{{Box{Shape(shape.size(), 0), shape}}, 0, shape_numel(shape)}; }

void validate_slice(const Shape& tensor_shape, const Slice& slice, const std::string& what) {
  std::int64_t elements = 1;
  for (std::int64_t extent : tensor_shape) {
    MT_REQUIRE(extent >= 0, what, ": the tensor's shape ", format_index(tensor_shape), " has a negative extent");
    MT_REQUIRE(!__builtin_mul_overflow(elements, extent, &elements), what, ": the tensor's shape ",
               format_index(tensor_shape), " has more elements than an int64 counts");
  }
  for (std::size_t b = 0; b < slice.boxes.size(); ++b) {
    const Box& box = slice.boxes[b];
    MT_REQUIRE(box.offset.size() == tensor_shape.size() && box.shape.size() == tensor_shape.size(), what, ": box ", b,
               " (offset ", format_index(box.offset), ", shape ", format_index(box.shape), ") does not have the ",
               tensor_shape.size(), " dimensions of the tensor ", format_index(tensor_shape));
    for (std::size_t d = 0; d < tensor_shape.size(); ++d) {
      MT_REQUIRE(box.offset[d] >= 0 && box.shape[d] >= 0 && box.offset[d] <= tensor_shape[d] - box.shape[d], what,
                 ": box ", b, " (offset ", format_index(box.offset), ", shape ", format_index(box.shape),
                 ") does not lie inside the tensor ", format_index(tensor_shape), " along dimension ", d);
    }
  }
  // Each box lies inside the tensor, so its numel() fits; their sum is checked (a manifest may list many).
  std::int64_t total = 0;
  for (const Box& box : slice.boxes) {
    MT_REQUIRE(!__builtin_add_overflow(total, box.numel(), &total), what, ": its ", slice.boxes.size(),
               " boxes hold more elements than an int64 counts");
  }
  MT_REQUIRE(0 <= slice.begin && slice.begin <= slice.end && slice.end <= total, what, ": range [", slice.begin, ", ",
             slice.end, ") is not within the ", total, " elements of its boxes");
}

std::vector<Run> slice_runs(const Shape& tensor_shape, const Slice& slice) {
  const Shape stride = strides_of(tensor_shape);
  std::vector<Run> runs;
  std::int64_t box_start = 0;  // position of the box's first element in the boxes' order
  for (const Box& box : slice.boxes) {
    const std::int64_t box_end = box_start + box.numel();
    const std::int64_t lo = std::max(slice.begin, box_start), hi = std::min(slice.end, box_end);
    if (lo < hi) box_runs(tensor_shape, stride, box, lo - box_start, hi - box_start, lo - slice.begin, runs);
    box_start = box_end;
  }
  return runs;
}

std::vector<Transfer> plan_transfers(const Shape& tensor_shape, const Slice& target, std::span<const Slice> sources,
                                     const std::string& tensor) {
  validate_slice(tensor_shape, target, "tensor " + tensor + ": the slice to read");
  for (std::size_t s = 0; s < sources.size(); ++s) {
    validate_slice(tensor_shape, sources[s], "tensor " + tensor + ": source " + std::to_string(s));
  }
  const std::vector<Interval> owned = owner_map(tensor_shape, sources);

  std::vector<Transfer> transfers;
  for (const Run& run : slice_runs(tensor_shape, target)) {
    const std::int64_t end = run.global + run.count;
    // Owned intervals are disjoint and sorted: start at the last one beginning at or before the
    // run, then each next one must begin exactly where the previous ended.
    auto it = std::upper_bound(owned.begin(), owned.end(), run.global,
                               [](std::int64_t at, const Interval& iv) { return at < iv.begin; });
    if (it != owned.begin()) --it;
    for (std::int64_t at = run.global; at < end; ++it) {
      MT_REQUIRE(it != owned.end() && it->begin <= at && at < it->end, "tensor ", tensor, " ",
                 format_index(tensor_shape), ": no source holds element ", format_index(unflatten(at, tensor_shape)));
      const std::int64_t count = std::min(end, it->end) - at;
      append_merged(transfers,
                    Transfer{it->source, it->local + (at - it->begin), run.local + (at - run.global), count});
      at += count;
    }
  }
  return transfers;
}

}  // namespace mt::ckpt
