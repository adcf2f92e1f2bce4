// One of our parameters as a Hugging Face tensor: the name and shape HF gives it, and how its
// elements are laid out against ours. A model family's table is a list of these, one per
// parameter in its spec order (models/hf/gpt2_hf.h for GPT-2); the copying is shared here.
// defines: HfLayout, HfTensor, hf_to_ours, ours_to_hf
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mt {

enum class HfLayout : std::uint8_t {
  Same,        // the same elements in the same order; HF may hold fewer leading rows (an unpadded
               // vocabulary: our extra rows are padding, zero when read, dropped when written)
  Transposed,  // a 2-D matrix stored [in, out] (GPT-2's Conv1D) where ours is [out, in]
};

struct HfTensor {
  std::string ours;                   // our parameter's name ("h.0.attn.qkv.weight")
  std::vector<std::int64_t> our_shape;
  std::string theirs;                 // HF's name without the model's prefix ("h.0.attn.c_attn.weight")
  std::vector<std::int64_t> shape;    // HF's shape
  HfLayout layout = HfLayout::Same;
};

// Their elements (t.shape) into ours (t.our_shape).
void hf_to_ours(const HfTensor& t, std::span<const float> theirs, std::span<float> ours);
// Ours into theirs (resized to t.shape's elements).
void ours_to_hf(const HfTensor& t, std::span<const float> ours, std::vector<float>& theirs);

}  // namespace mt
