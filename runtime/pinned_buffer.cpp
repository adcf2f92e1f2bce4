#include "runtime/pinned_buffer.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <utility>

#include "runtime/cuda_api.h"

namespace mt {

PinnedHostBuffer::PinnedHostBuffer(std::size_t bytes, Device device) : device_(device), bytes_(bytes) {
  if (bytes == 0) return;
  if (device.is_cuda()) {
    cuda::set_device(device.index);
    data_ = static_cast<char*>(cuda::malloc_pinned(bytes));
  } else {
    data_ = static_cast<char*>(std::malloc(bytes));
    if (data_ == nullptr) throw std::bad_alloc();
  }
}

PinnedHostBuffer::~PinnedHostBuffer() { free(); }

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : device_(other.device_), data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    free();
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// Often freed on another thread than the one that allocated it (communication's engine): select the
// device first, or the CUDA runtime would open a context on GPU 0 for that thread.
void PinnedHostBuffer::free() noexcept {
  if (data_ == nullptr) return;
  if (device_.is_cuda()) {
    try {
      cuda::set_device(device_.index);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrain: warning: %s\n", e.what());
    }
    cuda::free_pinned(data_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
}

}  // namespace mt
