// safetensors files and folders: round trips in F32, BF16 and F16, single and sharded, the byte
// layout (little-endian length, header padded to 8), and one clear line for every bad file.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors_folder.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/scratch_dir.h"

namespace mt {
namespace {
namespace fs = std::filesystem;
using testing::ScratchDir;

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>(i) - static_cast<float>(n) / 3.0f);
  return v;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// A file made by hand: the 8-byte length, `header` as given, then `data`.
std::string file_of(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(header.size() >> (8 * i));
  return out + header + data;
}

// Expects one UsageError line that names the file and matches `cause`.
template <class Fn>
void expect_one_line(Fn&& fn, const fs::path& file, const std::string& cause) {
  try {
    fn();
    ADD_FAILURE() << "no error; wanted: " << cause;
  } catch (const UsageError& e) {
    EXPECT_NE(e.message().find(file.string()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(cause), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}

void expect_bad_file(const std::string& bytes, const std::string& cause) {
  ScratchDir dir("st_bad");
  const fs::path file = dir / "bad.safetensors";
  write_bytes(file, bytes);
  expect_one_line([&] { SafetensorsFile f(file); }, file, cause);
}

TEST(Safetensors, F32RoundTripIsExactAndTheHeaderIsPaddedTo8) {
  ScratchDir dir("st");
  const std::vector<float> a = ramp(12, 0.37f), b = ramp(5, -1.5f), empty;
  const fs::path file = dir / "x.safetensors";
  write_safetensors(file, {{"a", {3, 4}, a}, {"b.bias", {5}, b}, {"none", {0, 2}, empty}}, StDtype::F32,
                    {{"format", "pt"}});
  const std::string bytes = read_bytes(file);
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(length % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + length + (12 + 5) * 4);
  EXPECT_EQ(bytes[8], '{');
  // Data in the given order: a first, straight after the header.
  float first = 0;
  std::memcpy(&first, bytes.data() + 8 + length, 4);
  EXPECT_EQ(first, a[0]);

  const SafetensorsFile f(file);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_NE(f.find("a"), nullptr);
  EXPECT_EQ(f.find("a")->shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(f.find("a")->dtype, StDtype::F32);
  EXPECT_EQ(f.read(*f.find("a")), a);
  EXPECT_EQ(f.read(*f.find("b.bias")), b);
  EXPECT_TRUE(f.read(*f.find("none")).empty());
  EXPECT_EQ(f.find("c"), nullptr);
}

TEST(Safetensors, Bf16AndF16RoundTripsRoundToNearestEven) {
  ScratchDir dir("st");
  const std::vector<float> v = {0.0f, -0.0f, 1.0f, 0.1f, -3.14159f, 1e-8f, 65504.0f, 65520.0f, 6e-5f, 1.0e30f};
  for (const StDtype d : {StDtype::BF16, StDtype::F16}) {
    const fs::path file = dir / (std::string(st_dtype_name(d)) + ".safetensors");
    write_safetensors(file, {{"v", {static_cast<std::int64_t>(v.size())}, v}}, d);
    const SafetensorsFile f(file);
    EXPECT_EQ(f.find("v")->dtype, d);
    const std::vector<float> back = f.read(*f.find("v"));
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float want = d == StDtype::BF16 ? bf16::from_float(v[i]).to_float() : half_to_float(float_to_half(v[i]));
      EXPECT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::bit_cast<std::uint32_t>(want)) << i;
    }
  }
  // binary16 by hand: 1, 0.1 (0x2e66), the largest finite, the first value rounding to infinity,
  // the smallest subnormal, a tie below it rounding to zero, NaN.
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(0.1f), 0x2e66);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half(-0x1.0p-24f), 0x8001);
  EXPECT_EQ(float_to_half(0x1.0p-25f), 0x0000);
  EXPECT_EQ(float_to_half(0x1.8p-24f), 0x0002);  // 1.5 units: ties to even
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  for (std::uint32_t h = 0; h < 0x7c00; ++h)  // every finite half survives the trip both ways
    ASSERT_EQ(float_to_half(half_to_float(static_cast<std::uint16_t>(h))), h);
}

TEST(SafetensorsFolder, ShardedRoundTripAndTheIndex) {
  ScratchDir dir("st");
  const std::vector<float> a = ramp(64, 0.5f), b = ramp(16, 0.25f), c = ramp(70, 1.0f);
  const std::vector<StTensorToWrite> tensors = {{"a", {8, 8}, a}, {"b", {16}, b}, {"c", {7, 10}, c}};
  write_safetensors_folder(dir.path(), tensors, StDtype::BF16, 160);  // a+b fit in 160 bytes, c alone
  EXPECT_FALSE(fs::exists(dir / kStSingleFile));
  ASSERT_TRUE(fs::exists(dir / kStIndexFile));
  const nlohmann::json index = nlohmann::json::parse(read_bytes(dir / kStIndexFile));
  EXPECT_EQ(index["weight_map"]["a"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["b"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["c"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(index["metadata"]["total_size"], (64 + 16 + 70) * 2);

  const SafetensorsFolder folder(dir.path());
  EXPECT_TRUE(folder.sharded());
  EXPECT_EQ(folder.names(), (std::vector<std::string>{"a", "b", "c"}));
  const auto found = folder.find("c");
  ASSERT_NE(found.file, nullptr);
  EXPECT_EQ(found.file->path().filename(), "model-00002-of-00002.safetensors");
  const std::vector<float> back = found.file->read(*found.tensor);
  for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(back[i], bf16::from_float(c[i]).to_float());

  // A single-file write over it removes the index, which would otherwise win.
  write_safetensors_folder(dir.path(), tensors, StDtype::F32, 0);
  EXPECT_FALSE(fs::exists(dir / kStIndexFile));
  const SafetensorsFolder single(dir.path());
  EXPECT_FALSE(single.sharded());
  EXPECT_EQ(single.find("a").file->read(*single.find("a").tensor), a);
}

TEST(Safetensors, EveryBadFileGetsOneLineNamingItAndTheCause) {
  const std::string f32x2 = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_bad_file("", "too short for the 8-byte header length");
  expect_bad_file(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "runs past the end of the file");
  expect_bad_file(file_of("{\"t\": [", ""), "not valid JSON");
  expect_bad_file(file_of("[1, 2]", ""), "not an object of tensors");
  expect_bad_file(file_of(f32x2, std::string(4, '\0')), "run past the end of its data");
  expect_bad_file(file_of(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
                  "shape [3] of F32 is 12 bytes, but its data_offsets [0, 8) span 8");
  expect_bad_file(file_of(R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')),
                  "has dtype I64: meshtrain reads F32, BF16 and F16");
  expect_bad_file(file_of(R"({"t":{"dtype":"Q7","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')),
                  "(not a safetensors dtype)");
  expect_bad_file(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, '\0')),
                  "overlap");
  expect_bad_file(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
                  "data bytes [0, 4) belong to no tensor");
  expect_bad_file(file_of(f32x2, std::string(12, '\0')), "at the end belong to no tensor");
  expect_bad_file(file_of(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""),
                  "no non-negative integer");
  expect_bad_file(file_of(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
                  "overflows 64 bits");
  expect_bad_file(file_of(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", ""), "0 <= begin <= end");
  expect_bad_file(file_of(R"({"t":{"shape":[1],"data_offsets":[0,4]}})", ""), "has no dtype string");
  expect_bad_file(file_of(R"({"__metadata__":{"a":1}})", ""), "is not a string");
}

TEST(SafetensorsFolder, BadFoldersAndIndicesGetOneLine) {
  ScratchDir dir("st_bad");
  expect_one_line([&] { SafetensorsFolder f(dir.path()); }, dir.path(), "holds neither model.safetensors nor");
  const std::vector<float> a = ramp(4, 1.0f);
  write_safetensors(dir / "part.safetensors", {{"a", {4}, a}}, StDtype::F32);
  const fs::path index = dir / kStIndexFile;
  const auto with_index = [&](const std::string& text, const std::string& cause) {
    write_bytes(index, text);
    expect_one_line([&] { SafetensorsFolder f(dir.path()); }, index, cause);
  };
  with_index("{\"weight_map\": ", "is not valid JSON");
  with_index("{\"metadata\": {}}", "has no \"weight_map\" object");
  with_index(R"({"weight_map": {"a": "gone.safetensors"}})", "names gone.safetensors (for tensor 'a'), which is missing");
  with_index(R"({"weight_map": {"b": "part.safetensors"}})", "puts tensor 'b' in part.safetensors, which does not hold it");
  with_index(R"({"weight_map": {"a": "../part.safetensors"}})", "not a file name in the folder");
  write_bytes(index, R"({"weight_map": {"a": "part.safetensors"}})");  // well formed: read
  const SafetensorsFolder good(dir.path());
  EXPECT_EQ(good.find("a").file->read(*good.find("a").tensor), a);
}

}  // namespace
}  // namespace mt
