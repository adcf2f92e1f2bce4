#include "runtime/tensor.h"

#include <cstdint>
#include <cstring>
#include <sstream>

#include "runtime/cuda_api.h"
#include "runtime/device_counters.h"

namespace mt {
namespace {
// For messages about absurd ranges: a + b without signed overflow.
std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? (b > 0 ? INT64_MAX : INT64_MIN) : sum;
}
}  // namespace

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    MT_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
    MT_CHECK(!__builtin_mul_overflow(n, d, &n), "shape ", shape_str(shape), " has more than 2^63 elements");
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

Storage::Storage(std::shared_ptr<Allocator> allocator, std::size_t bytes, bool allocate)
    : allocator_(std::move(allocator)), data_(allocate ? allocator_->allocate(bytes) : nullptr), bytes_(bytes) {}

Storage::~Storage() {
  if (data_ != nullptr) allocator_->deallocate(data_);
}

void Storage::release() {
  if (data_ == nullptr) return;
  allocator_->deallocate(data_);
  data_ = nullptr;
}

void Storage::acquire() {
  if (data_ != nullptr || bytes_ == 0) return;
  data_ = allocator_->allocate(bytes_);
}

void* Storage::resolve(std::size_t offset, std::size_t bytes) const {
  if (bytes == 0) return nullptr;
  MT_FAIL("read of ", bytes, " bytes at ", offset, " of a storage of ", bytes_,
          " whose memory is released (a ZeRO-2/3 unit's parameters or gradients outside its use)");
}

Tensor Tensor::make(Shape shape, DType dtype, DeviceContext& ctx, bool allocate) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  MT_CHECK(static_cast<std::uint64_t>(t.numel_) <= SIZE_MAX / dtype_size(dtype), "shape ", shape_str(shape),
           " of ", dtype_name(dtype), " does not fit in memory");
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(ctx.shared_allocator(), t.nbytes(), allocate);
  return t;
}

Tensor Tensor::empty(Shape shape, DType dtype, DeviceContext& ctx) { return make(std::move(shape), dtype, ctx, true); }

Tensor Tensor::released(Shape shape, DType dtype, DeviceContext& ctx) {
  return make(std::move(shape), dtype, ctx, false);
}

Tensor Tensor::zeros(Shape shape, DType dtype, DeviceContext& ctx) {
  Tensor t = empty(std::move(shape), dtype, ctx);
  if (ctx.device().is_cpu()) {
    std::memset(t.data(), 0, t.nbytes());
  } else {
    std::vector<unsigned char> zero(t.nbytes(), 0);
    t.copy_from_host(zero.data(), zero.size(), ctx.stream());
    ctx.stream().synchronize();
  }
  return t;
}

Device Tensor::device() const {
  MT_CHECK(defined(), "undefined tensor has no device");
  return storage_->device();
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

void* Tensor::data() const {
  MT_CHECK(defined(), "access to an undefined tensor");
  return storage_->address(offset_bytes_, nbytes());
}

void Tensor::release_memory() const {
  MT_CHECK(defined(), "release of an undefined tensor");
  storage_->release();
}

void Tensor::acquire_memory() const {
  MT_CHECK(defined(), "acquire of an undefined tensor");
  storage_->acquire();
}

Tensor Tensor::reshape(Shape shape) const {
  MT_CHECK(shape_numel(shape) == numel_, "cannot reshape ", describe(), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::flat_slice(std::int64_t offset, std::int64_t count) const {
  MT_CHECK(offset >= 0 && count >= 0 && offset <= numel_ && count <= numel_ - offset, "slice [", offset, ", ",
           saturating_add(offset, count), ") out of range for ", describe());
  Tensor t = *this;
  t.offset_bytes_ += static_cast<std::size_t>(offset) * dtype_size(dtype_);
  t.shape_ = {count};
  t.numel_ = count;
  return t;
}

Tensor Tensor::narrow(std::int64_t start, std::int64_t length) const {
  MT_CHECK(!shape_.empty(), "cannot narrow a scalar tensor");
  MT_CHECK(start >= 0 && length >= 0 && start <= shape_[0] && length <= shape_[0] - start, "rows [", start, ", ",
           saturating_add(start, length), ") out of range for ", describe());
  const std::int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  Tensor t = flat_slice(start * row, length * row);
  Shape shape = shape_;
  shape[0] = length;
  t.shape_ = std::move(shape);
  return t;
}

// host_memory: one end is host memory the caller may reuse at once (or a tensor on the CPU while
// the other is on a GPU). CUDA waits for such a copy (the host buffers are pageable), so it counts as
// a copy and a host wait on every backend (runtime/device_counters.h).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes,
                const Stream& stream, bool host_memory) {
  if (bytes == 0) return;
  if (host_memory) {
    count_copy(bytes);
    count_host_sync();
  }
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
  cuda::copy_async(dst, src, bytes, stream.handle());
  if (dst_device.is_cpu() || src_device.is_cpu()) cuda::synchronize_stream(stream.handle());
}

void Tensor::copy_from(const Tensor& src, const Stream& stream) {
  MT_CHECK(src.dtype_ == dtype_ && src.numel_ == numel_, "copy from ", src.describe(), " into ", describe());
  copy_bytes(data(), device(), src.data(), src.device(), nbytes(), stream, device() != src.device());
}

void Tensor::copy_from_host(const void* src, std::size_t bytes, const Stream& stream) {
  MT_CHECK(bytes == nbytes(), "copying ", bytes, " bytes into ", describe());
  copy_bytes(data(), device(), src, Device::cpu(), bytes, stream, true);
}

void Tensor::read_back(void* dst) const {
  if (device().is_cuda()) {
    cuda::set_device(device().index);
    cuda::synchronize_device();  // the whole device drains first, then the copy (one wait counted)
  }
  copy_to_host(dst, nbytes(), Stream(device()));
}

void Tensor::upload(const PinnedHostBuffer& src, std::size_t offset, const Stream& stream) {
  MT_CHECK(offset <= src.bytes() && nbytes() <= src.bytes() - offset, "uploading bytes [", offset, ", ",
           offset + nbytes(), ") of a ", src.bytes(), "-byte host buffer into ", describe());
  MT_CHECK(src.device() == device(), "a host buffer for ", src.device().str(), " uploaded into ", describe());
  if (nbytes() == 0) return;
  count_copy(nbytes());
  if (device().is_cpu()) {
    std::memmove(data(), src.data() + offset, nbytes());
    return;
  }
  cuda::copy_async(data(), src.data() + offset, nbytes(), stream.handle());
}

void Tensor::copy_to_host(void* dst, std::size_t bytes, const Stream& stream) const {
  MT_CHECK(bytes == nbytes(), "copying ", describe(), " into ", bytes, " bytes");
  copy_bytes(dst, Device::cpu(), data(), device(), bytes, stream, true);
}

}  // namespace mt
