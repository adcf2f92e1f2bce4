#include "models/llmc/llmc_weights.h"

#include <fcntl.h>     // open, O_* flags
#include <sys/stat.h>  // fstat, S_ISDIR
#include <unistd.h>    // read, write, fsync, close, unlink, getpid

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "io/atomic_file.h"
#include "runtime/error.h"

namespace mt {
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kHeaderBytes = kLlmcHeaderInts * sizeof(std::int32_t);
constexpr std::size_t kChunkBytes = std::size_t{8} << 20;  // I/O granularity: 8 MiB

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// ---- little-endian encoding, independent of the host's byte order -----------------------------

std::uint32_t load_le32(const unsigned char* b) {
  return static_cast<std::uint32_t>(b[0]) | static_cast<std::uint32_t>(b[1]) << 8 |
         static_cast<std::uint32_t>(b[2]) << 16 | static_cast<std::uint32_t>(b[3]) << 24;
}
std::uint16_t load_le16(const unsigned char* b) {
  return static_cast<std::uint16_t>(b[0] | b[1] << 8);
}
void store_le32(unsigned char* b, std::uint32_t v) {
  b[0] = static_cast<unsigned char>(v);
  b[1] = static_cast<unsigned char>(v >> 8);
  b[2] = static_cast<unsigned char>(v >> 16);
  b[3] = static_cast<unsigned char>(v >> 24);
}
void store_le16(unsigned char* b, std::uint16_t v) {
  b[0] = static_cast<unsigned char>(v);
  b[1] = static_cast<unsigned char>(v >> 8);
}

// Stored elements (fp32 or bf16) -> fp32.
void decode(const unsigned char* in, DType stored, float* out, std::size_t n) {
  if (stored == DType::F32) {
    for (std::size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(load_le32(in + 4 * i));
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16{load_le16(in + 2 * i)}.to_float();
  }
}

// fp32 -> stored elements; bf16 rounds to nearest even.
void encode(const float* in, DType stored, unsigned char* out, std::size_t n) {
  if (stored == DType::F32) {
    for (std::size_t i = 0; i < n; ++i) store_le32(out + 4 * i, std::bit_cast<std::uint32_t>(in[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) store_le16(out + 2 * i, bf16::from_float(in[i]).bits);
  }
}

// ---- sizes --------------------------------------------------------------------------------------

// Elements of all parameters (llm.c's fill_in_parameter_sizes, summed), or nothing when the sum
// does not fit in int64. Per layer: ln1 2C + qkv 3C^2+3C + proj C^2+C + ln2 2C + fc 4C^2+4C +
// fcproj 4C^2+C = 12C^2 + 13C.
std::optional<std::int64_t> checked_parameter_count(std::int64_t max_seq_len, std::int64_t layers,
                                                    std::int64_t channels, std::int64_t vocab_rows) {
  std::int64_t c2 = 0, quad = 0, lin = 0, per_layer = 0, blocks = 0, wte = 0, wpe = 0, total = 0;
  const bool overflow = __builtin_mul_overflow(channels, channels, &c2) ||
                        __builtin_mul_overflow(c2, std::int64_t{12}, &quad) ||
                        __builtin_mul_overflow(channels, std::int64_t{13}, &lin) ||
                        __builtin_add_overflow(quad, lin, &per_layer) ||
                        __builtin_mul_overflow(layers, per_layer, &blocks) ||
                        __builtin_mul_overflow(vocab_rows, channels, &wte) ||
                        __builtin_mul_overflow(max_seq_len, channels, &wpe) ||
                        __builtin_add_overflow(blocks, wte, &total) ||
                        __builtin_add_overflow(total, wpe, &total) ||
                        __builtin_add_overflow(total, 2 * channels, &total);
  if (overflow) return std::nullopt;
  return total;
}

// Header + parameters in bytes, or nothing on int64 overflow.
std::optional<std::int64_t> checked_file_bytes(std::int64_t parameters, DType stored) {
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(parameters, static_cast<std::int64_t>(dtype_size(stored)), &bytes) ||
      __builtin_add_overflow(bytes, static_cast<std::int64_t>(kHeaderBytes), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

// Indices of `specs` in the file's order. ParamKind's order is the file's, and within one kind the
// layer-major spec list already has layers ascending, so a stable sort by kind is llm.c's layout.
std::vector<std::size_t> file_order(const std::vector<ParamSpec>& specs) {
  std::vector<std::size_t> order(specs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return specs[a].kind < specs[b].kind; });
  return order;
}

// ---- files --------------------------------------------------------------------------------------

// A POSIX file descriptor, closed when it goes out of scope.
class FileHandle {
 public:
  explicit FileHandle(int fd) : fd_(fd) {}
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  ~FileHandle() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

int open_for_reading(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) MT_FAIL("llm.c weights file ", quoted(path), " does not exist");
    MT_FAIL("cannot open llm.c weights file ", quoted(path), ": ", std::strerror(err));
  }
  return fd;
}

// Reads up to n bytes; fewer only at the end of the file.
std::size_t read_some(int fd, unsigned char* dst, std::size_t n, const fs::path& path) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd, dst + done, n - done);
    if (got < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      MT_FAIL("reading llm.c weights file ", quoted(path), " failed: ", std::strerror(err));
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

struct Header {
  GptConfig config;
  DType stored = DType::F32;
  std::int64_t parameters = 0;  // elements
};

// Reads and checks the header at the start of `fd` (left positioned after it) and checks the file
// size against it.
Header read_header(int fd, const fs::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    MT_FAIL("cannot stat llm.c weights file ", quoted(path), ": ", std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) MT_FAIL(quoted(path), " is a directory, not an llm.c weights file");
  const std::int64_t actual_bytes = st.st_size;

  unsigned char raw[kHeaderBytes];
  const std::size_t got = read_some(fd, raw, kHeaderBytes, path);
  if (got < 4) {
    MT_FAIL(quoted(path), " is not an llm.c GPT-2 checkpoint: it holds ", got, " bytes, less than the ",
            kHeaderBytes, "-byte header");
  }
  std::int32_t h[kLlmcHeaderInts] = {};
  for (std::size_t i = 0; i < got / 4; ++i) h[i] = static_cast<std::int32_t>(load_le32(raw + 4 * i));
  if (h[0] != kLlmcMagic) {
    MT_FAIL(quoted(path), " is not an llm.c GPT-2 checkpoint (magic ", h[0], ", expected ", kLlmcMagic, ")");
  }
  if (got < kHeaderBytes) {
    MT_FAIL("llm.c weights file ", quoted(path), " is truncated inside its header: ", got,
            " bytes, the header alone is ", kHeaderBytes);
  }

  Header out;
  const std::int32_t version = h[1];
  if (version == kLlmcVersionF32) {
    out.stored = DType::F32;
  } else if (version == kLlmcVersionBF16) {
    out.stored = DType::BF16;
  } else {
    MT_FAIL("llm.c weights file ", quoted(path), " has unsupported version ", version, " (supported: ",
            kLlmcVersionF32, " = fp32 parameters, ", kLlmcVersionBF16, " = bf16 parameters)");
  }

  GptConfig& c = out.config;
  c.max_seq_len = h[2];
  c.vocab_size = h[3];
  c.layers = h[4];
  c.heads = h[5];
  c.channels = h[6];
  c.padded_vocab = h[7];
  const std::string bad = "llm.c weights file " + quoted(path) + " has an inconsistent header: ";
  const struct {
    const char* name;
    int value;
  } fields[] = {{"maxT (max_seq_len)", c.max_seq_len}, {"V (vocab_size)", c.vocab_size}, {"L (layers)", c.layers},
                {"NH (heads)", c.heads},               {"C (channels)", c.channels},    {"Vp (padded vocab)", c.padded_vocab}};
  for (const auto& f : fields) {
    if (f.value <= 0) MT_FAIL(bad, f.name, " is ", f.value, ", must be positive");
  }
  if (c.channels % c.heads != 0) {
    MT_FAIL(bad, "C (channels) ", c.channels, " is not divisible by NH (heads) ", c.heads);
  }
  if (c.padded_vocab < c.vocab_size) {
    MT_FAIL(bad, "Vp (padded vocab) ", c.padded_vocab, " is smaller than V (vocab_size) ", c.vocab_size);
  }

  const std::optional<std::int64_t> parameters =
      checked_parameter_count(c.max_seq_len, c.layers, c.channels, c.padded_vocab);
  const std::optional<std::int64_t> expected_bytes =
      parameters ? checked_file_bytes(*parameters, out.stored) : std::nullopt;
  if (!expected_bytes) {
    MT_FAIL(bad, "sizes ", c.describe(), " overflow: the parameters would need more than 2^63 bytes");
  }
  out.parameters = *parameters;
  if (actual_bytes != *expected_bytes) {
    MT_FAIL("llm.c weights file ", quoted(path), " is ", actual_bytes < *expected_bytes ? "shorter" : "longer",
            " than its header implies: expected ", *expected_bytes, " bytes (", kHeaderBytes, "-byte header + ",
            out.parameters, " ", dtype_name(out.stored), " parameters of ", c.describe(), "), found ",
            actual_bytes, " bytes");
  }
  return out;
}


}  // namespace

std::int64_t llmc_file_bytes(const GptConfig& config, DType stored) {
  MT_CHECK(stored == DType::F32 || stored == DType::BF16, "llm.c weights are stored as fp32 or bf16, not ",
           dtype_name(stored));
  config.validate();
  const std::optional<std::int64_t> parameters =
      checked_parameter_count(config.max_seq_len, config.layers, config.channels, config.vocab_rows());
  const std::optional<std::int64_t> bytes = parameters ? checked_file_bytes(*parameters, stored) : std::nullopt;
  if (!bytes) MT_FAIL("llm.c weights of ", config.describe(), " would need more than 2^63 bytes");
  return *bytes;
}

GptConfig read_llmc_header(const fs::path& path) {
  const FileHandle file(open_for_reading(path));
  return read_header(file.get(), path).config;
}

namespace {

// Streams every parameter of the open file (positioned after its header) in the file's order:
// parameter idx is decoded into dst_of(idx) (specs[idx].numel() floats), then done(idx) is called.
template <class DstOf, class Done>
void stream_parameters(int fd, const Header& header, const std::vector<ParamSpec>& specs, const fs::path& path,
                       DstOf dst_of, Done done) {
  const std::size_t elem = dtype_size(header.stored);
  const std::size_t chunk_elems = kChunkBytes / elem;
  std::vector<unsigned char> chunk(chunk_elems * elem);
  for (const std::size_t idx : file_order(specs)) {
    float* dst = dst_of(idx);
    std::size_t left = static_cast<std::size_t>(specs[idx].numel());
    while (left > 0) {
      const std::size_t n = std::min(left, chunk_elems);
      if (read_some(fd, chunk.data(), n * elem, path) != n * elem) {
        MT_FAIL("llm.c weights file ", quoted(path), " ended early while reading ", specs[idx].name,
                " (did it change while being read?)");
      }
      decode(chunk.data(), header.stored, dst, n);
      dst += n;
      left -= n;
    }
    done(idx);
  }
}

}  // namespace

LlmcWeights read_llmc_weights(const fs::path& path) {
  const FileHandle file(open_for_reading(path));
  const Header header = read_header(file.get(), path);

  LlmcWeights w;
  w.config = header.config;
  w.stored = header.stored;
  w.specs = gpt_parameter_specs(w.config);
  w.values.resize(w.specs.size());
  for (std::size_t i = 0; i < w.specs.size(); ++i) w.values[i].resize(static_cast<std::size_t>(w.specs[i].numel()));
  stream_parameters(
      file.get(), header, w.specs, path, [&](std::size_t idx) { return w.values[idx].data(); }, [](std::size_t) {});
  return w;
}

void read_llmc_tensors(const fs::path& path, const GptConfig& expected, const LlmcTensorVisitor& visit) {
  const FileHandle file(open_for_reading(path));
  const Header header = read_header(file.get(), path);
  check_llmc_compatible(expected, header.config, path);
  const std::vector<ParamSpec> specs = gpt_parameter_specs(header.config);
  std::int64_t largest = 0;
  for (const ParamSpec& spec : specs) largest = std::max(largest, spec.numel());
  std::vector<float> tensor(static_cast<std::size_t>(largest));  // one buffer, sized once
  stream_parameters(
      file.get(), header, specs, path, [&](std::size_t) { return tensor.data(); },
      [&](std::size_t idx) {
        visit(specs[idx], std::span<const float>(tensor.data(), static_cast<std::size_t>(specs[idx].numel())));
      });
}

void write_llmc_weights(const fs::path& path, const GptConfig& config,
                        const std::function<std::span<const float>(const ParamSpec&)>& value_of, DType stored) {
  if (stored != DType::F32 && stored != DType::BF16) {
    MT_FAIL("cannot write llm.c weights file ", quoted(path), " as ", dtype_name(stored),
            ": llm.c stores fp32 (version 3) or bf16 (version 5)");
  }
  MT_CHECK(static_cast<bool>(value_of), "write_llmc_weights needs a value_of function (writing ", quoted(path), ")");
  std::int64_t expected_bytes = 0;
  try {
    expected_bytes = llmc_file_bytes(config, stored);
  } catch (const Error& e) {
    MT_FAIL("cannot write llm.c weights file ", quoted(path), ": ", e.message());
  }

  unsigned char header[kHeaderBytes] = {};
  const std::int32_t fields[] = {kLlmcMagic,
                                 stored == DType::F32 ? kLlmcVersionF32 : kLlmcVersionBF16,
                                 config.max_seq_len,
                                 config.vocab_size,
                                 config.layers,
                                 config.heads,
                                 config.channels,
                                 config.vocab_rows()};
  for (std::size_t i = 0; i < std::size(fields); ++i) store_le32(header + 4 * i, static_cast<std::uint32_t>(fields[i]));

  AtomicFile out(path, "llm.c weights file");
  out.write(header, kHeaderBytes);
  std::int64_t written = kHeaderBytes;

  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  const std::size_t elem = dtype_size(stored);
  const std::size_t chunk_elems = kChunkBytes / elem;
  std::vector<unsigned char> chunk(chunk_elems * elem);
  for (const std::size_t idx : file_order(specs)) {
    const ParamSpec& spec = specs[idx];
    const std::span<const float> values = value_of(spec);
    if (static_cast<std::int64_t>(values.size()) != spec.numel()) {
      MT_FAIL("cannot write llm.c weights file ", quoted(path), ": parameter ", spec.name, " has ", values.size(),
              " values, its shape needs ", spec.numel());
    }
    for (std::size_t done = 0; done < values.size();) {
      const std::size_t n = std::min(values.size() - done, chunk_elems);
      encode(values.data() + done, stored, chunk.data(), n);
      out.write(chunk.data(), n * elem);
      done += n;
    }
    written += static_cast<std::int64_t>(values.size() * elem);
  }
  MT_CHECK(written == expected_bytes, "llm.c weights file ", quoted(path), ": wrote ", written,
           " bytes, the layout needs ", expected_bytes);
  out.commit();
}

void check_llmc_compatible(const GptConfig& expected, const GptConfig& found, const fs::path& path) {
  const struct {
    const char* name;
    int wanted, has;
  } fields[] = {{"layers", expected.layers, found.layers},
                {"heads", expected.heads, found.heads},
                {"channels", expected.channels, found.channels},
                {"max_seq_len", expected.max_seq_len, found.max_seq_len},
                {"vocab_size", expected.vocab_size, found.vocab_size},
                {"padded_vocab", expected.vocab_rows(), found.vocab_rows()}};
  std::string has, wants;
  for (const auto& f : fields) {
    if (f.wanted == f.has) continue;
    has += " " + std::string(f.name) + "=" + std::to_string(f.has);
    wants += " " + std::string(f.name) + "=" + std::to_string(f.wanted);
  }
  if (!has.empty()) MT_FAIL("weights file ", quoted(path), " has", has, ", the model wants", wants);
}

}  // namespace mt
