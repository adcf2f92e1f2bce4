// safetensors, Hugging Face's weights format: an 8-byte little-endian header length N, N bytes of
// JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}}, plus an optional "__metadata__"
// of strings), then the tensors' raw little-endian bytes, offsets counted from the end of the
// header. One file here; the sharded folder form is io/safetensors_folder.h.
//
// The reader maps the file and checks the whole header before any tensor is touched: offsets
// inside the data, consistent with shape x dtype, no two tensors overlapping and no byte unowned
// (the format forbids holes). F32, BF16 and F16 are read, widened to fp32 on request; any other
// dtype is refused by its name. Every error is one line naming the file.
// defines: StDtype, st_dtype_name, st_dtype_size, half_to_float, float_to_half, StTensor,
//          StHeader, parse_safetensors_header, SafetensorsFile, StTensorToWrite,
//          write_safetensors, safetensors_bytes, kStMaxHeaderBytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"

namespace mt {

enum class StDtype : std::uint8_t { F32, BF16, F16 };
const char* st_dtype_name(StDtype t);  // "F32", "BF16", "F16", as the header spells them
std::size_t st_dtype_size(StDtype t);

// IEEE binary16 <-> binary32; to half rounds to nearest even, overflow to infinity, NaN stays NaN.
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);

// A header is at most 100 MB (as the reference implementation): a bound on what a bad file can
// make the JSON parser allocate.
inline constexpr std::int64_t kStMaxHeaderBytes = 100'000'000;

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0, end = 0;  // byte offsets into the data, which starts after the header
  std::int64_t numel() const;
};

struct StHeader {
  std::vector<StTensor> tensors;  // sorted by begin
  std::map<std::string, std::string> metadata;
  std::int64_t data_start = 0;  // 8 + header length
};

// Checks a whole file's bytes; `file` names it in errors (UsageError, one line).
StHeader parse_safetensors_header(std::span<const unsigned char> bytes, const std::string& file);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);  // maps and checks it
  const std::vector<StTensor>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const StTensor* find(std::string_view name) const;  // nullptr when absent
  const std::filesystem::path& path() const { return file_.path(); }
  // The tensor's elements widened to fp32; out.size() must be t.numel().
  void read(const StTensor& t, std::span<float> out) const;
  std::vector<float> read(const StTensor& t) const;
  std::span<const unsigned char> raw(const StTensor& t) const;

 private:
  MappedFile file_;
  StHeader header_;
  std::map<std::string, std::size_t, std::less<>> by_name_;
};

struct StTensorToWrite {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<const float> values;  // shape's product of elements, narrowed to the stored dtype
};

// Writes the tensors (in the given order, data and header alike) as `stored`, atomically (a
// temporary renamed into place). The header is padded with spaces to a multiple of 8 bytes, so
// the data start aligned. Error for a duplicate or reserved name or values that disagree with a shape.
void write_safetensors(const std::filesystem::path& path, const std::vector<StTensorToWrite>& tensors,
                       StDtype stored, const std::map<std::string, std::string>& metadata = {});

// Data bytes of `tensors` stored as `stored` (what the sharded writer counts).
std::int64_t safetensors_bytes(const std::vector<StTensorToWrite>& tensors, StDtype stored);

}  // namespace mt
