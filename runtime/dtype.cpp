#include "runtime/dtype.h"

#include "runtime/error.h"

namespace mt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::I32: return "int32";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32") return DType::F32;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "int32") return DType::I32;
  MT_FAIL("unknown dtype '", name, "' (expected fp32, bf16 or int32)");
}

}  // namespace mt
