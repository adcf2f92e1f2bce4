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

}  // namespace

void hf_to_ours(const HfTensor& t, std::span<const float> theirs, std::span<float> ours) {
  MT_CHECK(static_cast<std::int64_t>(theirs.size()) == numel(t.shape) &&
               static_cast<std::int64_t>(ours.size()) == numel(t.our_shape),
           t.theirs, ": ", theirs.size(), " -> ", ours.size(), " elements");
  if (t.layout == HfLayout::Transposed) {
    const std::int64_t rows = t.shape[0], cols = t.shape[1];  // theirs [rows, cols], ours [cols, rows]
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) ours[static_cast<std::size_t>(c * rows + r)] = theirs[static_cast<std::size_t>(r * cols + c)];
    return;
  }
  std::copy(theirs.begin(), theirs.end(), ours.begin());
  std::fill(ours.begin() + static_cast<std::ptrdiff_t>(theirs.size()), ours.end(), 0.0f);  // padding rows
}

void ours_to_hf(const HfTensor& t, std::span<const float> ours, std::vector<float>& theirs) {
  MT_CHECK(static_cast<std::int64_t>(ours.size()) == numel(t.our_shape), t.ours, ": ", ours.size(), " elements");
  theirs.resize(static_cast<std::size_t>(numel(t.shape)));
  if (t.layout == HfLayout::Transposed) {
    const std::int64_t rows = t.shape[0], cols = t.shape[1];
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) theirs[static_cast<std::size_t>(r * cols + c)] = ours[static_cast<std::size_t>(c * rows + r)];
    return;
  }
  std::copy(ours.begin(), ours.begin() + static_cast<std::ptrdiff_t>(theirs.size()), theirs.begin());
}

}  // namespace mt
