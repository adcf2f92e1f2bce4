#include "runtime/device_counters.h"

#include <atomic>

namespace mt {
namespace {
// Relaxed: each is a tally read between steps, never used to order other memory.
std::atomic<std::uint64_t> allocations{0}, host_syncs{0}, launches{0}, copy_bytes{0};
}  // namespace

DeviceCounters device_counters() {
  return {allocations.load(std::memory_order_relaxed), host_syncs.load(std::memory_order_relaxed),
          launches.load(std::memory_order_relaxed), copy_bytes.load(std::memory_order_relaxed)};
}

void count_allocation() { allocations.fetch_add(1, std::memory_order_relaxed); }
void count_host_sync() { host_syncs.fetch_add(1, std::memory_order_relaxed); }
void count_launch() { launches.fetch_add(1, std::memory_order_relaxed); }
void count_copy(std::uint64_t bytes) { copy_bytes.fetch_add(bytes, std::memory_order_relaxed); }

}  // namespace mt
