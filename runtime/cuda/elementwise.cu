// The elementwise family on CUDA (runtime/ops/elementwise.h): the same functors as runtime/cpu/elementwise.cpp (runtime/ops/elementwise.h), so each element
// is computed by the same function on both backends. Elementwise kernels are grid-stride loops;
// reductions follow the fixed order of runtime/ops/elementwise.h (one thread per kReduceChunk elements summing in
// index order, then one thread folding the chunk results in order), so they match the CPU bit
// for bit. Work is queued on the given stream; the current device must be the stream's.
// BroadcastRows and ColumnSum run one thread per unit (runtime/cuda/units.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/units.cuh"

namespace mt::backend {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; larger inputs loop (grid stride).
constexpr std::int64_t kMaxBlocks = 4096;

unsigned int blocks_for(std::int64_t n) {
  return static_cast<unsigned int>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

cudaStream_t to_stream(cuda::StreamHandle s) { return static_cast<cudaStream_t>(s); }

__device__ std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

template <class T>
__global__ void fill_kernel(T* x, std::int64_t n, T value) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) x[i] = value;
}

// out may alias a or b: each element is read and written by the same thread.
template <class T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) out[i] = apply_binary(op, a[i], b[i]);
}

template <class T>
__global__ void scale_kernel(T* x, std::int64_t n, double alpha) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) x[i] = scale_one(x[i], alpha);
}

template <class S, class D>
__global__ void cast_kernel(const S* src, D* dst, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) dst[i] = narrow_to<D>(widen(src[i]));
}

// partial[c] = the chunk c of x reduced in index order, exactly as Cpu::reduce does.
template <class T>
__global__ void reduce_chunks_kernel(ReduceKind kind, const T* x, std::int64_t n, std::int64_t chunks,
                                     double* partial) {
  for (std::int64_t c = first_index(); c < chunks; c += grid_stride()) {
    double acc = reduce_identity(kind);
    const std::int64_t begin = c * kReduceChunk;
    const std::int64_t end = begin + kReduceChunk < n ? begin + kReduceChunk : n;
    for (std::int64_t i = begin; i < end; ++i) acc = reduce_step(kind, acc, x[i]);
    partial[c] = acc;
  }
}

// One thread folds the chunk results in order.
__global__ void reduce_fold_kernel(ReduceKind kind, const double* partial, std::int64_t chunks, double* result) {
  double acc = reduce_identity(kind);
  for (std::int64_t c = 0; c < chunks; ++c) acc = reduce_combine(kind, acc, partial[c]);
  *result = acc;
}

void check_launch(const char* kernel) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching ", kernel, ": ", cuda::cuda_error_text(rc));
}

// Device scratch memory from the stream-ordered allocator, returned on the stream even when a
// launch in between throws.
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    MT_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream_));
  }
  ~StreamScratch() { MT_CUDA_CHECK_NOTHROW(cudaFreeAsync(ptr_, stream_)); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  double* data() const { return static_cast<double*>(ptr_); }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

}  // namespace

void Cuda::fill(void* x, DType t, std::int64_t n, double value, cuda::StreamHandle s) {
  if (n <= 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    // The value is narrowed once on the host, as the CPU backend does.
    fill_kernel<T><<<blocks_for(n), kThreads, 0, to_stream(s)>>>(static_cast<T*>(x), n, narrow_to<T>(value));
  });
  check_launch("fill_kernel");
}

void Cuda::binary(BinaryOp op, DType t, const void* a, const void* b, void* out, std::int64_t n,
                  cuda::StreamHandle s) {
  if (n <= 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    binary_kernel<T><<<blocks_for(n), kThreads, 0, to_stream(s)>>>(op, static_cast<const T*>(a),
                                                                    static_cast<const T*>(b), static_cast<T*>(out), n);
  });
  check_launch("binary_kernel");
}

void Cuda::scale(void* x, DType t, std::int64_t n, double alpha, cuda::StreamHandle s) {
  if (n <= 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T><<<blocks_for(n), kThreads, 0, to_stream(s)>>>(static_cast<T*>(x), n, alpha);
  });
  check_launch("scale_kernel");
}

void Cuda::cast(const void* src, DType from, void* dst, DType to, std::int64_t n, cuda::StreamHandle s) {
  if (n <= 0) return;
  dispatch_dtype(from, [&](auto from_tag) {
    using S = decltype(from_tag);
    dispatch_dtype(to, [&](auto to_tag) {
      using D = decltype(to_tag);
      cast_kernel<S, D><<<blocks_for(n), kThreads, 0, to_stream(s)>>>(static_cast<const S*>(src),
                                                                     static_cast<D*>(dst), n);
    });
  });
  check_launch("cast_kernel");
}

double Cuda::reduce(ReduceKind kind, const void* x, DType t, std::int64_t n, cuda::StreamHandle s) {
  if (n <= 0) return reduce_identity(kind);  // what the CPU returns for no chunks
  const cudaStream_t stream = to_stream(s);
  const std::int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  double result = 0;
  {
    // chunks partial results, then the final one.
    StreamScratch scratch(static_cast<std::size_t>(chunks + 1) * sizeof(double), stream);
    dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      reduce_chunks_kernel<T><<<blocks_for(chunks), kThreads, 0, stream>>>(kind, static_cast<const T*>(x), n,
                                                                          chunks, scratch.data());
    });
    check_launch("reduce_chunks_kernel");
    reduce_fold_kernel<<<1, 1, 0, stream>>>(kind, scratch.data(), chunks, scratch.data() + chunks);
    check_launch("reduce_fold_kernel");
    MT_CUDA_CHECK(cudaMemcpyAsync(&result, scratch.data() + chunks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  }
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}
}  // namespace mt::backend

namespace mt::backend {

MT_ELEMENTWISE_UNIT_OPS(MT_CUDA_UNIT_RUN)

}  // namespace mt::backend
