// The op families (runtime/ops/<family>.h), and which of them run their kernels cut for the GPU
// (runtime/backend.h Cuda::run_fast) in place of the one-thread-per-unit reference kernels. A kernel
// that has not yet passed its tests on a GPU is never the default: every family starts off, and
// MESHTRAIN_CUDA_KERNELS (read when a CUDA DeviceContext is created, ignored on the CPU) or
// DeviceOptions::cuda_kernels turns families on:
//   MESHTRAIN_CUDA_KERNELS=reference            (or unset, or empty) the unit kernels everywhere
//   MESHTRAIN_CUDA_KERNELS=norms,attention,...  a comma list of families, or `all`
// The names accepted are those of the families with fast kernels (fast_kernel_families()): today
// norms (LayerNorm and RMSNorm forward, a warp per row), attention (the fused causal softmax of
// batched-GEMM attention and its backward, a warp or a block per row), loss (cross-entropy loss
// and dlogits in one block-per-row pass, nn::cross_entropy_fused) and optimizer (AdamW over every
// tensor in one launch, a block per chunk of a table uploaded with the optimizer: optim/adamw.h).
// defines: OpFamily, op_family_name, CudaKernels, fast_kernel_families, kCudaKernelsEnv,
//          parse_cuda_kernels, cuda_kernels_from_env, resolve_cuda_kernels, cuda_kernels_name
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace mt {

enum class OpFamily : std::uint8_t { Embedding, Norms, Activations, Attention, Loss, Elementwise, Gemm, Optimizer };
inline constexpr int kOpFamilies = 8;
const char* op_family_name(OpFamily f);

// A set of op families.
struct CudaKernels {
  std::uint32_t families = 0;  // bit i: OpFamily i

  static CudaKernels of(std::initializer_list<OpFamily> fs) {
    CudaKernels k;
    for (OpFamily f : fs) k.families |= 1u << static_cast<int>(f);
    return k;
  }
  static CudaKernels all();  // every family with fast kernels
  bool uses(OpFamily f) const { return (families >> static_cast<int>(f) & 1u) != 0; }
  bool operator==(const CudaKernels&) const = default;
};

// The families that list fast kernels (runtime/ops/<family>.h MT_<FAMILY>_FAST_OPS).
CudaKernels fast_kernel_families();

inline constexpr const char* kCudaKernelsEnv = "MESHTRAIN_CUDA_KERNELS";

// A value of MESHTRAIN_CUDA_KERNELS: an EnvironmentError naming the variable and the bad name for
// anything but `reference`, `all`, or a comma list of families with fast kernels.
CudaKernels parse_cuda_kernels(std::string_view value);
// The variable's value, or all families off when it is unset or empty.
CudaKernels cuda_kernels_from_env();
// A context's choice: what its options asked, else the environment on CUDA; the CPU has no fast
// kernels (and never reads the variable).
CudaKernels resolve_cuda_kernels(bool cuda, const std::optional<CudaKernels>& asked);
// "reference", "all", or the families on, comma-separated (parse_cuda_kernels reads it back).
std::string cuda_kernels_name(const CudaKernels& k);

}  // namespace mt
