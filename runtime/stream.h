// Streams and events. On CUDA they wrap cudaStream_t/cudaEvent_t. On the CPU work runs in order on
// the calling thread, so a stream is always drained and an event is complete once recorded.
// defines: Stream, Event
#pragma once

#include "runtime/cuda_api.h"
#include "runtime/device.h"

namespace mt {

class Stream {
 public:
  explicit Stream(Device device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device device() const { return device_; }
  cuda::StreamHandle handle() const { return handle_; }  // nullptr on the CPU
  void synchronize() const;

 private:
  Device device_;
  cuda::StreamHandle handle_ = nullptr;
};

class Event {
 public:
  explicit Event(Device device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  bool query() const;                 // has everything before the record finished?
  void synchronize() const;           // blocks the host until it has
  void block(const Stream& stream) const;  // later work on `stream` waits for this event

 private:
  Device device_;
  cuda::EventHandle handle_ = nullptr;
  bool recorded_ = false;
};

}  // namespace mt
