// Everything a rank computes with, passed explicitly: its device, allocator (with cap), compute
// stream, BLAS handle and CPU thread count.
// defines: DeviceOptions, DeviceContext, default_cpu_threads
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "runtime/allocator.h"
#include "runtime/cuda_kernel_choice.h"
#include "runtime/device.h"
#include "runtime/stream.h"

namespace mt {

struct DeviceOptions {
  Device device = Device::cpu();
  std::size_t memory_limit = 0;  // bytes; 0: no cap
  int cpu_threads = 1;           // threads for CPU kernels and OpenBLAS
  std::optional<CudaKernels> cuda_kernels = std::nullopt;  // unset: from MESHTRAIN_CUDA_KERNELS
};

// Cores of the node shared among the ranks on it, at least one each.
int default_cpu_threads(int ranks_on_node);

class DeviceContext {
 public:
  explicit DeviceContext(const DeviceOptions& options);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  Device device() const { return options_.device; }
  const DeviceOptions& options() const { return options_; }
  Allocator& allocator() { return *allocator_; }
  const std::shared_ptr<Allocator>& shared_allocator() const { return allocator_; }
  Stream& stream() { return stream_; }
  int cpu_threads() const { return options_.cpu_threads; }
  // The GPU-shaped kernels in use (all off on the CPU); settable so a test runs both on one GPU.
  CudaKernels cuda_kernels() const { return cuda_kernels_; }
  void set_cuda_kernels(CudaKernels k) { cuda_kernels_ = options_.device.is_cuda() ? k : CudaKernels{}; }
  // The CUDA BLAS state (runtime/cuda/gemm.cu), created on first use with the GEMM path
  // MESHTRAIN_GEMM names then (runtime/gemm.h); nullptr on the CPU.
  void* blas_handle();
  void synchronize() { stream_.synchronize(); }

 private:
  DeviceOptions options_;
  std::shared_ptr<Allocator> allocator_;
  Stream stream_;
  void* blas_handle_ = nullptr;
  CudaKernels cuda_kernels_;
};

}  // namespace mt
