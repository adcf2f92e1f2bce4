#include "runtime/cuda_kernel_choice.h"

#include <cstdlib>
#include <utility>

#include "runtime/error.h"

namespace mt {

CudaKernels parse_cuda_kernels(std::string_view value) {
  CudaKernels k;
  if (value.empty() || value == "reference") return k;
  if (value == "all") return CudaKernels::all();
  std::string_view rest = value;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    if (name == "norms") {
      k.norms = true;
    } else if (name == "softmax") {
      k.softmax = true;
    } else if (name == "classifier") {
      k.classifier = true;
    } else {
      MT_REQUIRE_ENV(false, kCudaKernelsEnv, "=", value, ": '", name,
                     "' is not a CUDA kernel family: use a comma list of norms, softmax, classifier, or all, "
                     "or reference (or leave it unset)");
    }
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
  const std::pair<bool, const char*> families[] = {
      {k.norms, "norms"}, {k.softmax, "softmax"}, {k.classifier, "classifier"}};
  for (const auto& [on, name] : families) {
    if (!on) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

}  // namespace mt
