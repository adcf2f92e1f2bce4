// Test values in either activation dtype (fp32 or bf16), read and written as floats: inputs
// rounded to the dtype once, so a reference and the code under test read the same numbers.
// defines: rounded_random_values, tensor_of, widened
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/tensor.h"
#include "tests/random_values.h"

namespace mt::testing {

// random_values in [-range, range), each rounded to bf16 when dtype is bf16.
inline std::vector<float> rounded_random_values(std::size_t n, unsigned seed, float range, DType dtype) {
  std::vector<float> v = random_values(n, seed, -range, range);
  if (dtype == DType::BF16)
    for (float& x : v) x = bf16::from_float(x).to_float();
  return v;
}

// v as a tensor of `dtype` (fp32 or bf16) on ctx's device.
inline Tensor tensor_of(DeviceContext& ctx, const std::vector<float>& v, Shape shape, DType dtype) {
  if (dtype == DType::F32) return Tensor::from_host(v, std::move(shape), ctx);
  std::vector<bf16> b;
  for (float x : v) b.push_back(bf16::from_float(x));
  return Tensor::from_host(b, std::move(shape), ctx);
}

// An fp32 or bf16 tensor's values, read back as floats.
inline std::vector<float> widened(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.to_host<float>();
  std::vector<float> v;
  for (bf16 x : t.to_host<bf16>()) v.push_back(x.to_float());
  return v;
}

}  // namespace mt::testing
