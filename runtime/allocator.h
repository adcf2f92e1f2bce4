// Device memory: an allocator per device that enforces an optional cap (--device-memory-limit)
// and caches freed blocks, so steady-state training never calls cudaMalloc on a GPU nor faults in
// fresh pages on the host.
// defines: MemoryStats, RawMemory, Allocator, make_host_raw_memory, make_cuda_raw_memory
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "runtime/device.h"

namespace mt {

struct MemoryStats {
  std::size_t in_use = 0;    // bytes handed out and not yet returned
  std::size_t peak = 0;      // highest in_use seen
  std::size_t cached = 0;    // bytes freed by users but kept for reuse
  std::size_t limit = 0;     // 0: no cap
  std::size_t raw_calls = 0; // allocations that reached the device allocator
};

// Where bytes really come from (malloc, cudaMalloc). Returns nullptr when out of memory.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr) noexcept = 0;  // called from destructors: must not throw
};

// Which freed blocks an allocator keeps for reuse.
//   Off: none, every free goes back to the device.
//   ExactSize: blocks reused only for a request of their own (rounded) size, so the bytes in use and
//     their peak are exactly what tensors asked for; on a miss, a cache larger than the bytes in use
//     is given back first, so sizes that never recur (a growing sampling context) cannot pile up.
//   UpToTwice: the best fit among blocks no more than twice the request (CUDA: steady-state
//     training never calls cudaMalloc, and nearby sizes share blocks).
enum class BlockCache { Off, ExactSize, UpToTwice };

// Hands out device memory in blocks, counts it against the cap and keeps freed blocks for reuse as
// `cache` says.
class Allocator {
 public:
  Allocator(Device device, std::unique_ptr<RawMemory> raw, std::size_t limit, BlockCache cache);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Throws OutOfMemoryError naming the device, the request, the cap and what is in use.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr);
  // Returns every cached block to the device.
  void release_cached();
  // The peak starts again from the bytes in use now: what a measurement allocated and freed (the
  // GEMM rate for MFU) is not the run's peak.
  void reset_peak();

  Device device() const { return device_; }
  MemoryStats stats() const;

 private:
  void* allocate_raw_locked(std::size_t bytes);
  void release_cached_locked();

  Device device_;
  std::unique_ptr<RawMemory> raw_;
  const std::size_t limit_;
  const BlockCache cache_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, std::size_t> live_;   // pointer -> rounded size
  std::multimap<std::size_t, void*> free_blocks_; // rounded size -> cached pointer
  MemoryStats stats_;
};

std::unique_ptr<RawMemory> make_host_raw_memory();
std::unique_ptr<RawMemory> make_cuda_raw_memory(int device_index);

}  // namespace mt
