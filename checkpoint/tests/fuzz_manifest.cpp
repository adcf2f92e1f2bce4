// libFuzzer target: the text of a checkpoint's manifest.json (and of the per-rank sidecars, which
// share its parser), read as a resume or `meshtrain convert` reads it: CheckpointReader over a
// step directory whose shard files are real (the sample checkpoint, fuzz_checkpoint_sample.h), then
// every tensor read whole and in part, so the pieces, slices, offsets and checksums the manifest
// claims meet real files. Seeds: the sample's manifest and sidecars, written by the save path.
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_dir.h"  // defines: prepare_partial, partial_dir, sidecar_name, assemble_manifest
#include "checkpoint/tensor_io.h"       // defines: CheckpointReader, RankWriter
#include "checkpoint/tests/fuzz_checkpoint_sample.h"  // defines: start_sample_fuzzer, read_bytes
#include "tests/fuzz_support.h"

namespace {
namespace fs = std::filesystem;
using namespace mt::ckpt;

void write_seeds(const fs::path& dir, const fs::path& sample) {
  mt::fuzz::write_seed(dir, "manifest.json", fuzz::read_bytes(sample / "manifest.json"));
  // A sidecar: one rank's part, as assemble_manifest parses it.
  const fs::path root = sample.parent_path();
  const fs::path partial = partial_dir(root, 99);
  prepare_partial(root, 99);
  RankWriter writer(partial, 3, 99);
  writer.add("param/x", {2, 3}, {{Box{{1, 0}, {1, 3}}}, 1, 3}, std::vector<float>{1.0f, 2.0f});
  writer.finish();
  mt::fuzz::write_seed(dir, "sidecar.json", fuzz::read_bytes(partial / sidecar_name(3)));
}

fs::path step_dir;  // of the sample checkpoint this process reads against

// Every tensor whole, and the first element along the first dimension alone.
void read_everything(CheckpointReader& reader) {
  for (const TensorEntry& tensor : reader.manifest().tensors) {
    try {
      reader.read_whole(tensor.name);
    } catch (const std::exception&) {
    }
    if (tensor.shape.empty() || tensor.shape[0] < 1) continue;
    Shape one = tensor.shape;
    one[0] = 1;
    try {
      Slice part{{Box{Shape(one.size(), 0), one}}, 0, 0};
      part.end = part.boxes_numel();
      if (part.end > (std::int64_t{1} << 24)) continue;
      std::vector<float> out(static_cast<std::size_t>(part.end));
      reader.read(tensor.name, part, out);
    } catch (const std::exception&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  step_dir = fuzz::start_sample_fuzzer(argc, argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mt::fuzz::write_input(step_dir / "manifest.json", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    CheckpointReader reader(step_dir);
    read_everything(reader);
  } catch (const std::exception&) {
  }
  return 0;
}
