#include "runtime/context.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>

#include "runtime/backend.h"
#include "runtime/cuda_api.h"
#include "runtime/error.h"
#include "runtime/gemm.h"

namespace mt {
namespace {
std::shared_ptr<Allocator> make_allocator(const DeviceOptions& options) {
  // Freed blocks are kept for reuse on both devices. On the host, glibc hands blocks past its mmap
  // threshold (32 MiB at most) back to the kernel on free, so without the cache every step faulted
  // in and zeroed its logits chunk and attention probabilities again (a tenth of a GPT-2 step). The
  // host reuses a block for its own size only: the bytes in use, and the peaks the memory model is
  // checked against, stay what tensors asked for.
  if (options.device.is_cpu())
    return std::make_shared<Allocator>(options.device, make_host_raw_memory(), options.memory_limit,
                                       BlockCache::ExactSize);
  return std::make_shared<Allocator>(options.device, make_cuda_raw_memory(options.device.index),
                                     options.memory_limit, BlockCache::UpToTwice);
}

DeviceOptions checked(DeviceOptions options) {
  MT_CHECK(options.cpu_threads >= 1, "cpu threads must be at least 1, not ", options.cpu_threads);
  if (options.device.is_cuda()) cuda::set_device(options.device.index);
  return options;
}
}  // namespace

int default_cpu_threads(int ranks_on_node) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<int>(std::max<long>(1, cores / std::max(1, ranks_on_node)));
}

DeviceContext::DeviceContext(const DeviceOptions& options)
    : options_(checked(options)), allocator_(make_allocator(options_)), stream_(options_.device),
      cuda_kernels_(resolve_cuda_kernels(options_.device.is_cuda(), options_.cuda_kernels)) {
  // Thread counts are per process; one context per rank sets them once.
  omp_set_num_threads(options_.cpu_threads);
}

DeviceContext::~DeviceContext() {
  if (blas_handle_ != nullptr) backend::Cuda::destroy_blas(blas_handle_);
}

void* DeviceContext::blas_handle() {
  if (options_.device.is_cuda() && blas_handle_ == nullptr) {
    blas_handle_ = backend::Cuda::create_blas(options_.device.index, stream_.handle(),
                                            cuda_gemm_path_from_env() == CudaGemmPath::CublasLt);
  }
  return blas_handle_;
}

}  // namespace mt
