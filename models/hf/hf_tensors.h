// One of our parameters as Hugging Face tensors: the names and shapes HF gives it, and how their
// elements are laid out against ours. A model family's table is a list of these, one per
// parameter in its spec order (models/hf/gpt2_hf.h, models/hf/llama_hf.h); the copying is shared
// here. One of ours may be several of theirs stacked on its rows (llama's [k | v] and
// [gate | up]), so that tensor parallelism can cut them as one column-parallel weight.
// defines: HfLayout, HfPart, HfTensor, hf_to_ours, ours_to_hf
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mt {

enum class HfLayout : std::uint8_t {
  Same,        // the same elements in the same order
  Transposed,  // a 2-D matrix stored [in, out] (GPT-2's Conv1D) where ours is [out, in]
};

struct HfPart {
  std::string name;                // HF's name without the model's prefix ("h.0.attn.c_attn.weight")
  std::vector<std::int64_t> shape; // HF's shape
};

struct HfTensor {
  std::string ours;                   // our parameter's name ("h.0.attn.qkv.weight")
  std::vector<std::int64_t> our_shape;
  // Theirs, stacked on our rows in this order. Together they may hold fewer rows than ours (an
  // unpadded vocabulary): our extra rows are padding, zero when read, dropped when written.
  std::vector<HfPart> parts;
  HfLayout layout = HfLayout::Same;  // of every part
};

// Their elements (one span per part, each of its shape's size) into ours (t.our_shape).
void hf_to_ours(const HfTensor& t, std::span<const std::span<const float>> theirs, std::span<float> ours);
// Ours into theirs (one vector per part, resized to its shape's elements).
void ours_to_hf(const HfTensor& t, std::span<const float> ours, std::vector<std::vector<float>>& theirs);

}  // namespace mt
