#include "runtime/cuda_kernel_choice.h"

#include <cstdlib>

#include "runtime/backend.h"  // defines: MT_FAST_OPS, MT_OPTIMIZER_FAST_OPS
#include "runtime/error.h"

namespace mt {

const char* op_family_name(OpFamily f) {
  switch (f) {
    case OpFamily::Embedding: return "embedding";
    case OpFamily::Norms: return "norms";
    case OpFamily::Activations: return "activations";
    case OpFamily::Attention: return "attention";
    case OpFamily::Loss: return "loss";
    case OpFamily::Elementwise: return "elementwise";
    case OpFamily::Gemm: return "gemm";
    case OpFamily::Optimizer: return "optimizer";
  }
  return "?";
}

CudaKernels fast_kernel_families() {
  CudaKernels k;
#define MT_MARK_FAMILY(Op, Family) k.families |= 1u << static_cast<int>(OpFamily::Family);
  MT_FAST_OPS(MT_MARK_FAMILY)
  MT_OPTIMIZER_FAST_OPS(MT_MARK_FAMILY)  // not a unit op: optim/adamw.cpp asks the choice itself
#undef MT_MARK_FAMILY
  return k;
}

CudaKernels CudaKernels::all() { return fast_kernel_families(); }

CudaKernels parse_cuda_kernels(std::string_view value) {
  CudaKernels k;
  if (value.empty() || value == "reference") return k;
  if (value == "all") return CudaKernels::all();
  const CudaKernels fast = fast_kernel_families();
  std::string names;
  for (int i = 0; i < kOpFamilies; ++i) {
    const auto f = static_cast<OpFamily>(i);
    if (fast.uses(f)) names += std::string(names.empty() ? "" : ", ") + op_family_name(f);
  }
  std::string_view rest = value;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    bool known = false;
    for (int i = 0; i < kOpFamilies && !known; ++i) {
      const auto f = static_cast<OpFamily>(i);
      if (fast.uses(f) && name == op_family_name(f)) {
        k.families |= 1u << i;
        known = true;
      }
    }
    MT_REQUIRE_ENV(known, kCudaKernelsEnv, "=", value, ": '", name,
                   "' is not an op family with fast CUDA kernels: use a comma list of ", names,
                   ", or all, or reference (or leave it unset)");
    if (comma == std::string_view::npos) return k;
    rest = rest.substr(comma + 1);
  }
}

CudaKernels cuda_kernels_from_env() {
  const char* env = std::getenv(kCudaKernelsEnv);
  return env == nullptr ? CudaKernels{} : parse_cuda_kernels(env);
}

CudaKernels resolve_cuda_kernels(bool cuda, const std::optional<CudaKernels>& asked) {
  if (!cuda) return {};
  return asked.has_value() ? *asked : cuda_kernels_from_env();
}

std::string cuda_kernels_name(const CudaKernels& k) {
  if (k == CudaKernels{}) return "reference";
  if (k == CudaKernels::all()) return "all";
  std::string out;
  for (int i = 0; i < kOpFamilies; ++i) {
    if (!k.uses(static_cast<OpFamily>(i))) continue;
    if (!out.empty()) out += ',';
    out += op_family_name(static_cast<OpFamily>(i));
  }
  return out;
}

}  // namespace mt
