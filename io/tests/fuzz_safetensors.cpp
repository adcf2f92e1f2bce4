// libFuzzer target: the bytes of one safetensors file (`meshtrain convert --from DIR`,
// `--init-weights DIR`), read with SafetensorsFile. Properties of an accepted file: the header
// parsed from the input's own bytes agrees with the mapped file's, every tensor's bytes lie inside
// the data and equal the input's there, the tensors own the data exactly once, each reads as fp32
// into numel floats; writing them back as F32 and reading again gives the same values.
// Seeds: small files from write_safetensors in F32, BF16 and F16, with metadata and empty tensors.
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "io/safetensors.h"
#include "tests/fuzz_support.h"

namespace {
namespace fs = std::filesystem;
using namespace mt;

void write_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<float> a(12), b(3);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i) - 1.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 3.0f - static_cast<float>(i);
  const std::vector<float> none;
  const std::vector<StTensorToWrite> tensors = {
      {"h.0.attn.c_attn.weight", {3, 4}, a}, {"ln_f.bias", {3}, b}, {"empty", {0}, none}};
  write_safetensors(dir / "f32.safetensors", tensors, StDtype::F32, {{"format", "pt"}});
  write_safetensors(dir / "bf16.safetensors", tensors, StDtype::BF16);
  write_safetensors(dir / "f16.safetensors", tensors, StDtype::F16, {{"format", "pt"}, {"note", "x"}});
  write_safetensors(dir / "none.safetensors", {}, StDtype::F32);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mt::fuzz::handle_write_seeds(argc, argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path file = mt::fuzz::fuzz_dir() / "model.safetensors";
  mt::fuzz::write_input(file, std::string_view(reinterpret_cast<const char*>(data), size));
  std::optional<SafetensorsFile> f;
  try {
    f.emplace(file);
  } catch (const std::exception&) {
    return 0;
  }
  // The same header parsed from the input's own bytes: the mapped file says what the input says.
  const StHeader h = parse_safetensors_header(std::span<const unsigned char>(data, size), "input");
  FUZZ_CHECK(h.tensors.size() == f->tensors().size() && h.metadata == f->metadata());
  std::int64_t owned = 0;
  std::vector<StTensorToWrite> again;
  std::vector<std::vector<float>> values;
  values.reserve(h.tensors.size());
  for (const StTensor& t : h.tensors) {
    FUZZ_CHECK(t.begin <= t.end && h.data_start + t.end <= static_cast<std::int64_t>(size));
    FUZZ_CHECK(t.end - t.begin == t.numel() * static_cast<std::int64_t>(st_dtype_size(t.dtype)));
    owned += t.end - t.begin;
    const StTensor* mapped = f->find(t.name);
    FUZZ_CHECK(mapped != nullptr && mapped->begin == t.begin && mapped->end == t.end);
    const std::span<const unsigned char> raw = f->raw(*mapped);
    FUZZ_CHECK(raw.empty() || std::memcmp(raw.data(), data + h.data_start + t.begin, raw.size()) == 0);
    values.push_back(f->read(*mapped));
    FUZZ_CHECK(static_cast<std::int64_t>(values.back().size()) == t.numel());
    again.push_back({t.name, t.shape, values.back()});
  }
  FUZZ_CHECK(owned == static_cast<std::int64_t>(size) - h.data_start);  // every data byte, once
  const fs::path copy = mt::fuzz::fuzz_dir() / "again.safetensors";
  write_safetensors(copy, again, StDtype::F32, f->metadata());
  const SafetensorsFile g(copy);
  FUZZ_CHECK(g.tensors().size() == f->tensors().size());
  FUZZ_CHECK(g.metadata() == f->metadata());
  for (std::size_t i = 0; i < again.size(); ++i) {
    const StTensor* t = g.find(again[i].name);
    FUZZ_CHECK(t != nullptr && t->shape == again[i].shape);
    const std::vector<float> back = g.read(*t);
    FUZZ_CHECK(back.size() == values[i].size());
    if (!back.empty()) FUZZ_CHECK(std::memcmp(back.data(), values[i].data(), back.size() * sizeof(float)) == 0);
  }
  return 0;
}
