#include "runtime/stream.h"

#include <utility>

#include "runtime/device_counters.h"
#include "runtime/error.h"

namespace mt {

Stream::Stream(Device device) : device_(device) {
  if (device_.is_cuda()) {
    cuda::set_device(device_.index);
    handle_ = cuda::create_stream();
  }
}

Stream::~Stream() {
  if (handle_ != nullptr) cuda::destroy_stream(handle_);
}

Stream::Stream(Stream&& other) noexcept
    : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cuda::destroy_stream(handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  count_host_sync();
  if (handle_ != nullptr) cuda::synchronize_stream(handle_);
}

Event::Event(Device device) : device_(device) {
  if (device_.is_cuda()) {
    cuda::set_device(device_.index);
    handle_ = cuda::create_event();
  }
}

Event::~Event() {
  if (handle_ != nullptr) cuda::destroy_event(handle_);
}

Event::Event(Event&& other) noexcept
    : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)), recorded_(other.recorded_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cuda::destroy_event(handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    recorded_ = other.recorded_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  MT_CHECK(stream.device() == device_, "event of ", device_.str(), " recorded on a stream of ",
           stream.device().str());
  if (handle_ != nullptr) cuda::record_event(handle_, stream.handle());
  recorded_ = true;
}

bool Event::query() const {
  if (!recorded_) return false;
  return handle_ == nullptr || cuda::query_event(handle_);
}

void Event::synchronize() const {
  MT_CHECK(recorded_, "waiting on an event that was never recorded");
  count_host_sync();
  if (handle_ != nullptr) cuda::synchronize_event(handle_);
}

void Event::block(const Stream& stream) const {
  MT_CHECK(recorded_, "waiting on an event that was never recorded");
  if (handle_ != nullptr && stream.handle() != nullptr) cuda::stream_wait_event(stream.handle(), handle_);
}

}  // namespace mt
