// llm.c weights files on tiny configs: bitwise fp32 and round-to-nearest-even bf16 round trips,
// the exact byte layout against hand-computed offsets (both directions), streaming tensor by tensor,
// every reader error, the writer's atomicity, and check_llmc_compatible's messages.
#include "models/llmc/llmc_weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "runtime/error.h"

namespace mt {
namespace {
namespace fs = std::filesystem;

// L=2, NH=2, C=4, maxT=3, V=5, Vp=8: 540 parameters.
GptConfig tiny_config() {
  GptConfig c;
  c.layers = 2;
  c.heads = 2;
  c.channels = 4;
  c.max_seq_len = 3;
  c.vocab_size = 5;
  c.padded_vocab = 8;
  return c;
}

// Where each kind of tiny_config() starts in the file's parameter array (in elements) and how many
// elements one layer's slice holds; worked out by hand from llm.c's fill_in_parameter_sizes.
struct KindLayout {
  ParamKind kind;
  std::int64_t offset;
  std::int64_t per_layer;  // or the whole tensor for wte, wpe, lnf
  bool layered;
};
constexpr KindLayout kTinyLayout[] = {
    {ParamKind::TokenEmbedding, 0, 32, false},    // wte [8,4]
    {ParamKind::PositionEmbedding, 32, 12, false},  // wpe [3,4]
    {ParamKind::Ln1Weight, 44, 4, true},          // ln1w [2,4]
    {ParamKind::Ln1Bias, 52, 4, true},
    {ParamKind::QkvWeight, 60, 48, true},         // qkvw [2,12,4]
    {ParamKind::QkvBias, 156, 12, true},          // qkvb [2,12]
    {ParamKind::AttnProjWeight, 180, 16, true},   // attprojw [2,4,4]
    {ParamKind::AttnProjBias, 212, 4, true},
    {ParamKind::Ln2Weight, 220, 4, true},
    {ParamKind::Ln2Bias, 228, 4, true},
    {ParamKind::FcWeight, 236, 64, true},         // fcw [2,16,4]
    {ParamKind::FcBias, 364, 16, true},           // fcb [2,16]
    {ParamKind::FcProjWeight, 396, 64, true},     // fcprojw [2,4,16]
    {ParamKind::FcProjBias, 524, 4, true},
    {ParamKind::LnfWeight, 532, 4, false},
    {ParamKind::LnfBias, 536, 4, false},
};
constexpr std::int64_t kTinyParams = 540;
constexpr std::int64_t kHeaderBytes = 1024;

// A value that names its kind, layer and index, exact in bf16 as well as fp32, distinct for every
// element of tiny_config(): bf16 bits 0x4000 | kind<<9 | (layer+1)<<7 | index.
std::uint16_t code_bits(ParamKind kind, int layer, std::int64_t index) {
  return static_cast<std::uint16_t>(0x4000 | static_cast<int>(kind) << 9 | (layer + 1) << 7 | static_cast<int>(index));
}
float code(ParamKind kind, int layer, std::int64_t index) { return bf16{code_bits(kind, layer, index)}.to_float(); }

std::uint32_t float_bits(float f) { return std::bit_cast<std::uint32_t>(f); }

std::vector<unsigned char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const std::vector<unsigned char>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
std::uint32_t u32_at(const std::vector<unsigned char>& b, std::int64_t at) {
  return static_cast<std::uint32_t>(b.at(at)) | static_cast<std::uint32_t>(b.at(at + 1)) << 8 |
         static_cast<std::uint32_t>(b.at(at + 2)) << 16 | static_cast<std::uint32_t>(b.at(at + 3)) << 24;
}
std::uint16_t u16_at(const std::vector<unsigned char>& b, std::int64_t at) {
  return static_cast<std::uint16_t>(b.at(at) | b.at(at + 1) << 8);
}
void put_u32(std::vector<unsigned char>& b, std::int64_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.at(at + i) = static_cast<unsigned char>(v >> (8 * i));
}
void put_u16(std::vector<unsigned char>& b, std::int64_t at, std::uint16_t v) {
  b.at(at) = static_cast<unsigned char>(v);
  b.at(at + 1) = static_cast<unsigned char>(v >> 8);
}

// A 1024-byte header with the given leading ints, the rest zero.
std::vector<unsigned char> header(std::initializer_list<std::int32_t> ints) {
  std::vector<unsigned char> b(kHeaderBytes, 0);
  int i = 0;
  for (std::int32_t v : ints) put_u32(b, 4 * i++, static_cast<std::uint32_t>(v));
  return b;
}

// Values for every spec, held by name, served to write_llmc_weights.
struct Values {
  std::vector<ParamSpec> specs;
  std::vector<std::vector<float>> data;
  std::function<std::span<const float>(const ParamSpec&)> value_of() const {
    return [this](const ParamSpec& spec) -> std::span<const float> {
      for (std::size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].name == spec.name) return data[i];
      }
      throw std::runtime_error("no values for " + spec.name);
    };
  }
};

Values coded_values(const GptConfig& c) {
  Values v;
  v.specs = gpt_parameter_specs(c);
  for (const ParamSpec& s : v.specs) {
    std::vector<float> d(static_cast<std::size_t>(s.numel()));
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = code(s.kind, s.layer, static_cast<std::int64_t>(i));
    v.data.push_back(std::move(d));
  }
  return v;
}

Values random_values(const GptConfig& c, std::uint32_t seed) {
  Values v;
  v.specs = gpt_parameter_specs(c);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const ParamSpec& s : v.specs) {
    std::vector<float> d(static_cast<std::size_t>(s.numel()));
    for (float& x : d) x = normal(rng);
    v.data.push_back(std::move(d));
  }
  return v;
}

class LlmcWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("meshtrain_llmc_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> dir_entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }

  // Both readers reject `p` with a message naming the file and containing every piece.
  void expect_rejected(const fs::path& p, std::initializer_list<std::string> pieces) {
    for (int which = 0; which < 2; ++which) {
      SCOPED_TRACE(which == 0 ? "read_llmc_header" : "read_llmc_weights");
      try {
        if (which == 0) {
          read_llmc_header(p);
        } else {
          read_llmc_weights(p);
        }
        ADD_FAILURE() << "no error for " << p;
      } catch (const Error& e) {
        EXPECT_NE(e.message().find(p.string()), std::string::npos) << e.message();
        for (const std::string& piece : pieces) EXPECT_NE(e.message().find(piece), std::string::npos) << e.message();
        EXPECT_NE(std::string(e.what()).find("llmc_weights.cpp:"), std::string::npos) << e.what();
      }
    }
  }

  fs::path dir_;
};

// ---- round trips ---------------------------------------------------------------------------------

TEST_F(LlmcWeightsTest, Fp32RoundTripIsBitwise) {
  GptConfig c;
  c.layers = 3;
  c.heads = 2;
  c.channels = 8;
  c.max_seq_len = 5;
  c.vocab_size = 10;  // padded_vocab 0: resolves to 128 rows
  Values v = random_values(c, 7);
  const float specials[] = {-0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::bit_cast<float>(0x7fc12345u), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(), 1e-40f, 3.0e38f};
  for (std::size_t i = 0; i < std::size(specials); ++i) v.data[i % v.data.size()][i] = specials[i];

  const fs::path p = dir_ / "model.bin";
  write_llmc_weights(p, c, v.value_of(), DType::F32);
  EXPECT_EQ(static_cast<std::int64_t>(fs::file_size(p)), kHeaderBytes + 4 * c.parameter_count());
  EXPECT_EQ(llmc_file_bytes(c, DType::F32), kHeaderBytes + 4 * c.parameter_count());

  const LlmcWeights w = read_llmc_weights(p);
  EXPECT_EQ(w.stored, DType::F32);
  EXPECT_EQ(w.config.describe(), c.describe());
  EXPECT_EQ(w.config.padded_vocab, 128);
  ASSERT_EQ(w.specs.size(), v.specs.size());
  ASSERT_EQ(w.values.size(), v.specs.size());
  for (std::size_t i = 0; i < v.specs.size(); ++i) {
    EXPECT_EQ(w.specs[i].name, v.specs[i].name);
    EXPECT_EQ(w.specs[i].shape, v.specs[i].shape);
    ASSERT_EQ(w.values[i].size(), v.data[i].size()) << v.specs[i].name;
    for (std::size_t j = 0; j < v.data[i].size(); ++j) {
      ASSERT_EQ(float_bits(w.values[i][j]), float_bits(v.data[i][j])) << v.specs[i].name << "[" << j << "]";
    }
  }
  const GptConfig h = read_llmc_header(p);
  EXPECT_EQ(h.describe(), c.describe());
  EXPECT_EQ(h.padded_vocab, 128);
}

TEST_F(LlmcWeightsTest, Bf16RoundTripRoundsToNearestEven) {
  const GptConfig c = tiny_config();
  Values v = random_values(c, 11);
  // Halfway cases and NaN at the start of wte: ties go to the even bf16, above-half rounds up.
  const std::uint32_t cases[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0xbf808000u, 0x7fc00001u, 0x3f80ffffu};
  const std::uint16_t expected[] = {0x3f80, 0x3f82, 0x3f81, 0xbf80, 0, 0x3f81};
  for (std::size_t i = 0; i < std::size(cases); ++i) v.data[0][i] = std::bit_cast<float>(cases[i]);

  const fs::path p = dir_ / "model_bf16.bin";
  write_llmc_weights(p, c, v.value_of(), DType::BF16);
  EXPECT_EQ(static_cast<std::int64_t>(fs::file_size(p)), kHeaderBytes + 2 * kTinyParams);
  const std::vector<unsigned char> raw = read_bytes(p);
  EXPECT_EQ(u32_at(raw, 4), 5u);  // version 5: bf16
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    const std::uint16_t bits = u16_at(raw, kHeaderBytes + 2 * static_cast<std::int64_t>(i));
    if (i == 4) {
      EXPECT_TRUE(std::isnan(bf16{bits}.to_float()));
    } else {
      EXPECT_EQ(bits, expected[i]) << "case " << i;
    }
  }

  const LlmcWeights w = read_llmc_weights(p);
  EXPECT_EQ(w.stored, DType::BF16);
  EXPECT_EQ(w.config.describe(), c.describe());
  for (std::size_t i = 0; i < v.specs.size(); ++i) {
    for (std::size_t j = 0; j < v.data[i].size(); ++j) {
      const float want = bf16::from_float(v.data[i][j]).to_float();
      ASSERT_EQ(float_bits(w.values[i][j]), float_bits(want)) << v.specs[i].name << "[" << j << "]";
    }
  }
}

TEST_F(LlmcWeightsTest, OverwritesAnExistingFile) {
  const GptConfig c = tiny_config();
  const fs::path p = dir_ / "model.bin";
  write_llmc_weights(p, c, random_values(c, 1).value_of(), DType::BF16);
  const Values second = random_values(c, 2);
  write_llmc_weights(p, c, second.value_of(), DType::F32);
  const LlmcWeights w = read_llmc_weights(p);
  EXPECT_EQ(w.stored, DType::F32);
  EXPECT_EQ(w.values, second.data);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"model.bin"});
}

// ---- the exact llm.c layout ----------------------------------------------------------------------

TEST_F(LlmcWeightsTest, HandLayoutTilesTheParameterArray) {
  // The table itself: consecutive, covering exactly parameter_count() elements.
  const GptConfig c = tiny_config();
  std::int64_t next = 0;
  for (const KindLayout& k : kTinyLayout) {
    EXPECT_EQ(k.offset, next) << static_cast<int>(k.kind);
    next += k.per_layer * (k.layered ? c.layers : 1);
  }
  EXPECT_EQ(next, kTinyParams);
  EXPECT_EQ(c.parameter_count(), kTinyParams);
}

TEST_F(LlmcWeightsTest, WriterProducesLlmcLayout) {
  const GptConfig c = tiny_config();
  const Values v = coded_values(c);
  for (const DType stored : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(stored));
    const fs::path p = dir_ / "layout.bin";
    write_llmc_weights(p, c, v.value_of(), stored);
    const std::vector<unsigned char> raw = read_bytes(p);
    const std::int64_t elem = stored == DType::F32 ? 4 : 2;
    ASSERT_EQ(static_cast<std::int64_t>(raw.size()), kHeaderBytes + elem * kTinyParams);

    const std::uint32_t head[] = {20240326u, stored == DType::F32 ? 3u : 5u, 3u, 5u, 2u, 2u, 4u, 8u};
    for (int i = 0; i < 256; ++i) EXPECT_EQ(u32_at(raw, 4 * i), i < 8 ? head[i] : 0u) << "header int " << i;

    for (const KindLayout& k : kTinyLayout) {
      for (int l = 0; l < (k.layered ? c.layers : 1); ++l) {
        const int layer = k.layered ? l : -1;
        for (std::int64_t i = 0; i < k.per_layer; ++i) {
          const std::int64_t at = kHeaderBytes + elem * (k.offset + l * k.per_layer + i);
          const std::uint16_t want = code_bits(k.kind, layer, i);
          if (stored == DType::F32) {
            ASSERT_EQ(u32_at(raw, at), static_cast<std::uint32_t>(want) << 16)
                << "kind " << static_cast<int>(k.kind) << " layer " << layer << " index " << i;
          } else {
            ASSERT_EQ(u16_at(raw, at), want) << "kind " << static_cast<int>(k.kind) << " layer " << layer << " index " << i;
          }
        }
      }
    }
  }
}

TEST_F(LlmcWeightsTest, ReaderFollowsLlmcLayout) {
  // A file assembled byte by byte from the hand table, independent of the writer.
  const GptConfig c = tiny_config();
  for (const DType stored : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(stored));
    const std::int64_t elem = stored == DType::F32 ? 4 : 2;
    std::vector<unsigned char> bytes = header({20240326, stored == DType::F32 ? 3 : 5, 3, 5, 2, 2, 4, 8});
    bytes.resize(static_cast<std::size_t>(kHeaderBytes + elem * kTinyParams));
    for (const KindLayout& k : kTinyLayout) {
      for (int l = 0; l < (k.layered ? c.layers : 1); ++l) {
        for (std::int64_t i = 0; i < k.per_layer; ++i) {
          const std::int64_t at = kHeaderBytes + elem * (k.offset + l * k.per_layer + i);
          const std::uint16_t bits = code_bits(k.kind, k.layered ? l : -1, i);
          if (stored == DType::F32) {
            put_u32(bytes, at, static_cast<std::uint32_t>(bits) << 16);
          } else {
            put_u16(bytes, at, bits);
          }
        }
      }
    }
    const fs::path p = dir_ / "hand.bin";
    write_bytes(p, bytes);

    const LlmcWeights w = read_llmc_weights(p);
    EXPECT_EQ(w.stored, stored);
    EXPECT_EQ(w.config.describe(), c.describe());
    EXPECT_EQ(w.config.padded_vocab, 8);
    const Values want = coded_values(c);
    ASSERT_EQ(w.specs.size(), want.specs.size());
    for (std::size_t s = 0; s < want.specs.size(); ++s) {
      EXPECT_EQ(w.specs[s].name, want.specs[s].name);
      EXPECT_EQ(w.values[s], want.data[s]) << want.specs[s].name;
    }
  }
}

TEST_F(LlmcWeightsTest, WriterAsksForTensorsInFileOrder) {
  const GptConfig c = tiny_config();
  const Values v = coded_values(c);
  std::vector<std::string> asked;
  const auto inner = v.value_of();
  write_llmc_weights(dir_ / "m.bin", c,
                     [&](const ParamSpec& s) {
                       asked.push_back(s.name);
                       return inner(s);
                     },
                     DType::F32);
  const std::vector<std::string> want = {
      "wte", "wpe", "h.0.ln1.weight", "h.1.ln1.weight", "h.0.ln1.bias", "h.1.ln1.bias",
      "h.0.attn.qkv.weight", "h.1.attn.qkv.weight", "h.0.attn.qkv.bias", "h.1.attn.qkv.bias",
      "h.0.attn.proj.weight", "h.1.attn.proj.weight", "h.0.attn.proj.bias", "h.1.attn.proj.bias",
      "h.0.ln2.weight", "h.1.ln2.weight", "h.0.ln2.bias", "h.1.ln2.bias",
      "h.0.mlp.fc.weight", "h.1.mlp.fc.weight", "h.0.mlp.fc.bias", "h.1.mlp.fc.bias",
      "h.0.mlp.proj.weight", "h.1.mlp.proj.weight", "h.0.mlp.proj.bias", "h.1.mlp.proj.bias",
      "lnf.weight", "lnf.bias"};
  EXPECT_EQ(asked, want);
}

// read_llmc_tensors (what --init-weights streams): every tensor once, in the file's order, with the
// bits read_llmc_weights gives, fp32 and bf16; another shape is refused before any tensor is seen.
TEST_F(LlmcWeightsTest, TensorsStreamInFileOrderWithTheSameBits) {
  const GptConfig c = tiny_config();
  for (const DType stored : {DType::F32, DType::BF16}) {
    const fs::path p = dir_ / "stream.bin";
    write_llmc_weights(p, c, random_values(c, 5).value_of(), stored);
    const LlmcWeights whole = read_llmc_weights(p);
    std::vector<std::string> order;
    read_llmc_tensors(p, c, [&](const ParamSpec& spec, std::span<const float> values) {
      order.push_back(spec.name);
      std::size_t i = 0;
      while (whole.specs[i].name != spec.name) ++i;
      EXPECT_EQ(std::vector<float>(values.begin(), values.end()), whole.values[i]) << spec.name;
    });
    ASSERT_EQ(order.size(), whole.specs.size());
    EXPECT_EQ(order.front(), "wte");
    EXPECT_EQ(order[2], "h.0.ln1.weight");
    EXPECT_EQ(order[3], "h.1.ln1.weight");  // kind-major, as llm.c stores them
    GptConfig other = c;
    other.layers = 3;
    bool visited = false;
    try {
      read_llmc_tensors(p, other, [&](const ParamSpec&, std::span<const float>) { visited = true; });
      ADD_FAILURE() << "another shape was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("has layers=2, the model wants layers=3"), std::string::npos) << e.message();
    }
    EXPECT_FALSE(visited);
  }
}

// ---- reader errors -------------------------------------------------------------------------------

TEST_F(LlmcWeightsTest, MissingFileAndDirectory) {
  expect_rejected(dir_ / "nope.bin", {"does not exist"});
  fs::create_directory(dir_ / "adir");
  expect_rejected(dir_ / "adir", {"is a directory"});
  write_bytes(dir_ / "plain", {1, 2, 3});
  expect_rejected(dir_ / "plain" / "x.bin", {"cannot open llm.c weights file", "Not a directory"});
}

TEST_F(LlmcWeightsTest, UnreadableFile) {
  const fs::path p = dir_ / "locked.bin";
  write_bytes(p, header({20240326, 3, 3, 5, 2, 2, 4, 8}));
  fs::permissions(p, fs::perms::none);
  if (::access(p.c_str(), R_OK) == 0) GTEST_SKIP() << "running with permission to read anything (root)";
  expect_rejected(p, {"cannot open", "Permission denied"});
}

TEST_F(LlmcWeightsTest, TooShortOrWrongMagic) {
  const fs::path p = dir_ / "bad.bin";
  write_bytes(p, {});
  expect_rejected(p, {"not an llm.c GPT-2 checkpoint", "holds 0 bytes"});
  write_bytes(p, {0x26, 0x0b});
  expect_rejected(p, {"holds 2 bytes"});

  std::vector<unsigned char> b = header({12345, 3, 3, 5, 2, 2, 4, 8});
  b.resize(b.size() + 4 * kTinyParams);
  write_bytes(p, b);
  expect_rejected(p, {"not an llm.c GPT-2 checkpoint (magic 12345, expected 20240326)"});
  // A short file with a wrong magic says the magic, the more telling fact.
  write_bytes(p, {1, 2, 3, 4, 5, 6, 7, 8});
  expect_rejected(p, {"(magic 67305985, expected 20240326)"});

  b = header({20240326, 3, 3, 5, 2, 2, 4, 8});
  b.resize(100);
  write_bytes(p, b);
  expect_rejected(p, {"truncated inside its header", "100 bytes"});
}

TEST_F(LlmcWeightsTest, UnsupportedVersion) {
  const fs::path p = dir_ / "v.bin";
  for (const std::int32_t version : {0, 1, 2, 4, 6, -3}) {
    std::vector<unsigned char> b = header({20240326, version, 3, 5, 2, 2, 4, 8});
    b.resize(b.size() + 4 * kTinyParams);
    write_bytes(p, b);
    expect_rejected(p, {"unsupported version " + std::to_string(version)});
  }
}

TEST_F(LlmcWeightsTest, InconsistentHeader) {
  const fs::path p = dir_ / "h.bin";
  struct Case {
    std::vector<std::int32_t> ints;  // maxT V L NH C Vp
    std::string says;
  };
  const Case cases[] = {
      {{3, 5, 2, 3, 4, 8}, "C (channels) 4 is not divisible by NH (heads) 3"},
      {{3, 5, 2, 2, 4, 4}, "Vp (padded vocab) 4 is smaller than V (vocab_size) 5"},
      {{0, 5, 2, 2, 4, 8}, "maxT (max_seq_len) is 0, must be positive"},
      {{3, -5, 2, 2, 4, 8}, "V (vocab_size) is -5, must be positive"},
      {{3, 5, 0, 2, 4, 8}, "L (layers) is 0, must be positive"},
      {{3, 5, 2, 0, 4, 8}, "NH (heads) is 0, must be positive"},
      {{3, 5, 2, 2, -4, 8}, "C (channels) is -4, must be positive"},
      {{3, 5, 2, 2, 4, 0}, "Vp (padded vocab) is 0, must be positive"},
      {{3, 5, INT_MAX, 1, INT_MAX, 8}, "overflow"},
      {{INT_MAX, INT_MAX, INT_MAX, 1, INT_MAX, INT_MAX}, "overflow"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.says);
    std::vector<unsigned char> b = header({20240326, 3});
    for (std::size_t i = 0; i < k.ints.size(); ++i) put_u32(b, 8 + 4 * static_cast<std::int64_t>(i), static_cast<std::uint32_t>(k.ints[i]));
    b.resize(b.size() + 4 * kTinyParams);
    write_bytes(p, b);
    expect_rejected(p, {"inconsistent header", k.says});
  }
}

TEST_F(LlmcWeightsTest, WrongFileSize) {
  const GptConfig c = tiny_config();
  const fs::path p = dir_ / "size.bin";
  write_llmc_weights(p, c, coded_values(c).value_of(), DType::F32);
  std::vector<unsigned char> b = read_bytes(p);
  ASSERT_EQ(b.size(), 3184u);

  b.pop_back();
  write_bytes(p, b);
  expect_rejected(p, {"shorter than its header implies", "expected 3184 bytes", "found 3183 bytes"});

  b.resize(3188);
  write_bytes(p, b);
  expect_rejected(p, {"longer than its header implies", "expected 3184 bytes", "found 3188 bytes"});

  b.resize(1024);  // the header alone
  write_bytes(p, b);
  expect_rejected(p, {"shorter", "expected 3184 bytes", "found 1024 bytes"});

  // bf16 halves the parameter bytes: the same header with version 5 wants 1024 + 2 x 540.
  put_u32(b, 4, 5);
  b.resize(3184);
  write_bytes(p, b);
  expect_rejected(p, {"longer", "expected 2104 bytes", "found 3184 bytes", "bf16"});

  // A gpt2-xl header on a header-only file fails on the size, without allocating 6 GB.
  const GptConfig xl = gpt_preset("gpt2-xl");
  b = header({20240326, 3, xl.max_seq_len, xl.vocab_size, xl.layers, xl.heads, xl.channels, xl.vocab_rows()});
  write_bytes(p, b);
  expect_rejected(p, {"shorter", "expected " + std::to_string(1024 + 4 * xl.parameter_count()) + " bytes",
                      "found 1024 bytes"});
}

// ---- writer errors and atomicity ----------------------------------------------------------------

TEST_F(LlmcWeightsTest, WriterRejectsBadArguments) {
  const GptConfig c = tiny_config();
  const Values v = coded_values(c);
  const fs::path p = dir_ / "w.bin";
  try {
    write_llmc_weights(p, c, v.value_of(), DType::I32);
    ADD_FAILURE() << "int32 accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("int32"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(p.string()), std::string::npos) << e.message();
  }
  GptConfig odd = c;
  odd.heads = 3;
  try {
    write_llmc_weights(p, odd, v.value_of(), DType::F32);
    ADD_FAILURE() << "channels 4 with heads 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("channels"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(p.string()), std::string::npos) << e.message();
  }
  try {
    write_llmc_weights(dir_ / "no_such_dir" / "w.bin", c, v.value_of(), DType::F32);
    ADD_FAILURE() << "missing directory accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("no_such_dir"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(dir_entries().empty());
}

TEST_F(LlmcWeightsTest, WrongValueCountLeavesNoFile) {
  const GptConfig c = tiny_config();
  const Values v = coded_values(c);
  const std::vector<float> short_qkv(47);
  const auto inner = v.value_of();
  const fs::path p = dir_ / "w.bin";
  try {
    write_llmc_weights(p, c,
                       [&](const ParamSpec& s) -> std::span<const float> {
                         if (s.name == "h.1.attn.qkv.weight") return short_qkv;
                         return inner(s);
                       },
                       DType::BF16);
    ADD_FAILURE() << "short tensor accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("h.1.attn.qkv.weight has 47 values, its shape needs 48"), std::string::npos)
        << e.message();
  }
  EXPECT_TRUE(dir_entries().empty());
}

TEST_F(LlmcWeightsTest, FailedWriteKeepsThePreviousFile) {
  const GptConfig c = tiny_config();
  const fs::path p = dir_ / "model.bin";
  write_llmc_weights(p, c, coded_values(c).value_of(), DType::F32);
  const std::vector<unsigned char> before = read_bytes(p);

  const Values other = random_values(c, 3);
  const auto inner = other.value_of();
  int calls = 0;
  EXPECT_THROW(write_llmc_weights(p, c,
                                  [&](const ParamSpec& s) {
                                    if (++calls == 10) throw std::runtime_error("source went away");
                                    return inner(s);
                                  },
                                  DType::F32),
               std::runtime_error);
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"model.bin"});  // no temporary left behind

  // And with nothing there before, nothing is there after.
  const fs::path fresh = dir_ / "fresh.bin";
  calls = 0;
  EXPECT_THROW(write_llmc_weights(fresh, c,
                                  [&](const ParamSpec& s) {
                                    if (++calls == 20) throw std::runtime_error("source went away");
                                    return inner(s);
                                  },
                                  DType::BF16),
               std::runtime_error);
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"model.bin"});
}

TEST_F(LlmcWeightsTest, RelativePathWritesIntoTheWorkingDirectory) {
  const GptConfig c = tiny_config();
  const fs::path old_cwd = fs::current_path();
  fs::current_path(dir_);
  write_llmc_weights("rel.bin", c, coded_values(c).value_of(), DType::F32);
  fs::current_path(old_cwd);
  EXPECT_EQ(read_llmc_weights(dir_ / "rel.bin").values, coded_values(c).data);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"rel.bin"});
}

// ---- compatibility -------------------------------------------------------------------------------

TEST(LlmcCompatible, SameShapePasses) {
  GptConfig a = tiny_config();
  EXPECT_NO_THROW(check_llmc_compatible(a, a, "x.bin"));
  GptConfig implicit_pad = a, explicit_pad = a;
  implicit_pad.vocab_size = explicit_pad.vocab_size = 100;
  implicit_pad.padded_vocab = 0;
  explicit_pad.padded_vocab = 128;
  EXPECT_NO_THROW(check_llmc_compatible(implicit_pad, explicit_pad, "x.bin"));
}

TEST(LlmcCompatible, ListsEveryDifferingField) {
  try {
    check_llmc_compatible(gpt_preset("tiny"), gpt_preset("gpt2"), "/ckpt/gpt2_124M.bin");
    ADD_FAILURE() << "gpt2 weights accepted for tiny";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "weights file '/ckpt/gpt2_124M.bin' has layers=12 heads=12 channels=768 max_seq_len=1024, "
              "the model wants layers=4 heads=4 channels=64 max_seq_len=64");
  }
  GptConfig want = tiny_config(), found = tiny_config();
  found.vocab_size = 6;
  try {
    check_llmc_compatible(want, found, "v.bin");
    ADD_FAILURE() << "vocab mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "weights file 'v.bin' has vocab_size=6, the model wants vocab_size=5");
  }
  found = tiny_config();
  found.padded_vocab = 16;
  try {
    check_llmc_compatible(want, found, "p.bin");
    ADD_FAILURE() << "padded vocab mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "weights file 'p.bin' has padded_vocab=16, the model wants padded_vocab=8");
  }
}

}  // namespace
}  // namespace mt
