// Element types: bf16 conversion bit for bit (round to nearest even, NaN and inf kept), and the
// names, sizes and parsing of DType.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "runtime/dtype.h"  // defines: DType, bf16, dtype_size, dtype_name, parse_dtype, dispatch_dtype
#include "runtime/error.h"  // defines: Error

namespace mt {
namespace {

float float_from_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

std::uint16_t bf16_bits_of(std::uint32_t float_bits) { return bf16::from_float(float_from_bits(float_bits)).bits; }

TEST(Bf16, ExactValuesKeepTheirTopHalf) {
  EXPECT_EQ(bf16::from_float(1.0f).bits, 0x3F80);
  EXPECT_EQ(bf16::from_float(-1.0f).bits, 0xBF80);
  EXPECT_EQ(bf16::from_float(2.0f).bits, 0x4000);
  EXPECT_EQ(bf16::from_float(-2.5f).bits, 0xC020);
  EXPECT_EQ(bf16::from_float(0.0f).bits, 0x0000);
  EXPECT_EQ(bf16::from_float(-0.0f).bits, 0x8000);
  EXPECT_EQ(bf16_bits_of(0x00010000u), 0x0001);  // smallest bf16 denormal survives
  EXPECT_EQ(bf16{0x3F80}.to_float(), 1.0f);
  EXPECT_EQ(bf16{0xC020}.to_float(), -2.5f);
}

TEST(Bf16, RoundsToNearestEven) {
  // 0x3F80'8000 lies exactly halfway between bf16 0x3F80 (even) and 0x3F81: goes down to even.
  EXPECT_EQ(bf16_bits_of(0x3F808000u), 0x3F80);
  // 0x3F81'8000 lies halfway between 0x3F81 and 0x3F82 (even): goes up to even.
  EXPECT_EQ(bf16_bits_of(0x3F818000u), 0x3F82);
  // Off the halfway point, plain nearest.
  EXPECT_EQ(bf16_bits_of(0x3F808001u), 0x3F81);
  EXPECT_EQ(bf16_bits_of(0x3F807FFFu), 0x3F80);
  EXPECT_EQ(bf16_bits_of(0x3F81FFFFu), 0x3F82);
  // The same on negative numbers (the rounding works on the magnitude).
  EXPECT_EQ(bf16_bits_of(0xBF808000u), 0xBF80);
  EXPECT_EQ(bf16_bits_of(0xBF818000u), 0xBF82);
  // A carry out of the mantissa bumps the exponent: 1.99999988 -> 2.
  EXPECT_EQ(bf16_bits_of(0x3FFFFFFFu), 0x4000);
  // The largest float is nearer to inf than to the largest bf16 under round to nearest.
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::max()).bits, 0x7F80);
}

TEST(Bf16, NaNStaysNaNAndInfStaysInf) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16::from_float(inf).bits, 0x7F80);
  EXPECT_EQ(bf16::from_float(-inf).bits, 0xFF80);
  EXPECT_TRUE(std::isinf(bf16::from_float(inf).to_float()));

  EXPECT_EQ(bf16_bits_of(0x7FC00000u), 0x7FC0);  // the usual quiet NaN
  // A NaN whose payload sits only in the low 16 bits would truncate to inf (0x7F80) and
  // rounding could carry it anywhere; it must come out a (quiet) NaN, sign kept.
  EXPECT_EQ(bf16_bits_of(0x7F800001u), 0x7FC0);
  EXPECT_EQ(bf16_bits_of(0x7FFFFFFFu), 0x7FFF);
  EXPECT_EQ(bf16_bits_of(0xFF800001u), 0xFFC0);
  EXPECT_TRUE(std::isnan(bf16{bf16_bits_of(0x7F800001u)}.to_float()));
  EXPECT_TRUE(std::isnan(bf16::from_float(std::numeric_limits<float>::quiet_NaN()).to_float()));
}

TEST(Bf16, SmallIntegersUpTo256AreExact) {
  for (int i = -256; i <= 256; ++i) {
    const float f = static_cast<float>(i);
    EXPECT_EQ(bf16::from_float(f).to_float(), f) << i;
  }
  // Beyond 256 the spacing is 2: 257 and 259 are halfway cases, rounded to the even mantissa.
  EXPECT_EQ(bf16::from_float(257.0f).to_float(), 256.0f);
  EXPECT_EQ(bf16::from_float(258.0f).to_float(), 258.0f);
  EXPECT_EQ(bf16::from_float(259.0f).to_float(), 260.0f);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  EXPECT_EQ(sizeof(bf16), 2u);
  EXPECT_STREQ(dtype_name(DType::F32), "fp32");
  EXPECT_STREQ(dtype_name(DType::BF16), "bf16");
  EXPECT_STREQ(dtype_name(DType::I32), "int32");
}

TEST(DType, ParseAcceptsNamesAndAliases) {
  EXPECT_EQ(parse_dtype("fp32"), DType::F32);
  EXPECT_EQ(parse_dtype("float32"), DType::F32);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
  EXPECT_EQ(parse_dtype("int32"), DType::I32);
  for (DType t : {DType::F32, DType::BF16, DType::I32}) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
}

TEST(DType, ParseRejectsUnknownNamesAndSaysWhatIsExpected) {
  for (const char* bad : {"fp16", "FP32", "", "int64", "bf16 "}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "parse_dtype accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.message();
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("fp32, bf16 or int32"), std::string::npos) << msg;
    }
  }
}

TEST(DType, DispatchCallsWithTheMatchingType) {
  auto size_of = [](DType t) { return dispatch_dtype(t, [](auto tag) { return sizeof(tag); }); };
  EXPECT_EQ(size_of(DType::F32), 4u);
  EXPECT_EQ(size_of(DType::BF16), 2u);
  EXPECT_EQ(size_of(DType::I32), 4u);
  auto dtype_back = [](DType t) { return dispatch_dtype(t, [](auto tag) { return dtype_of<decltype(tag)>::value; }); };
  for (DType t : {DType::F32, DType::BF16, DType::I32}) EXPECT_EQ(dtype_back(t), t);
}

}  // namespace
}  // namespace mt
