// libFuzzer target: the bytes of one checkpoint shard file (rank_00000.bin of the sample
// checkpoint, fuzz_checkpoint_sample.h), read through CheckpointReader twice: under the saved
// manifest (size and XXH3 checksum must reject any change), and under a manifest that vouches for
// the input (its size and checksum), so the fuzzer reaches the header, rank and data reads behind
// the checksum. Seeds: the sample's shard files, written by RankWriter.
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <xxhash.h>  // defines: XXH3_64bits

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "checkpoint/checkpoint_dir.h"  // defines: read_manifest, shard_file_name
#include "checkpoint/tensor_io.h"       // defines: CheckpointReader
#include "checkpoint/tests/fuzz_checkpoint_sample.h"  // defines: start_sample_fuzzer, read_bytes
#include "tests/fuzz_support.h"

namespace {
namespace fs = std::filesystem;
using namespace mt::ckpt;

void write_seeds(const fs::path& dir, const fs::path& sample) {
  for (int rank : {0, 1}) {
    mt::fuzz::write_seed(dir, shard_file_name(rank), fuzz::read_bytes(sample / shard_file_name(rank)));
  }
}

fs::path step_dir;
Manifest saved;       // as the save wrote it
std::string original;  // rank_00000.bin as saved

std::size_t read_all_tensors(CheckpointReader& reader) {
  std::size_t read = 0;
  for (const TensorEntry& tensor : reader.manifest().tensors) {
    try {
      reader.read_whole(tensor.name);
      ++read;
    } catch (const std::exception&) {
    }
  }
  return read;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  step_dir = fuzz::start_sample_fuzzer(argc, argv, write_seeds);
  saved = read_manifest(step_dir);
  original = fuzz::read_bytes(step_dir / shard_file_name(0));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  mt::fuzz::write_input(step_dir / shard_file_name(0), input);

  // The saved manifest: only the saved bytes pass (every tensor but those wholly in rank 1's file
  // reads from this one).
  {
    CheckpointReader reader(step_dir, saved);
    const std::size_t read = read_all_tensors(reader);
    if (input != original) FUZZ_CHECK(read == 0);
  }

  // A manifest that vouches for these bytes, written and parsed as a real one.
  Manifest vouching = saved;
  for (FileEntry& file : vouching.files) {
    if (file.name != shard_file_name(0)) continue;
    file.bytes = static_cast<std::int64_t>(size);
    file.xxh3 = XXH3_64bits(data, size);
  }
  mt::fuzz::write_input(step_dir / "manifest.json", vouching.to_json());
  try {
    CheckpointReader reader(step_dir);
    read_all_tensors(reader);
  } catch (const std::exception&) {
  }
  return 0;
}
