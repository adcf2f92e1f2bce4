// What the device layer did, counted on every backend so that a CPU run shows what a GPU step would
// cost: allocations that reached the raw allocator (malloc, cudaMalloc), host synchronisations (the
// host waiting for a stream, an event, a reduction's result or a copy to or from host memory),
// launches (an op call: a kernel launch on CUDA, an OpenMP loop or BLAS call on the CPU) and bytes
// copied between host memory and a device tensor. On the CPU the waits cost nothing and the copies
// are memmoves, but they are counted where CUDA would pay for them. Process-wide (a rank is a
// process); communication waits are comm/'s and not counted here, but the MPI backend's staging of
// device tensors is: its pinned buffers as allocations, its device drains and event waits as host
// syncs (comm/mpi_communicator.cpp, comm/staging_pool.h).
// defines: DeviceCounters, device_counters, count_allocation, count_host_sync, count_launch, count_copy
#pragma once

#include <cstdint>

namespace mt {

struct DeviceCounters {
  std::uint64_t allocations = 0;
  std::uint64_t host_syncs = 0;
  std::uint64_t launches = 0;
  std::uint64_t copy_bytes = 0;

  DeviceCounters operator-(const DeviceCounters& before) const {
    return {allocations - before.allocations, host_syncs - before.host_syncs, launches - before.launches,
            copy_bytes - before.copy_bytes};
  }
  DeviceCounters& operator+=(const DeviceCounters& more) {
    allocations += more.allocations;
    host_syncs += more.host_syncs;
    launches += more.launches;
    copy_bytes += more.copy_bytes;
    return *this;
  }
  bool operator==(const DeviceCounters&) const = default;
};

// The counts so far in this process.
DeviceCounters device_counters();

void count_allocation();
void count_host_sync();
void count_launch();
void count_copy(std::uint64_t bytes);

}  // namespace mt
