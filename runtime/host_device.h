// Marks functions compiled for both host and device, so CPU and CUDA kernels share one definition.
#pragma once

#if defined(__CUDACC__)
#define MT_HD __host__ __device__ __forceinline__
#else
#define MT_HD inline
#endif
