// libFuzzer target: the bytes of an llm.c GPT-2 weights file (--init-weights, `meshtrain sample
// --weights`, `meshtrain convert --from X.bin`), read with read_llmc_header and read_llmc_weights.
// Properties of an accepted file: the header's shape and the streamed parameters agree, and writing
// them back (fp32) gives the same parameter bytes: reader and writer agree on the layout.
// Seeds: tiny fp32 and bf16 files from write_llmc_weights.
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/llmc/llmc_weights.h"  // defines: read_llmc_header, read_llmc_weights, write_llmc_weights
#include "tests/fuzz_support.h"

namespace {
namespace fs = std::filesystem;
using namespace mt;

GptConfig config_of(int layers, int heads, int channels, int max_seq_len, int vocab, int padded) {
  GptConfig c;
  c.layers = layers;
  c.heads = heads;
  c.channels = channels;
  c.max_seq_len = max_seq_len;
  c.vocab_size = vocab;
  c.padded_vocab = padded;
  return c;
}

void write_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const GptConfig configs[] = {config_of(1, 1, 2, 2, 3, 4), config_of(2, 2, 4, 3, 5, 8)};
  int n = 0;
  for (const GptConfig& config : configs) {
    std::vector<float> values;
    const auto value_of = [&](const ParamSpec& spec) {
      values.resize(static_cast<std::size_t>(spec.numel()));
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 9) - 1.0f;
      return std::span<const float>(values);
    };
    write_llmc_weights(dir / ("fp32_" + std::to_string(n) + ".bin"), config, value_of, DType::F32);
    write_llmc_weights(dir / ("bf16_" + std::to_string(n) + ".bin"), config, value_of, DType::BF16);
    ++n;
  }
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mt::fuzz::handle_write_seeds(argc, argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const fs::path file = mt::fuzz::fuzz_dir() / "weights.bin";
  mt::fuzz::write_input(file, input);
  GptConfig header;
  try {
    header = read_llmc_header(file);
  } catch (const std::exception&) {
    return 0;
  }
  LlmcWeights w;
  try {
    w = read_llmc_weights(file);
  } catch (const std::exception&) {
    FUZZ_CHECK(false);  // the header was accepted, and nothing changed the file since
  }
  check_llmc_compatible(header, w.config, file);  // the same shape: must not throw
  FUZZ_CHECK(w.specs.size() == w.values.size());
  std::int64_t elements = 0;
  for (std::size_t i = 0; i < w.specs.size(); ++i) {
    FUZZ_CHECK(static_cast<std::int64_t>(w.values[i].size()) == w.specs[i].numel());
    elements += w.specs[i].numel();
  }
  FUZZ_CHECK(1024 + elements * static_cast<std::int64_t>(dtype_size(w.stored)) == static_cast<std::int64_t>(size));

  if (w.stored == DType::F32) {
    const fs::path again = mt::fuzz::fuzz_dir() / "weights_again.bin";
    std::size_t next = 0;
    // write_llmc_weights asks in file order; find each spec's values by name.
    write_llmc_weights(
        again, w.config,
        [&](const ParamSpec& spec) {
          for (next = 0; w.specs[next].name != spec.name; ++next) {
          }
          return std::span<const float>(w.values[next]);
        },
        DType::F32);
    const std::string out = read_all(again);
    FUZZ_CHECK(out.size() == size);
    FUZZ_CHECK(std::memcmp(out.data(), data, 32) == 0);  // magic, version and the six shape fields
    FUZZ_CHECK(std::memcmp(out.data() + 1024, data + 1024, size - 1024) == 0);
  }
  return 0;
}
