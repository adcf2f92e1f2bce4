// What ring attention (parallel/ring_attention.h) allocates once, as arithmetic: the sizes of its
// buffers in bytes, in the order its constructor makes them. RingAttention counts its workspace with
// it, and the memory model (perf/memory_model.cpp) sums the same list, each buffer rounded as the
// allocator rounds it.
// defines: RingBufferShape, ring_attention_buffer_bytes
#pragma once

#include <cstdint>
#include <vector>

namespace mt {

struct RingBufferShape {
  std::int64_t batch = 1, chunk = 1;  // the rank holds 2 x chunk rows per sequence
  std::int64_t q_cols = 1;            // q_heads x head_size
  std::int64_t kv_cols = 1;           // 2 x kv_heads x head_size ([k | v])
  std::int64_t q_heads = 1;
  std::int64_t act_bytes = 4;         // of qkv (the kv blocks travel in it)
};

inline std::vector<std::int64_t> ring_attention_buffer_bytes(const RingBufferShape& s) {
  const std::int64_t B = s.batch, c = s.chunk, f32 = 4;
  std::vector<std::int64_t> bytes;
  for (int i = 0; i < 2; ++i) bytes.push_back(B * 2 * c * s.kv_cols * s.act_bytes);  // the block at hand, the next
  for (int slot = 0; slot < 2; ++slot) {
    bytes.push_back(B * c * s.q_cols * f32);      // the merged output
    bytes.push_back(B * s.q_heads * c * f32);     // delta
    bytes.push_back(B * c * s.q_cols * f32);      // dq
    bytes.push_back(B * c * s.kv_cols * f32);     // this step's dk, dv of the visiting block
    for (int i = 0; i < 2; ++i) bytes.push_back(B * c * s.kv_cols * f32);  // the travelling accumulators
  }
  bytes.push_back(2 * B * s.q_heads * c * f32);  // the short form's lse
  bytes.push_back(B * c * s.q_cols * f32);       // one pair's output before its merge
  bytes.push_back(B * s.q_heads * c * f32);      // and its lse
  return bytes;
}

}  // namespace mt
