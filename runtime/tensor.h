// Tensor: a contiguous, row-major array of fp32, bf16 or int32 on one device. A cheap handle:
// copies share storage, and views (reshape, flat slices) share it too.
// defines: Shape, Tensor, copy_bytes
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/context.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/pinned_buffer.h"

namespace mt {

using Shape = std::vector<std::int64_t>;
std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

// Owns one allocation; freed back to its allocator when the last tensor using it goes.
// ZeRO-2/3 hold a unit's full parameters and gradients only while it is used: release() gives the
// memory back while views stay valid handles (reading one then fails with an Error naming the
// storage) until acquire() takes fresh, uninitialized memory. A storage may start released.
class Storage {
 public:
  Storage(std::shared_ptr<Allocator> allocator, std::size_t bytes, bool allocate = true);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return address(0, bytes_); }
  // Where bytes [offset, offset + bytes) live: Error when released.
  void* address(std::size_t offset, std::size_t bytes) const {
    if (data_ != nullptr) return static_cast<char*>(data_) + offset;
    return resolve(offset, bytes);
  }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return allocator_->device(); }

  bool resident() const { return data_ != nullptr || bytes_ == 0; }
  void release();  // no-op when released
  void acquire();  // no-op when resident

 private:
  void* resolve(std::size_t offset, std::size_t bytes) const;  // a released storage's address

  std::shared_ptr<Allocator> allocator_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(Shape shape, DType dtype, DeviceContext& ctx);
  static Tensor zeros(Shape shape, DType dtype, DeviceContext& ctx);
  // No memory until acquire_memory() (ZeRO-2/3's per-unit buffers, taken when a unit is used).
  static Tensor released(Shape shape, DType dtype, DeviceContext& ctx);
  template <class T>
  static Tensor from_host(std::span<const T> values, Shape shape, DeviceContext& ctx) {
    MT_CHECK(shape_numel(shape) == static_cast<std::int64_t>(values.size()), "shape ", shape_str(shape),
             " does not hold ", values.size(), " values");
    Tensor t = empty(std::move(shape), dtype_of<T>::value, ctx);
    t.copy_from_host(values.data(), values.size_bytes(), ctx.stream());
    return t;
  }
  template <class T>
  static Tensor from_host(const std::vector<T>& values, Shape shape, DeviceContext& ctx) {
    return from_host(std::span<const T>(values), std::move(shape), ctx);
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t rank() const { return shape_.size(); }
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  std::string describe() const;  // "fp32[4, 8] on cpu"

  void* data() const;
  template <class T>
  T* data_as() const {
    MT_CHECK(dtype_of<T>::value == dtype_, "tensor is ", dtype_name(dtype_), ", read as ",
             dtype_name(dtype_of<T>::value));
    return static_cast<T*>(data());
  }

  // Views sharing this tensor's storage.
  Tensor reshape(Shape shape) const;
  Tensor flat_slice(std::int64_t offset, std::int64_t count) const;  // 1-D view of elements
  Tensor narrow(std::int64_t start, std::int64_t length) const;      // rows [start, start+length) of dim 0
  bool same_storage(const Tensor& other) const { return storage_ == other.storage_; }

  // The whole storage's memory (every view of it): see Storage. For ZeRO-2/3's per-unit buffers.
  void release_memory() const;
  void acquire_memory() const;
  bool resident() const { return storage_ && storage_->resident(); }

  // Copies between any two devices, ordered on `stream` (the destination's or the source's).
  void copy_from(const Tensor& src, const Stream& stream);
  void copy_from_host(const void* src, std::size_t bytes, const Stream& stream);
  void copy_to_host(void* dst, std::size_t bytes, const Stream& stream) const;
  // Bytes [offset, offset + nbytes()) of `src` into this tensor, queued on `stream` with no host
  // wait: src must stay unchanged until the stream has run the copy (record an Event after it).
  void upload(const PinnedHostBuffer& src, std::size_t offset, const Stream& stream);
  // Synchronous read-back, for tests and printing: waits for all work queued on the device first.
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> out(static_cast<std::size_t>(numel_));
    MT_CHECK(dtype_of<T>::value == dtype_, "tensor is ", dtype_name(dtype_), ", read as ",
             dtype_name(dtype_of<T>::value));
    read_back(out.data());
    return out;
  }

 private:
  static Tensor make(Shape shape, DType dtype, DeviceContext& ctx, bool allocate);
  void read_back(void* dst) const;

  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::F32;
};

// Copies bytes between host and device memory in any direction; synchronous on the CPU, and on CUDA
// whenever one end is on the host. host_memory: count it as a host copy and wait
// (runtime/device_counters.h); the tensor copies set it, communication's staging does not (comm/
// counts its own waits).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes,
                const Stream& stream, bool host_memory = false);

}  // namespace mt
