#include "runtime/allocator.h"

#include <sanitizer/asan_interface.h>  // defines: ASAN_POISON_MEMORY_REGION (no-ops without ASan)

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "runtime/cuda_api.h"
#include "runtime/device_counters.h"
#include "runtime/error.h"

namespace mt {
namespace {

// Blocks are rounded so that cached blocks are reusable across slightly different requests, and
// every tensor starts 256-byte aligned (vector loads on CPU, coalescing on GPU).
constexpr std::size_t kAlignment = 256;
std::size_t round_up(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > SIZE_MAX - kAlignment) return SIZE_MAX;  // unsatisfiable; refused by the caller
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

// Under AddressSanitizer a host block is addressable only up to the bytes asked for, and a cached
// block not at all: an access in the rounding slack is reported like one past the end of a malloc,
// one into a freed-but-cached block like a use after free. (Device pointers have no shadow.)
void poison_host(const Device& device, void* ptr, std::size_t bytes) {
  if (device.is_cpu()) ASAN_POISON_MEMORY_REGION(ptr, bytes);
}
void unpoison_host(const Device& device, void* ptr, std::size_t bytes) {
  if (device.is_cpu()) ASAN_UNPOISON_MEMORY_REGION(ptr, bytes);
}

class HostRawMemory final : public RawMemory {
 public:
  void* allocate(std::size_t bytes) override { return std::aligned_alloc(kAlignment, bytes); }
  void release(void* ptr) noexcept override { std::free(ptr); }
};

class CudaRawMemory final : public RawMemory {
 public:
  explicit CudaRawMemory(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    cuda::set_device(device_);
    return cuda::malloc_device(bytes);
  }
  // Runs in destructors: logs instead of throwing (e.g. the runtime already unloading at exit).
  void release(void* ptr) noexcept override {
    try {
      cuda::set_device(device_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrain: warning: %s\n", e.what());
    }
    cuda::free_device(ptr);
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<RawMemory> make_host_raw_memory() { return std::make_unique<HostRawMemory>(); }
std::unique_ptr<RawMemory> make_cuda_raw_memory(int device_index) {
  return std::make_unique<CudaRawMemory>(device_index);
}

Allocator::Allocator(Device device, std::unique_ptr<RawMemory> raw, std::size_t limit, BlockCache cache)
    : device_(device), raw_(std::move(raw)), limit_(limit), cache_(cache) {
  stats_.limit = limit;
}

Allocator::~Allocator() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
  // Blocks still live belong to tensors that outlived their context: a bug, but not one to
  // crash over at exit; return them so leak checkers stay quiet.
  for (auto& [ptr, size] : live_) {
    unpoison_host(device_, ptr, size);
    raw_->release(ptr);
  }
}

void* Allocator::allocate(std::size_t bytes) {
  const std::size_t size = round_up(bytes);
  if (size == SIZE_MAX) {
    MT_FAIL_AS(OutOfMemoryError, device_.str(), ": out of memory: ", bytes, " bytes can never be allocated");
  }
  std::lock_guard lock(mutex_);
  if (limit_ != 0 && stats_.in_use + size > limit_) {
    MT_FAIL_AS(OutOfMemoryError, device_.str(), ": out of memory: allocating ", format_bytes(size),
               " would exceed the cap of ", format_bytes(limit_), " set by --device-memory-limit (",
               format_bytes(stats_.in_use), " already in use)");
  }
  void* ptr = nullptr;
  if (cache_ != BlockCache::Off) {
    auto it = free_blocks_.lower_bound(size);
    const std::size_t fits = cache_ == BlockCache::ExactSize ? size : 2 * size;
    if (it != free_blocks_.end() && it->first <= fits) {
      ptr = it->second;
      stats_.cached -= it->first;
      live_[ptr] = it->first;
      stats_.in_use += it->first;
      free_blocks_.erase(it);
    }
  }
  if (ptr == nullptr) {
    ptr = allocate_raw_locked(size);
    live_[ptr] = size;
    stats_.in_use += size;
  }
  if (stats_.in_use > stats_.peak) stats_.peak = stats_.in_use;
  unpoison_host(device_, ptr, bytes);
  poison_host(device_, static_cast<char*>(ptr) + bytes, live_[ptr] - bytes);
  return ptr;
}

void* Allocator::allocate_raw_locked(std::size_t size) {
  // Cached blocks count against the cap too: give them back before going over it.
  if (limit_ != 0 && stats_.in_use + stats_.cached + size > limit_) release_cached_locked();
  if (cache_ == BlockCache::ExactSize && stats_.cached > stats_.in_use) release_cached_locked();
  ++stats_.raw_calls;
  count_allocation();
  void* ptr = raw_->allocate(size);
  if (ptr == nullptr && stats_.cached > 0) {
    release_cached_locked();
    ptr = raw_->allocate(size);
  }
  if (ptr == nullptr) {
    MT_FAIL_AS(OutOfMemoryError, device_.str(), ": out of memory: the device refused ", format_bytes(size),
               " (", format_bytes(stats_.in_use), " in use by meshtrain)");
  }
  return ptr;
}

void Allocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  MT_CHECK(it != live_.end(), device_.str(), ": freeing a pointer this allocator did not hand out");
  const std::size_t size = it->second;
  live_.erase(it);
  stats_.in_use -= size;
  if (cache_ != BlockCache::Off) {
    poison_host(device_, ptr, size);
    free_blocks_.emplace(size, ptr);
    stats_.cached += size;
  } else {
    unpoison_host(device_, ptr, size);
    raw_->release(ptr);
  }
}

void Allocator::release_cached() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

void Allocator::release_cached_locked() {
  for (auto& [size, ptr] : free_blocks_) {
    unpoison_host(device_, ptr, size);
    raw_->release(ptr);
  }
  free_blocks_.clear();
  stats_.cached = 0;
}

void Allocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak = stats_.in_use;
}

MemoryStats Allocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace mt
