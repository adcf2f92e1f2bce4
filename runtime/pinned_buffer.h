// Host memory a device can copy from and to without the host waiting: page-locked (cudaMallocHost)
// for a GPU, plain memory for the CPU device. The token ids of a step and communication's staging
// live in one.
// defines: PinnedHostBuffer
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/device.h"

namespace mt {

class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  // `bytes` of host memory for copies to and from `device` (uninitialized).
  PinnedHostBuffer(std::size_t bytes, Device device);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  char* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void free() noexcept;

  Device device_ = Device::cpu();
  char* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace mt
