// The options that trade compute or communication for device memory (--recompute,
// --sequence-parallel; ZeRO's stage is LayoutRequest::zero), by name.
// defines: Recompute, parse_recompute, recompute_name
#pragma once

#include <string_view>

namespace mt {

// What a layer's forward keeps for its backward.
// None: everything backward reads. Selective (Megatron's): the GEMM inputs and outputs, but not the
// attention probabilities [B, H, T, T] nor the GELU output, which backward recomputes from the kept
// qkv and pre-GELU activation (cheap next to the GEMMs, and the attention matrix is what grows with
// T). Full: only the layer's input; backward runs the layer's forward again, one layer at a time.
// The recomputation runs the same kernels on the same inputs, so the gradients keep their bits.
enum class Recompute { None, Selective, Full };

// "none", "selective", "full"; anything else throws UsageError listing them.
Recompute parse_recompute(std::string_view name);
const char* recompute_name(Recompute recompute);

}  // namespace mt
