// llm.c's GPT-2 checkpoint files (gpt2_124M.bin, gpt2_124M_bf16.bin, ...): read them into fp32
// parameters in gpt_parameter_specs() order, and write parameters back as fp32 (version 3) or
// bf16 (version 5) files that llm.c's train_gpt2.c / train_gpt2.cu load unchanged.
//
// The format (llm.c train_gpt2.cu: gpt2_build_from_checkpoint, gpt2_write_to_checkpoint):
//   a header of 256 little-endian int32:
//     [0] magic 20240326  [1] version (3: fp32 parameters, 5: bf16 parameters)
//     [2] maxT  [3] V  [4] L  [5] NH  [6] C  [7] Vp        the rest zero
//   then every parameter as one array, kind by kind in ParamKind order, each kind concatenated
//   over all layers:
//     wte [Vp,C]  wpe [maxT,C]  ln1w [L,C]  ln1b [L,C]  qkvw [L,3C,C]  qkvb [L,3C]
//     attprojw [L,C,C]  attprojb [L,C]  ln2w [L,C]  ln2b [L,C]  fcw [L,4C,C]  fcb [L,4C]
//     fcprojw [L,C,4C]  fcprojb [L,C]  lnfw [C]  lnfb [C]
// So the file is kind-major while gpt_parameter_specs() is layer-major: "h.l.attn.qkv.weight" is
// slice l of qkvw, with the same element order inside. Reader and writer only reorder whole tensors.
//
// Reading streams the file in chunks of a few MiB straight into the fp32 result (a 1.5B-parameter
// file is 6 GB; nothing beyond the result and one chunk is held), or tensor by tensor to a visitor
// (read_llmc_tensors). Every error names the file.
// defines: LlmcWeights, LlmcTensorVisitor, read_llmc_header, read_llmc_weights, read_llmc_tensors,
//          write_llmc_weights, check_llmc_compatible, llmc_file_bytes, kLlmcMagic, kLlmcVersionF32,
//          kLlmcVersionBF16, kLlmcHeaderInts
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <vector>

#include "models/gpt_config.h"      // defines: GptConfig
#include "models/gpt_parameters.h"  // defines: ParamSpec, gpt_parameter_specs
#include "runtime/dtype.h"          // defines: DType, bf16

namespace mt {

inline constexpr std::int32_t kLlmcMagic = 20240326;
inline constexpr std::int32_t kLlmcVersionF32 = 3;   // fp32 parameters, padded vocab
inline constexpr std::int32_t kLlmcVersionBF16 = 5;  // bf16 parameters (layernorms too), padded vocab
inline constexpr int kLlmcHeaderInts = 256;          // 1024 bytes

// The parameters of one llm.c file, as fp32. values[i] holds specs[i] (gpt_parameter_specs(config)
// order, specs[i].numel() elements); `stored` is what the file held (F32 or BF16).
struct LlmcWeights {
  GptConfig config;  // padded_vocab set explicitly from the header's Vp
  DType stored = DType::F32;
  std::vector<ParamSpec> specs;
  std::vector<std::vector<float>> values;
};

// The model shape in a file's header. Checks the whole header (magic, version, consistent and
// positive fields) and that the file's size is exactly what the header implies; throws Error
// naming the file otherwise. Reads 1 KiB.
GptConfig read_llmc_header(const std::filesystem::path& path);

// Every parameter of the file as fp32 (bf16 files are widened exactly). Same checks as
// read_llmc_header, then streams the parameters.
LlmcWeights read_llmc_weights(const std::filesystem::path& path);

// One parameter of a file being streamed: its spec and its spec.numel() fp32 values, valid until
// the call returns.
using LlmcTensorVisitor = std::function<void(const ParamSpec& spec, std::span<const float> values)>;

// Streams a file's parameters one at a time, in the file's order (kind-major), for loaders that
// copy each into place: holds one buffer of the largest parameter and one I/O chunk, never the
// whole model. The file's shape must be `expected` (check_llmc_compatible's Error, before any
// visit); otherwise the same checks as read_llmc_weights.
void read_llmc_tensors(const std::filesystem::path& path, const GptConfig& expected, const LlmcTensorVisitor& visit);

// Writes `config`'s parameters as an llm.c file: F32 -> version 3, BF16 -> version 5 (rounded to
// nearest even, as bf16::from_float). value_of(spec) is called once per spec, in the file's order
// (kind-major), and must return spec.numel() floats that stay valid until the next call.
// Atomic: writes a temporary file in the same directory, flushes it to disk and renames it into
// place; on any failure (including value_of throwing) the temporary is removed and whatever was
// under `path` before is left untouched.
void write_llmc_weights(const std::filesystem::path& path, const GptConfig& config,
                        const std::function<std::span<const float>(const ParamSpec&)>& value_of,
                        DType stored);

// Throws Error listing every field in which `found` (read from `path`) differs from `expected`:
// "weights file 'X' has layers=12 heads=12, the model wants layers=4 heads=4". Compares layers,
// heads, channels, max_seq_len, vocab_size and the resolved padded vocab.
void check_llmc_compatible(const GptConfig& expected, const GptConfig& found, const std::filesystem::path& path);

// Bytes of an llm.c file for `config` with parameters stored as `stored` (header included).
std::int64_t llmc_file_bytes(const GptConfig& config, DType stored);

}  // namespace mt
