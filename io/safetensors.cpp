#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.h"
#include "runtime/dtype.h"  // defines: bf16
#include "runtime/error.h"

namespace mt {

static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian, read in place");

namespace {

// Every dtype the format defines, to tell "not read here" from "not a safetensors dtype".
constexpr const char* kFormatDtypes[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                         "BF16", "I32", "U32", "F32", "F64",     "I64",     "U64"};

// nlohmann's parse messages quote what they read: keep the error on one printable line.
std::string printable(std::string_view text) {
  std::string out(text.substr(0, 200));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A non-negative JSON integer that fits in int64, or -1.
std::int64_t as_count(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    return u <= static_cast<std::uint64_t>(INT64_MAX) ? static_cast<std::int64_t>(u) : -1;
  }
  if (v.is_number_integer()) return std::max<std::int64_t>(v.get<std::int64_t>(), -1);
  return -1;
}

StTensor parse_entry(const std::string& name, const nlohmann::json& entry, const std::string& where) {
  const std::string in = where + ": tensor '" + printable(name) + "'";
  MT_REQUIRE(entry.is_object(), in, " is not an object of dtype, shape and data_offsets");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  MT_REQUIRE(dtype != entry.end() && dtype->is_string(), in, " has no dtype string");
  MT_REQUIRE(shape != entry.end() && shape->is_array(), in, " has no shape array");
  MT_REQUIRE(offsets != entry.end() && offsets->is_array() && offsets->size() == 2, in,
             " has no data_offsets [begin, end]");
  StTensor t;
  t.name = name;
  const std::string d = dtype->get<std::string>();
  if (d == "F32") {
    t.dtype = StDtype::F32;
  } else if (d == "BF16") {
    t.dtype = StDtype::BF16;
  } else if (d == "F16") {
    t.dtype = StDtype::F16;
  } else {
    const bool known = std::any_of(std::begin(kFormatDtypes), std::end(kFormatDtypes), [&](const char* k) { return d == k; });
    MT_FAIL_AS(UsageError, in, " has dtype ", printable(d), known ? "" : " (not a safetensors dtype)",
               ": meshtrain reads F32, BF16 and F16");
  }
  std::int64_t numel = 1;
  for (const nlohmann::json& dim : *shape) {
    const std::int64_t n = as_count(dim);
    MT_REQUIRE(n >= 0, in, " has a shape entry ", printable(dim.dump()), " that is no non-negative integer");
    MT_REQUIRE(!__builtin_mul_overflow(numel, n, &numel), in, " has a shape whose size overflows 64 bits");
    t.shape.push_back(n);
  }
  t.begin = as_count((*offsets)[0]);
  t.end = as_count((*offsets)[1]);
  MT_REQUIRE(t.begin >= 0 && t.end >= t.begin, in, " has data_offsets ", printable(offsets->dump()),
             " that are not two integers 0 <= begin <= end");
  std::int64_t bytes = 0;
  MT_REQUIRE(!__builtin_mul_overflow(numel, static_cast<std::int64_t>(st_dtype_size(t.dtype)), &bytes), in,
             " has a shape whose size overflows 64 bits");
  MT_REQUIRE(bytes == t.end - t.begin, in, ": shape ", shape_text(t.shape), " of ", d, " is ", bytes,
             " bytes, but its data_offsets [", t.begin, ", ", t.end, ") span ", t.end - t.begin);
  return t;
}

std::uint16_t load16(const unsigned char* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

const char* st_dtype_name(StDtype t) {
  switch (t) {
    case StDtype::F32: return "F32";
    case StDtype::BF16: return "BF16";
    case StDtype::F16: return "F16";
  }
  return "?";
}

std::size_t st_dtype_size(StDtype t) { return t == StDtype::F32 ? 4 : 2; }

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant x 2^-24, exact in fp32
    const float f = static_cast<float>(mant) * 0x1.0p-24f;
    return sign ? -f : f;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | mant << 13);  // inf, NaN
  return std::bit_cast<float>(sign | (exp + 112) << 23 | mant << 13);
}

std::uint16_t float_to_half(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN stays (a quiet) NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (abs < 0x38800000u) {                        // below 2^-14: a half subnormal (or zero)
    const std::uint32_t exp = abs >> 23;
    if (exp < 102) return sign;  // below 2^-25: rounds to zero
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u, shift = 126 - exp;
    std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t h = (abs >> 13) - (112u << 10);  // rebias the exponent, keep 10 mantissa bits
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // nearest even; a carry moves the exponent
  return static_cast<std::uint16_t>(sign | h);
}

std::int64_t StTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

StHeader parse_safetensors_header(std::span<const unsigned char> bytes, const std::string& file) {
  const std::string where = "safetensors file " + file;
  const auto size = static_cast<std::int64_t>(bytes.size());
  MT_REQUIRE(size >= 8, where, " is ", size, " bytes, too short for the 8-byte header length");
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | bytes[static_cast<std::size_t>(i)];
  MT_REQUIRE(length <= static_cast<std::uint64_t>(size - 8), where, ": header length ", length,
             " runs past the end of the file (", size, " bytes): not a safetensors file, or cut short");
  MT_REQUIRE(length <= static_cast<std::uint64_t>(kStMaxHeaderBytes), where, ": header length ", length,
             " is beyond the format's limit of ", kStMaxHeaderBytes, " bytes");
  StHeader out;
  out.data_start = 8 + static_cast<std::int64_t>(length);
  const auto* text = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + length);
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL_AS(UsageError, where, ": its header is not valid JSON (", printable(e.what()), ")");
  }
  MT_REQUIRE(header.is_object(), where, ": its header is JSON but not an object of tensors");
  const std::int64_t data_bytes = size - out.data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      MT_REQUIRE(entry.is_object(), where, ": __metadata__ is not an object of strings");
      for (const auto& [key, value] : entry.items()) {
        MT_REQUIRE(value.is_string(), where, ": __metadata__ entry '", printable(key), "' is not a string");
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    StTensor t = parse_entry(name, entry, where);
    MT_REQUIRE(t.end <= data_bytes, where, ": tensor '", printable(name), "' has data_offsets [", t.begin, ", ", t.end,
               ") that run past the end of its data (", data_bytes, " bytes after the header)");
    out.tensors.push_back(std::move(t));
  }
  // The format forbids holes as well as overlaps: every data byte belongs to exactly one tensor.
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const StTensor& a, const StTensor& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::int64_t covered = 0;
  const StTensor* last = nullptr;
  for (const StTensor& t : out.tensors) {
    if (t.begin == t.end) continue;  // an empty tensor owns no bytes
    MT_REQUIRE(t.begin >= covered, where, ": tensors '", printable(last ? last->name : ""), "' [", last ? last->begin : 0,
               ", ", covered, ") and '", printable(t.name), "' [", t.begin, ", ", t.end, ") overlap");
    MT_REQUIRE(t.begin == covered, where, ": data bytes [", covered, ", ", t.begin,
               ") belong to no tensor (the format allows no holes)");
    covered = t.end;
    last = &t;
  }
  MT_REQUIRE(covered == data_bytes, where, ": data bytes [", covered, ", ", data_bytes,
             ") at the end belong to no tensor (the format allows no holes)");
  return out;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : file_(path, "safetensors file"), header_(parse_safetensors_header(file_.bytes(), path.string())) {
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) by_name_.emplace(header_.tensors[i].name, i);
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const unsigned char> SafetensorsFile::raw(const StTensor& t) const {
  return file_.bytes().subspan(static_cast<std::size_t>(header_.data_start + t.begin),
                               static_cast<std::size_t>(t.end - t.begin));
}

void SafetensorsFile::read(const StTensor& t, std::span<float> out) const {
  MT_CHECK(static_cast<std::int64_t>(out.size()) == t.numel(), t.name, ": ", out.size(), " floats for ", t.numel(),
           " elements");
  const unsigned char* p = raw(t).data();
  switch (t.dtype) {
    case StDtype::F32:
      if (!out.empty()) std::memcpy(out.data(), p, out.size_bytes());
      break;
    case StDtype::BF16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16{load16(p + 2 * i)}.to_float();
      break;
    case StDtype::F16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = half_to_float(load16(p + 2 * i));
      break;
  }
}

std::vector<float> SafetensorsFile::read(const StTensor& t) const {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  read(t, out);
  return out;
}

std::int64_t safetensors_bytes(const std::vector<StTensorToWrite>& tensors, StDtype stored) {
  std::int64_t bytes = 0;
  for (const StTensorToWrite& t : tensors)
    bytes += static_cast<std::int64_t>(t.values.size() * st_dtype_size(stored));
  return bytes;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<StTensorToWrite>& tensors, StDtype stored,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = "cannot write safetensors file " + path.string();
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  const auto elem = static_cast<std::int64_t>(st_dtype_size(stored));
  std::int64_t offset = 0;
  std::set<std::string> names;
  for (const StTensorToWrite& t : tensors) {
    MT_CHECK(t.name != "__metadata__" && names.insert(t.name).second, where, ": tensor name '", t.name,
             "' is reserved or given twice");
    std::int64_t numel = 1;
    for (std::int64_t d : t.shape) numel *= d;
    MT_CHECK(numel == static_cast<std::int64_t>(t.values.size()), where, ": tensor ", t.name, " has ", t.values.size(),
             " values for shape ", shape_text(t.shape));
    header[t.name] = {{"dtype", st_dtype_name(stored)}, {"shape", t.shape}, {"data_offsets", {offset, offset + numel * elem}}};
    offset += numel * elem;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data start 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));

  AtomicFile out(path, "safetensors file");
  out.write(length, sizeof(length));
  out.write(text.data(), text.size());
  constexpr std::size_t kChunk = std::size_t{1} << 20;  // elements converted per write
  std::vector<std::uint16_t> narrow;
  for (const StTensorToWrite& t : tensors) {
    if (stored == StDtype::F32) {
      out.write(t.values.data(), t.values.size_bytes());
      continue;
    }
    for (std::size_t done = 0; done < t.values.size(); done += kChunk) {
      const std::size_t n = std::min(kChunk, t.values.size() - done);
      narrow.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        const float v = t.values[done + i];
        narrow[i] = stored == StDtype::BF16 ? bf16::from_float(v).bits : float_to_half(v);
      }
      out.write(narrow.data(), n * sizeof(std::uint16_t));
    }
  }
  out.commit();
}

}  // namespace mt
