// runtime/cuda_api.h over the CUDA runtime API. Every call is checked and throws mt::Error with
// the call, the CUDA error and the place, except:
//  - device_count, which never throws: no driver or no GPU is a normal outcome (the caller falls
//    back to the CPU), reported as 0 devices and a one-line reason;
//  - the release functions (free_device, free_pinned, destroy_stream, destroy_event), which run
//    in destructors: they log a failure to stderr instead of throwing (see cuda_check.h).
#include <cuda_runtime_api.h>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda_api.h"

namespace mt::cuda {
namespace {
cudaStream_t to_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t to_event(EventHandle e) { return static_cast<cudaEvent_t>(e); }
}  // namespace

bool compiled() { return true; }

int device_count(std::string* why) try {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // the failure is expected here; keep it from surfacing later
    if (why != nullptr) *why = "cudaGetDeviceCount: " + cuda_error_text(rc);
    return 0;
  }
  if (count <= 0) {
    if (why != nullptr) *why = "cudaGetDeviceCount: the driver reports no CUDA device (check CUDA_VISIBLE_DEVICES)";
    return 0;
  }
  if (why != nullptr) why->clear();
  return count;
} catch (...) {  // only a failed string allocation can get here; still no GPU to offer
  return 0;
}

DeviceProperties properties(int index) {
  // Only what needs no CUDA context: querying free memory would create a context on every GPU
  // of the node in every rank (hundreds of MiB each). free_memory stays 0 (unknown).
  cudaDeviceProp prop{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  char bus_id[64] = {};
  MT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof(bus_id)), index));
  DeviceProperties p;
  p.device = Device::cuda(index);
  p.name = prop.name;
  p.total_memory = prop.totalGlobalMem;
  p.compute_units = prop.multiProcessorCount;
  p.pci_bus_id = bus_id;
  return p;
}

void set_device(int index) { MT_CUDA_CHECK(cudaSetDevice(index)); }

void synchronize_device() { MT_CUDA_CHECK(cudaDeviceSynchronize()); }

void* malloc_device(std::size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t rc = cudaMalloc(&ptr, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is not sticky: clear it and let the caller decide
    return nullptr;
  }
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    MT_FAIL("CUDA error in cudaMalloc of ", bytes, " bytes: ", cuda_error_text(rc));
  }
  return ptr;
}

void free_device(void* ptr) {
  if (ptr != nullptr) MT_CUDA_CHECK_NOTHROW(cudaFree(ptr));
}

void* malloc_pinned(std::size_t bytes) {
  void* ptr = nullptr;
  MT_CUDA_CHECK(cudaMallocHost(&ptr, bytes));
  return ptr;
}

void free_pinned(void* ptr) {
  if (ptr != nullptr) MT_CUDA_CHECK_NOTHROW(cudaFreeHost(ptr));
}

StreamHandle create_stream() {
  cudaStream_t stream = nullptr;
  // Non-blocking: no implicit synchronization with the legacy default stream.
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

void destroy_stream(StreamHandle stream) { MT_CUDA_CHECK_NOTHROW(cudaStreamDestroy(to_stream(stream))); }

void synchronize_stream(StreamHandle stream) { MT_CUDA_CHECK(cudaStreamSynchronize(to_stream(stream))); }

EventHandle create_event() {
  cudaEvent_t event = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

void destroy_event(EventHandle event) { MT_CUDA_CHECK_NOTHROW(cudaEventDestroy(to_event(event))); }

void record_event(EventHandle event, StreamHandle stream) {
  MT_CUDA_CHECK(cudaEventRecord(to_event(event), to_stream(stream)));
}

bool query_event(EventHandle event) {
  const cudaError_t rc = cudaEventQuery(to_event(event));
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not yet" is an answer, not an error
    return false;
  }
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    MT_FAIL("CUDA error in cudaEventQuery: ", cuda_error_text(rc));
  }
  return true;
}

void synchronize_event(EventHandle event) { MT_CUDA_CHECK(cudaEventSynchronize(to_event(event))); }

void stream_wait_event(StreamHandle stream, EventHandle event) {
  MT_CUDA_CHECK(cudaStreamWaitEvent(to_stream(stream), to_event(event), 0));
}

void copy_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream) {
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, to_stream(stream)));
}

}  // namespace mt::cuda
