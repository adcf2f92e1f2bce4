#include "comm/staging_pool.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/device_counters.h"
#include "runtime/error.h"

namespace mt {

struct StagingPool::State {
  struct Fenced {
    PinnedHostBuffer buffer;
    std::shared_ptr<const StagingFence> fence;
  };

  Device device;
  std::size_t min_bytes;
  mutable std::mutex mutex;
  std::map<std::size_t, std::vector<PinnedHostBuffer>> free;  // by size class
  std::vector<Fenced> pending;
  std::uint64_t allocations = 0;
  std::size_t in_use = 0;

  State(Device d, std::size_t min) : device(d), min_bytes(min) {}

  // The device may still copy into or out of a pending buffer: wait before freeing it.
  ~State() {
    for (Fenced& f : pending) {
      try {
        f.fence->wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "meshtrain: warning: freeing a staging buffer after a failed wait: %s\n", e.what());
      }
    }
  }

  void reclaim_locked() {
    std::erase_if(pending, [&](Fenced& f) {
      if (!f.fence->done()) return false;
      free[f.buffer.bytes()].push_back(std::move(f.buffer));
      return true;
    });
  }
};

StagingPool::StagingPool(Device device, std::size_t min_bytes)
    : state_(std::make_shared<State>(device, std::bit_ceil(std::max<std::size_t>(min_bytes, 1)))) {}

std::size_t StagingPool::size_class(std::size_t bytes, std::size_t min_bytes) {
  const std::size_t at_least = std::max(bytes, min_bytes);
  MT_CHECK(at_least <= (std::size_t{1} << 62), "staging buffer of ", bytes, " bytes");
  return std::bit_ceil(at_least);
}

StagingPool::Lease StagingPool::acquire(std::size_t bytes) {
  Lease lease;
  if (bytes == 0) return lease;
  const std::size_t cls = size_class(bytes, state_->min_bytes);
  {
    std::lock_guard lock(state_->mutex);
    state_->reclaim_locked();
    auto it = state_->free.find(cls);
    if (it != state_->free.end() && !it->second.empty()) {
      lease.buffer_ = std::move(it->second.back());
      it->second.pop_back();
      ++state_->in_use;
      lease.state_ = state_;
      return lease;
    }
  }
  // Outside the lock: cudaMallocHost is slow, and the engine thread may be releasing meanwhile.
  PinnedHostBuffer fresh(cls, state_->device);
  count_allocation();
  std::lock_guard lock(state_->mutex);
  ++state_->allocations;
  ++state_->in_use;
  lease.buffer_ = std::move(fresh);
  lease.state_ = state_;
  return lease;
}

void StagingPool::reclaim() {
  std::lock_guard lock(state_->mutex);
  state_->reclaim_locked();
}

StagingPool::Stats StagingPool::stats() const {
  std::lock_guard lock(state_->mutex);
  Stats s;
  s.allocations = state_->allocations;
  s.in_use = state_->in_use;
  s.pending = state_->pending.size();
  for (const auto& [cls, buffers] : state_->free) {
    s.cached += buffers.size();
    s.cached_bytes += cls * buffers.size();
  }
  return s;
}

Device StagingPool::device() const { return state_->device; }

StagingPool::Lease& StagingPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

void StagingPool::Lease::release() {
  if (!state_) return;
  std::shared_ptr<State> state = std::move(state_);
  std::lock_guard lock(state->mutex);
  --state->in_use;
  state->free[buffer_.bytes()].push_back(std::move(buffer_));
}

void StagingPool::Lease::release_after(std::shared_ptr<const StagingFence> fence) {
  if (!state_) return;
  MT_CHECK(fence != nullptr, "a staging buffer released after no fence");
  std::shared_ptr<State> state = std::move(state_);
  std::lock_guard lock(state->mutex);
  --state->in_use;
  state->pending.push_back(State::Fenced{std::move(buffer_), std::move(fence)});
}

}  // namespace mt
