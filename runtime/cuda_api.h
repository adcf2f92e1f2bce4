// The CUDA runtime as meshtrain uses it: a few plain functions, implemented in runtime/cuda/ when
// the CUDA backend is built and by runtime/cuda_stub.cpp (which throws) when it is not. Nothing
// above the runtime includes CUDA headers or branches on the build.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/device.h"

namespace mt::cuda {

bool compiled();
// Number of usable GPUs; 0 with *why set when there is no driver, no device or no CUDA build.
int device_count(std::string* why);
DeviceProperties properties(int index);
void set_device(int index);
void synchronize_device();  // waits for every stream of the current device

void* malloc_device(std::size_t bytes);  // returns nullptr when the device is out of memory
void free_device(void* ptr);
void* malloc_pinned(std::size_t bytes);
void free_pinned(void* ptr);

using StreamHandle = void*;  // cudaStream_t
using EventHandle = void*;   // cudaEvent_t
StreamHandle create_stream();
void destroy_stream(StreamHandle stream);
void synchronize_stream(StreamHandle stream);
EventHandle create_event();
void destroy_event(EventHandle event);
void record_event(EventHandle event, StreamHandle stream);
bool query_event(EventHandle event);
void synchronize_event(EventHandle event);
void stream_wait_event(StreamHandle stream, EventHandle event);

// Copies bytes between any two of host and device memory, ordered on the stream.
void copy_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream);

}  // namespace mt::cuda
