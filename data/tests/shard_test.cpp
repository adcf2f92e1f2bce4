// llm.c token shards: round trips, the header layout, atomic replacement, and every bad-file error.
#include <gtest/gtest.h>

#include <numeric>

#include "data/shard.h"
#include "data/tests/data_test_util.h"
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt::data {
namespace {
using mt::testing::contains;
using mt::testing::error_of;
using testing::raw_shard;
using testing::ScratchDir;
using testing::write_bytes;
namespace fs = std::filesystem;

TEST(ShardTest, RoundTripKeepsTokensAndWritesTheLlmcHeader) {
  ScratchDir dir;
  std::vector<std::uint16_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), std::uint16_t{65000 - 999});
  tokens[0] = 0;
  tokens[1] = 65535;
  const fs::path file = dir / "x_train_000000.bin";
  write_shard(file, std::span<const std::uint16_t>(tokens));

  EXPECT_EQ(read_shard(file), tokens);
  EXPECT_EQ(fs::file_size(file), kShardHeaderBytes + 2 * tokens.size());
  const std::string bytes = testing::read_bytes(file);
  std::int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 1000);
  for (std::size_t i = 3; i < kShardHeaderInts; ++i) EXPECT_EQ(bytes[4 * i], 0);

  ShardFile shard = ShardFile::open(file);
  EXPECT_EQ(shard.size(), 1000);
  EXPECT_EQ(shard.tokens()[1], 65535);
  ShardFile moved = std::move(shard);  // the mapping moves with it
  EXPECT_EQ(moved.tokens()[999], tokens[999]);
  EXPECT_EQ(moved.path(), file);
}

TEST(ShardTest, Int32WriterAndEmptyShard) {
  ScratchDir dir;
  const std::vector<std::int32_t> ids = {0, 1, 50256, 65535};
  write_shard(dir / "a.bin", std::span<const std::int32_t>(ids));
  EXPECT_EQ(read_shard(dir / "a.bin"), (std::vector<std::uint16_t>{0, 1, 50256, 65535}));
  write_shard(dir / "empty.bin", std::span<const std::uint16_t>());
  EXPECT_TRUE(read_shard(dir / "empty.bin").empty());
}

TEST(ShardTest, RewriteReplacesAtomicallyAndLeavesNoTemporaryFile) {
  ScratchDir dir;
  const fs::path file = dir / "s.bin";
  write_shard(file, std::span<const std::int32_t>(std::vector<std::int32_t>(500, 7)));
  write_shard(file, std::span<const std::int32_t>(std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(read_shard(file), (std::vector<std::uint16_t>{1, 2, 3}));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(ShardTest, TokenAbove65535CannotBeWritten) {
  ScratchDir dir;
  const fs::path file = dir / "big.bin";
  std::string msg = error_of([&] { write_shard(file, std::span<const std::int32_t>(std::vector<std::int32_t>{5, 65536})); });
  EXPECT_TRUE(contains(msg, "65536")) << msg;
  EXPECT_TRUE(contains(msg, "big.bin")) << msg;
  EXPECT_TRUE(contains(msg, "uint16")) << msg;
  msg = error_of([&] { write_shard(file, std::span<const std::int32_t>(std::vector<std::int32_t>{-1})); });
  EXPECT_TRUE(contains(msg, "-1")) << msg;
  EXPECT_FALSE(fs::exists(file));
}

TEST(ShardTest, MissingFile) {
  ScratchDir dir;
  const std::string msg = error_of([&] { read_shard(dir / "nope.bin"); });
  EXPECT_TRUE(contains(msg, "nope.bin")) << msg;
  EXPECT_TRUE(contains(msg, "No such file")) << msg;
}

TEST(ShardTest, WrongMagicSaysWhatWasFound) {
  ScratchDir dir;
  write_bytes(dir / "m.bin", raw_shard(1234567, 1, 2, {1, 2}));
  const std::string msg = error_of([&] { ShardFile::open(dir / "m.bin"); });
  EXPECT_TRUE(contains(msg, "m.bin")) << msg;
  EXPECT_TRUE(contains(msg, "not an llm.c token shard")) << msg;
  EXPECT_TRUE(contains(msg, "1234567")) << msg;
  EXPECT_TRUE(contains(msg, "20240520")) << msg;
}

TEST(ShardTest, UnsupportedVersion) {
  // Version 2 (uint32 ids) is supported now: 3 is the first version this reader does not know.
  ScratchDir dir;
  write_bytes(dir / "v.bin", raw_shard(kShardMagic, 3, 2, {1, 2}));
  const std::string msg = error_of([&] { ShardFile::open(dir / "v.bin"); });
  EXPECT_TRUE(contains(msg, "v.bin")) << msg;
  EXPECT_TRUE(contains(msg, "version 3")) << msg;
}

TEST(ShardTest, Version2HoldsUint32IdsAndTheWritersVocabulary) {
  ScratchDir dir;
  const std::vector<std::int32_t> ids = {100257, 0, 65535, 65536, 100276, 2147483647};
  const fs::path file = dir / "cl_train_000000.bin";
  write_shard(file, std::span<const std::int32_t>(ids), kShardVersionUint32, 100277);
  EXPECT_EQ(fs::file_size(file), kShardHeaderBytes + 4 * ids.size());
  const std::string bytes = testing::read_bytes(file);
  std::int32_t header[5];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 2);
  EXPECT_EQ(header[2], 6);
  EXPECT_EQ(header[3], 100277);
  EXPECT_EQ(header[4], 0);
  EXPECT_EQ(read_shard_ids(file), ids);

  ShardFile shard = ShardFile::open(file);
  EXPECT_EQ(shard.version(), 2);
  EXPECT_TRUE(shard.wide());
  EXPECT_EQ(shard.written_vocab(), 100277);
  EXPECT_EQ(shard.tokens32()[3], 65536u);
  std::vector<std::int32_t> window(3);
  shard.copy(2, 3, window.data());
  EXPECT_EQ(window, (std::vector<std::int32_t>{65535, 65536, 100276}));
  EXPECT_TRUE(contains(error_of([&] { shard.tokens(); }), "uint32"));
  // The vocabulary check names the id, the position, the vocabulary and what the shard was written for.
  const std::string msg = error_of([&] { shard.check_vocab(50257); });
  EXPECT_TRUE(contains(msg, "cl_train_000000.bin\" holds token id 100257 at position 0, outside the vocabulary of "
                            "50257 tokens (the shard was written by a tokenizer of 100277 tokens: --tokenizer cl100k)")) << msg;
  EXPECT_TRUE(contains(error_of([&] { read_shard_ids(file, 100277); }), "token id 2147483647 at position 5"));
  // Version 1 stays what it was: read_shard_ids reads it too.
  write_shard(dir / "v1.bin", std::span<const std::int32_t>(std::vector<std::int32_t>{7, 65535}));
  EXPECT_EQ(ShardFile::open(dir / "v1.bin").version(), 1);
  EXPECT_EQ(read_shard_ids(dir / "v1.bin"), (std::vector<std::int32_t>{7, 65535}));
  EXPECT_TRUE(contains(error_of([&] {
    write_shard(dir / "neg.bin", std::span<const std::int32_t>(std::vector<std::int32_t>{-5}), kShardVersionUint32);
  }), "-5"));
  EXPECT_EQ(shard_version_for(256), 1);
  EXPECT_EQ(shard_version_for(65536), 1);
  EXPECT_EQ(shard_version_for(65537), 2);
}

TEST(ShardTest, Version2SizesAreCheckedInUint32s) {
  ScratchDir dir;
  // 2 uint16 payload values are 4 bytes: one uint32 token, not the 2 the header announces.
  write_bytes(dir / "v2.bin", raw_shard(kShardMagic, 2, 2, {1, 2}));
  const std::string msg = error_of([&] { ShardFile::open(dir / "v2.bin"); });
  EXPECT_TRUE(contains(msg, "(version 2, uint32 tokens) is truncated")) << msg;
  EXPECT_TRUE(contains(msg, "8 bytes after the header")) << msg;
  write_bytes(dir / "v2t.bin", raw_shard(kShardMagic, 2, 1, {1, 2, 3}));
  EXPECT_TRUE(contains(error_of([&] { ShardFile::open(dir / "v2t.bin"); }), "2 trailing bytes"));
}

TEST(ShardTest, ReadsLlmcsOwnUint32Shards) {
  // llm.c's Llama 3 shards: magic 20240801, version 7, uint32 ids (dev/data/data_common.py).
  ScratchDir dir;
  write_bytes(dir / "l3.bin", raw_shard(20240801, 7, 2, {0x0001, 0x0002, 0x86A1, 0x0001}));
  const ShardFile shard = ShardFile::open(dir / "l3.bin");
  EXPECT_TRUE(shard.wide());
  EXPECT_EQ(shard.written_vocab(), 0);
  EXPECT_EQ(read_shard_ids(dir / "l3.bin"), (std::vector<std::int32_t>{0x00020001, 0x000186A1}));
}

TEST(ShardTest, TruncatedPayload) {
  ScratchDir dir;
  write_bytes(dir / "t.bin", raw_shard(kShardMagic, 1, 10, {1, 2, 3}));
  const std::string msg = error_of([&] { ShardFile::open(dir / "t.bin"); });
  EXPECT_TRUE(contains(msg, "t.bin")) << msg;
  EXPECT_TRUE(contains(msg, "truncated")) << msg;
  EXPECT_TRUE(contains(msg, "10 tokens")) << msg;
  EXPECT_TRUE(contains(msg, "holds 6 bytes")) << msg;
}

TEST(ShardTest, ShorterThanTheHeader) {
  ScratchDir dir;
  write_bytes(dir / "h.bin", raw_shard(kShardMagic, 1, 0, {}).substr(0, 100));
  std::string msg = error_of([&] { ShardFile::open(dir / "h.bin"); });
  EXPECT_TRUE(contains(msg, "h.bin")) << msg;
  EXPECT_TRUE(contains(msg, "100 bytes")) << msg;
  EXPECT_TRUE(contains(msg, "header")) << msg;
  write_bytes(dir / "zero.bin", "");
  EXPECT_TRUE(contains(error_of([&] { ShardFile::open(dir / "zero.bin"); }), "0 bytes"));
  write_bytes(dir / "text.bin", "hello, world\n");  // short and not a shard at all
  msg = error_of([&] { ShardFile::open(dir / "text.bin"); });
  EXPECT_TRUE(contains(msg, "not an llm.c token shard")) << msg;
}

TEST(ShardTest, TrailingBytes) {
  ScratchDir dir;
  write_bytes(dir / "x.bin", raw_shard(kShardMagic, 1, 2, {1, 2}) + "abc");
  const std::string msg = error_of([&] { ShardFile::open(dir / "x.bin"); });
  EXPECT_TRUE(contains(msg, "x.bin")) << msg;
  EXPECT_TRUE(contains(msg, "3 trailing bytes")) << msg;
}

TEST(ShardTest, TokenOutsideTheVocabulary) {
  ScratchDir dir;
  write_shard(dir / "o.bin", std::span<const std::int32_t>(std::vector<std::int32_t>{1, 2, 300, 4}));
  EXPECT_EQ(read_shard(dir / "o.bin", 301).size(), 4u);
  const std::string msg = error_of([&] { read_shard(dir / "o.bin", 256); });
  EXPECT_TRUE(contains(msg, "o.bin")) << msg;
  EXPECT_TRUE(contains(msg, "token id 300 at position 2")) << msg;
  EXPECT_TRUE(contains(msg, "256")) << msg;
}

TEST(ShardTest, FindShardsSortsBySplitAndNumber) {
  ScratchDir dir;
  const std::vector<std::uint16_t> t = {1, 2};
  for (const char* name : {"d_train_000002.bin", "d_train_000000.bin", "d_train_000001.bin", "d_val_000000.bin",
                           "d_train_000001.bin.tmp-1-0", "notes.txt", "d_training_000000.bin"}) {
    write_shard(dir / name, std::span<const std::uint16_t>(t));
  }
  fs::create_directories(dir / "e_train_000003.bin");  // a directory: skipped
  const auto train = find_shards(dir.path(), "train");
  ASSERT_EQ(train.size(), 3u);
  EXPECT_EQ(train[0].filename(), "d_train_000000.bin");
  EXPECT_EQ(train[2].filename(), "d_train_000002.bin");
  const auto val = find_shards(dir.path(), "val");
  ASSERT_EQ(val.size(), 1u);
  EXPECT_EQ(val[0].filename(), "d_val_000000.bin");
  EXPECT_EQ(shard_file_name("d", "val", 12), "d_val_000012.bin");

  // tinyshakespeare.py's names (no number) are found too.
  write_shard(dir / "tiny_shakespeare_test.bin", std::span<const std::uint16_t>(t));
  EXPECT_EQ(find_shards(dir.path(), "test").size(), 1u);
}

TEST(ShardTest, FindShardsErrorsNameTheDirectoryAndPattern) {
  ScratchDir dir;
  std::string msg = error_of([&] { find_shards(dir.path(), "train"); });
  EXPECT_TRUE(contains(msg, dir.path().string())) << msg;
  EXPECT_TRUE(contains(msg, "*_train_NNNNNN.bin")) << msg;
  msg = error_of([&] { find_shards(dir / "absent", "val"); });
  EXPECT_TRUE(contains(msg, "absent")) << msg;
  EXPECT_TRUE(contains(msg, "does not exist")) << msg;
}

}  // namespace
}  // namespace mt::data
