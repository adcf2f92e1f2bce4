// Stands in for runtime/cuda/ when meshtrain is built without CUDA: discovery reports that no GPU
// can be used, and anything that would touch one throws, naming the missing build option. The one
// stub of the one seam (runtime/backend.h): every family's CUDA entry points are here.
#include "runtime/backend.h"
#include "runtime/cuda_api.h"
#include "runtime/error.h"

namespace mt {
namespace {
[[noreturn]] void not_built() {
  MT_FAIL("this meshtrain was built without the CUDA backend (configure with -DMESHTRAIN_CUDA=ON)");
}
}  // namespace

namespace cuda {
bool compiled() { return false; }
int device_count(std::string* why) {
  if (why != nullptr) *why = "meshtrain was built without CUDA";
  return 0;
}
DeviceProperties properties(int) { not_built(); }
void set_device(int) { not_built(); }
void synchronize_device() { not_built(); }
void* malloc_device(std::size_t) { not_built(); }
void free_device(void*) { not_built(); }
void* malloc_pinned(std::size_t) { not_built(); }
void free_pinned(void*) { not_built(); }
StreamHandle create_stream() { not_built(); }
void destroy_stream(StreamHandle) { not_built(); }
void synchronize_stream(StreamHandle) { not_built(); }
EventHandle create_event() { not_built(); }
void destroy_event(EventHandle) { not_built(); }
void record_event(EventHandle, StreamHandle) { not_built(); }
bool query_event(EventHandle) { not_built(); }
void synchronize_event(EventHandle) { not_built(); }
void stream_wait_event(StreamHandle, EventHandle) { not_built(); }
void copy_async(void*, const void*, std::size_t, StreamHandle) { not_built(); }
}  // namespace cuda

namespace backend {
void Cuda::fill(void*, DType, std::int64_t, double, cuda::StreamHandle) { not_built(); }
void Cuda::binary(BinaryOp, DType, const void*, const void*, void*, std::int64_t, cuda::StreamHandle) {
  not_built();
}
void Cuda::scale(void*, DType, std::int64_t, double, cuda::StreamHandle) { not_built(); }
void Cuda::cast(const void*, DType, void*, DType, std::int64_t, cuda::StreamHandle) { not_built(); }
double Cuda::reduce(ReduceKind, const void*, DType, std::int64_t, cuda::StreamHandle) { not_built(); }

#define MT_STUB_RUN(Op)                                                                 \
  void Cuda::run(const nn_math::Op<float>&, cuda::StreamHandle) { not_built(); }        \
  void Cuda::run(const nn_math::Op<bf16>&, cuda::StreamHandle) { not_built(); }
MT_UNIT_OPS(MT_STUB_RUN)
MT_STUB_RUN(LayerNormBackwardInput)
#undef MT_STUB_RUN
void Cuda::run(const nn_math::LayerNormBackwardParams<float>&, float*, cuda::StreamHandle) { not_built(); }
void Cuda::run(const nn_math::LayerNormBackwardParams<bf16>&, float*, cuda::StreamHandle) { not_built(); }
#define MT_STUB_FAST_RUN(Op, Family)                                                    \
  void Cuda::run_fast(const nn_math::Op<float>&, cuda::StreamHandle) { not_built(); }   \
  void Cuda::run_fast(const nn_math::Op<bf16>&, cuda::StreamHandle) { not_built(); }
MT_FAST_OPS(MT_STUB_FAST_RUN)
#undef MT_STUB_FAST_RUN

void* Cuda::create_blas(int, cuda::StreamHandle, bool) { not_built(); }
void Cuda::destroy_blas(void*) { not_built(); }
bool Cuda::uses_lt(void*) { not_built(); }
void Cuda::gemm(void*, const GemmArgs&) { not_built(); }
void Cuda::gemm_lt(void*, const GemmArgs&) { not_built(); }
void Cuda::bias_grad_tiles(void*, const GemmArgs&, float*) { not_built(); }

void Cuda::adamw(const AdamWStepArgs&, float*, const float*, float*, float*, std::int64_t, cuda::StreamHandle) {
  not_built();
}
void Cuda::adamw_multi(const AdamWStepArgs&, const AdamWTensor*, const AdamWChunk*, std::int64_t, cuda::StreamHandle) {
  not_built();
}
}  // namespace backend

}  // namespace mt
