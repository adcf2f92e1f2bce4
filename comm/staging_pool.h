// Pinned host buffers for staging device tensors through MPI, cached and reused so that a steady
// state of communication allocates nothing (cudaMallocHost takes milliseconds and stalls the
// device). Buffers come in size classes of powers of two bytes; a buffer is handed out to one
// lease at a time, and comes back either at once (release) or once a fence says the device has
// finished the copies into or out of it (release_after). Thread-safe: the engine thread releases
// what the caller's thread acquired. Each pool belongs to one communicator family and one device
// (comm/mpi_device_staging.h), never to the process.
// defines: StagingFence, StagingPool
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/device.h"
#include "runtime/pinned_buffer.h"

namespace mt {

// When the device is done with a buffer (an event after the last copy touching it).
class StagingFence {
 public:
  virtual ~StagingFence() = default;
  virtual bool done() const = 0;  // never blocks
  virtual void wait() const = 0;  // blocks until done
};

class StagingPool {
  struct State;

 public:
  struct Stats {
    std::uint64_t allocations = 0;  // buffers made (each reached the raw allocator)
    std::size_t in_use = 0;         // held by leases
    std::size_t pending = 0;        // released, waiting for their fence
    std::size_t cached = 0;         // free for the next acquire
    std::size_t cached_bytes = 0;
  };

  // One buffer, owned until released or destroyed (destroying it releases at once).
  class Lease {
   public:
    Lease() = default;
    ~Lease() { release(); }
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    char* data() const { return buffer_.data(); }
    std::size_t bytes() const { return buffer_.bytes(); }  // the size class: at least what was asked
    bool held() const { return state_ != nullptr; }
    // Nothing on the device touches the buffer any more: the next acquire may have it.
    void release();
    // A copy into or out of it may still run: it is reused once `fence` is done.
    void release_after(std::shared_ptr<const StagingFence> fence);

   private:
    friend class StagingPool;
    std::shared_ptr<State> state_;
    PinnedHostBuffer buffer_;
  };

  // Buffers of at least `min_bytes` (a power of two) for copies to and from `device`.
  explicit StagingPool(Device device, std::size_t min_bytes = 4096);
  // A buffer of at least `bytes`, from the cache where one of its class is free (a fenced one whose
  // fence is done counts as free), else newly allocated (count_allocation). 0 bytes: no buffer.
  Lease acquire(std::size_t bytes);
  // Moves fenced buffers whose fence is done to the cache (and drops the fences).
  void reclaim();
  Stats stats() const;
  Device device() const;

  // The smallest power of two >= max(bytes, min_bytes).
  static std::size_t size_class(std::size_t bytes, std::size_t min_bytes);

 private:
  std::shared_ptr<State> state_;  // shared with the leases: a lease may outlive the pool
};

}  // namespace mt
