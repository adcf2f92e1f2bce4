// Which GPU-shaped CUDA kernels run in place of the one-thread-per-unit reference kernels
// (runtime/nn_backend.h CudaRows; the kernels in runtime/cuda/norms.cu, softmax.cu, classifier.cu).
// A kernel that has not yet passed its tests on a GPU is never the default: every family starts
// off, and MESHTRAIN_CUDA_KERNELS (read when a CUDA DeviceContext is created, ignored on the CPU)
// or DeviceOptions::cuda_kernels turns families on:
//   MESHTRAIN_CUDA_KERNELS=reference            (or unset, or empty) the unit kernels everywhere
//   MESHTRAIN_CUDA_KERNELS=norms,softmax,...    a comma list of families, or `all`
// Families: norms (LayerNorm and RMSNorm forward, a warp per row), softmax (the fused causal
// softmax of batched-GEMM attention and its backward, a warp or a block per row), classifier
// (cross-entropy loss and dlogits in one block-per-row pass, nn::cross_entropy_fused).
// defines: CudaKernelFamily, CudaKernels, kCudaKernelsEnv, parse_cuda_kernels, cuda_kernels_from_env,
//          resolve_cuda_kernels, cuda_kernels_name
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mt {

enum class CudaKernelFamily { Norms, Softmax, Classifier };

struct CudaKernels {
  bool norms = false, softmax = false, classifier = false;

  static CudaKernels all() { return {true, true, true}; }
  bool uses(CudaKernelFamily f) const {
    return f == CudaKernelFamily::Norms ? norms : (f == CudaKernelFamily::Softmax ? softmax : classifier);
  }
  bool operator==(const CudaKernels&) const = default;
};

inline constexpr const char* kCudaKernelsEnv = "MESHTRAIN_CUDA_KERNELS";

// A value of MESHTRAIN_CUDA_KERNELS: an EnvironmentError naming the variable and the bad name for
// anything but `reference`, `all`, or a comma list of family names.
CudaKernels parse_cuda_kernels(std::string_view value);
// The variable's value, or all families off when it is unset or empty.
CudaKernels cuda_kernels_from_env();
// A context's choice: what its options asked, else the environment on CUDA; the CPU has no
// CudaRows kernels (and never reads the variable).
CudaKernels resolve_cuda_kernels(bool cuda, const std::optional<CudaKernels>& asked);
// "reference", "all", or the families on, comma-separated (parse_cuda_kernels reads it back).
std::string cuda_kernels_name(const CudaKernels& k);

}  // namespace mt
