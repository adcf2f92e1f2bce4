#include "models/hf/hf_tensors.h"

#include <algorithm>

#include "runtime/error.h"

namespace mt {
namespace {

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// Element (r, c) of a [rows, cols] part stored transposed ([cols, rows]).
void transpose(const float* from, float* to, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) to[c * rows + r] = from[r * cols + c];
}

// Where each part starts in ours; the last entry is where the padding starts.
std::vector<std::int64_t> part_offsets(const HfTensor& t) {
  std::vector<std::int64_t> offsets{0};
  for (const HfPart& p : t.parts) offsets.push_back(offsets.back() + numel(p.shape));
  MT_CHECK(offsets.back() <= numel(t.our_shape), t.ours, ": parts of ", offsets.back(), " elements for ",
           numel(t.our_shape));
  MT_CHECK(t.layout == HfLayout::Same || (t.parts.size() == 1 && offsets.back() == numel(t.our_shape)), t.ours,
           ": a transposed tensor is one whole part");
  return offsets;
}

}  // namespace

void hf_to_ours(const HfTensor& t, std::span<const std::span<const float>> theirs, std::span<float> ours) {
  const std::vector<std::int64_t> offsets = part_offsets(t);
  MT_CHECK(theirs.size() == t.parts.size() && static_cast<std::int64_t>(ours.size()) == numel(t.our_shape), t.ours,
           ": ", theirs.size(), " parts into ", ours.size(), " elements");
  for (std::size_t i = 0; i < t.parts.size(); ++i) {
    const HfPart& p = t.parts[i];
    MT_CHECK(static_cast<std::int64_t>(theirs[i].size()) == numel(p.shape), p.name, ": ", theirs[i].size(), " elements");
    float* to = ours.data() + offsets[i];
    if (t.layout == HfLayout::Transposed) {
      transpose(theirs[i].data(), to, p.shape[0], p.shape[1]);
    } else {
      std::copy(theirs[i].begin(), theirs[i].end(), to);
    }
  }
  std::fill(ours.begin() + static_cast<std::ptrdiff_t>(offsets.back()), ours.end(), 0.0f);  // padding rows
}

void ours_to_hf(const HfTensor& t, std::span<const float> ours, std::vector<std::vector<float>>& theirs) {
  const std::vector<std::int64_t> offsets = part_offsets(t);
  MT_CHECK(static_cast<std::int64_t>(ours.size()) == numel(t.our_shape), t.ours, ": ", ours.size(), " elements");
  theirs.resize(t.parts.size());
  for (std::size_t i = 0; i < t.parts.size(); ++i) {
    const HfPart& p = t.parts[i];
    theirs[i].resize(static_cast<std::size_t>(numel(p.shape)));
    const float* from = ours.data() + offsets[i];
    if (t.layout == HfLayout::Transposed) {
      transpose(from, theirs[i].data(), p.shape[1], p.shape[0]);  // ours [shape[1], shape[0]]
    } else {
      std::copy(from, from + numel(p.shape), theirs[i].begin());
    }
  }
}

}  // namespace mt
