// Element types of tensors: fp32, bf16 and int32, with a bf16 usable on host and device.
// defines: DType, dtype_size, dtype_name, parse_dtype, bf16
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "runtime/host_device.h"

namespace mt {

enum class DType : std::uint8_t { F32, BF16, I32 };

constexpr std::size_t dtype_size(DType t) { return t == DType::BF16 ? 2 : 4; }
const char* dtype_name(DType t);
DType parse_dtype(std::string_view name);

// bfloat16 stored as its 16 bits: the top half of an IEEE float. Conversion from float rounds to
// nearest even (NaN stays NaN), the same on CPU and GPU, so both backends agree bit for bit.
struct bf16 {
  std::uint16_t bits = 0;

  MT_HD static bf16 from_float(float f) {
    std::uint32_t u = float_bits(f);
    bf16 out;
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      out.bits = static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      out.bits = static_cast<std::uint16_t>(u >> 16);
    }
    return out;
  }
  MT_HD float to_float() const {
    std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
  }
  MT_HD static std::uint32_t float_bits(float f) {
    std::uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
  }
};

// Maps a C++ element type to its DType.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::I32;
};

// Calls fn(T{}) with the C++ type of a DType: one switch instead of one per kernel.
template <class Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: return fn(float{});
    case DType::BF16: return fn(bf16{});
    case DType::I32: return fn(std::int32_t{});
  }
  return fn(float{});
}

}  // namespace mt
