// libFuzzer target: the bytes of an llm.c token shard, read as `meshtrain train` reads its data
// (ShardFile::open, check_vocab, read_shard_ids, and DataLoader::for_split over the directory, reading
// sequences of the first and a later epoch). Seeds: valid shards from write_shard, versions 1 and 2.
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string_view>
#include <vector>

#include "data/loader.h"  // defines: DataLoader
#include "data/shard.h"   // defines: ShardFile, read_shard_ids, write_shard
#include "tests/fuzz_support.h"

namespace {
namespace fs = std::filesystem;
using namespace mt::data;

void write_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const auto tokens = [](std::size_t n, int mod) {
    std::vector<std::uint16_t> t(n);
    for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>((i * 7919 + 13) % static_cast<std::size_t>(mod));
    return t;
  };
  write_shard(dir / "empty.bin", std::span<const std::uint16_t>());
  write_shard(dir / "bytes_17.bin", std::span<const std::uint16_t>(tokens(17, 256)));
  write_shard(dir / "bytes_200.bin", std::span<const std::uint16_t>(tokens(200, 256)));
  write_shard(dir / "gpt2_64.bin", std::span<const std::uint16_t>(tokens(64, 50257)));
  write_shard(dir / "wide_9.bin", std::span<const std::uint16_t>(tokens(9, 65536)));
  std::vector<std::int32_t> cl100k(40);
  for (std::size_t i = 0; i < cl100k.size(); ++i) cl100k[i] = static_cast<std::int32_t>((i * 7919 + 13) % 100277);
  write_shard(dir / "cl100k_40.bin", std::span<const std::int32_t>(cl100k), kShardVersionUint32, 100277);
}

// The loader as training opens it; windows of both epochs, and its state saved and restored.
void read_with_loader(const fs::path& dir, int seq_len) {
  DataLoader loader = DataLoader::for_split(dir, "train", seq_len, /*seed=*/1337, /*vocab_size=*/256);
  const int count = static_cast<int>(std::min<std::int64_t>(loader.sequences_per_epoch(), 3));
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(count) * seq_len), targets(inputs.size());
  loader.read(0, count, inputs, targets);
  loader.read(loader.sequences_per_epoch() + 1, 1, std::span(inputs).first(static_cast<std::size_t>(seq_len)),
              std::span(targets).first(static_cast<std::size_t>(seq_len)));
  for (std::size_t i = 0; i < inputs.size(); ++i) FUZZ_CHECK(inputs[i] >= 0 && inputs[i] < 256);
  loader.next(1, std::span(inputs).first(static_cast<std::size_t>(seq_len)),
              std::span(targets).first(static_cast<std::size_t>(seq_len)));
  const LoaderState state = loader.state();
  loader.reset();
  loader.restore(state);
  FUZZ_CHECK(loader.position() == 1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mt::fuzz::handle_write_seeds(argc, argv, write_seeds);
  fs::create_directories(mt::fuzz::fuzz_dir() / "shards");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path dir = mt::fuzz::fuzz_dir() / "shards";
  const fs::path file = dir / "fuzz_train_000000.bin";
  mt::fuzz::write_input(file, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const ShardFile shard = ShardFile::open(file);
    // Accepted: exactly a header and the tokens it announces.
    FUZZ_CHECK(kShardHeaderBytes + (shard.wide() ? 4 : 2) * static_cast<std::size_t>(shard.size()) == size);
    try {
      shard.check_vocab(256);
    } catch (const std::exception&) {
    }
    const std::vector<std::int32_t> all = read_shard_ids(file, 50257);
    FUZZ_CHECK(all.size() == static_cast<std::size_t>(shard.size()));
  } catch (const std::exception&) {
  }
  for (int seq_len : {1, 7}) {
    try {
      read_with_loader(dir, seq_len);
    } catch (const std::exception&) {
    }
  }
  return 0;
}
