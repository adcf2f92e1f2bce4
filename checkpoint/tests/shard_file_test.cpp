// Shard files: the header, data read back exactly, and every way a file can be wrong (cut short,
// a flipped byte, another magic, missing, a read beyond the end), each error naming the file.
#include "checkpoint/shard_file.h"  // defines: ShardWriter, ShardReader, checksum_hex, parse_checksum_hex

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "tests/scratch_dir.h"   // defines: ScratchDir
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;
using testing::ScratchDir;

std::vector<char> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A shard of rank 3 at step 4: 5 values, then 3 values.
FileEntry write_sample(const fs::path& dir) {
  ShardWriter writer(dir / "rank_00003.bin", 3, 4);
  const std::vector<float> a{1.0f, -2.5f, 3.25f, 0.0f, 1e-30f}, b{7.0f, 8.0f, 9.0f};
  EXPECT_EQ(writer.append(a), 64);
  EXPECT_EQ(writer.append(b), 64 + 5 * 4);
  EXPECT_EQ(writer.bytes(), 64 + 8 * 4);
  return writer.finish();
}

TEST(ShardChecksum, HexRoundTrips) {
  EXPECT_EQ(checksum_hex(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(checksum_hex(0), "0000000000000000");
  EXPECT_EQ(parse_checksum_hex("0123456789abcdef", "x"), 0x0123456789abcdefull);
  EXPECT_EQ(parse_checksum_hex("FFFFFFFFFFFFFFFF", "x"), ~0ull);
  EXPECT_EQ(error_of([] { parse_checksum_hex("0123", "files[2].xxh3"); }),
            "files[2].xxh3: checksum '0123' is not 16 hex digits");
  EXPECT_TRUE(contains(error_of([] { parse_checksum_hex("0123456789abcdex", "x"); }), "not 16 hex digits"));
}

TEST(ShardFile, RoundTrips) {
  ScratchDir dir("shard");
  const FileEntry entry = write_sample(dir.path());
  EXPECT_EQ(entry.name, "rank_00003.bin");
  EXPECT_EQ(entry.rank, 3);
  EXPECT_EQ(entry.bytes, 96);
  EXPECT_EQ(static_cast<std::int64_t>(fs::file_size(dir / "rank_00003.bin")), 96);

  const std::vector<char> bytes = read_bytes(dir / "rank_00003.bin");
  EXPECT_EQ(std::string(bytes.data(), 8), "MTCKPT01");
  std::int32_t rank = 0;
  std::int64_t step = 0;
  std::memcpy(&rank, bytes.data() + 8, sizeof(rank));
  std::memcpy(&step, bytes.data() + 16, sizeof(step));
  EXPECT_EQ(rank, 3);
  EXPECT_EQ(step, 4);
  for (std::size_t i = 24; i < 64; ++i) EXPECT_EQ(bytes[i], 0) << "header byte " << i;

  const ShardReader reader(dir.path(), entry);
  EXPECT_EQ(reader.path(), dir / "rank_00003.bin");
  std::vector<float> a(5), b(3), middle(2);
  reader.read(64, a);
  reader.read(84, b);
  reader.read(64 + 4 * 4, middle);
  EXPECT_EQ(a, (std::vector<float>{1.0f, -2.5f, 3.25f, 0.0f, 1e-30f}));
  EXPECT_EQ(b, (std::vector<float>{7.0f, 8.0f, 9.0f}));
  EXPECT_EQ(middle, (std::vector<float>{1e-30f, 7.0f}));
}

TEST(ShardFile, HeaderOnlyFile) {
  ScratchDir dir("shard");
  const FileEntry entry = ShardWriter(dir / "rank_00000.bin", 0, 0).finish();
  EXPECT_EQ(entry.bytes, 64);
  const ShardReader reader(dir.path(), entry);
  reader.read(64, {});
}

TEST(ShardFile, ReaderMoves) {
  ScratchDir dir("shard");
  const FileEntry entry = write_sample(dir.path());
  ShardReader first(dir.path(), entry);
  ShardReader moved(std::move(first));
  std::vector<float> b(3);
  moved.read(84, b);
  EXPECT_EQ(b[2], 9.0f);
  ShardReader other(dir.path(), entry);
  other = std::move(moved);
  other.read(84, b);
  EXPECT_EQ(b[0], 7.0f);
}

TEST(ShardFile, CutShort) {
  ScratchDir dir("shard");
  const FileEntry entry = write_sample(dir.path());
  fs::resize_file(dir / "rank_00003.bin", 70);
  const std::string message = error_of([&] { ShardReader(dir.path(), entry); });
  EXPECT_EQ(message,
            "shard file " + (dir / "rank_00003.bin").string() + " is 70 bytes, the manifest says 96: it was cut short");
}

TEST(ShardFile, FlippedByteIsAChecksumMismatch) {
  ScratchDir dir("shard");
  const FileEntry entry = write_sample(dir.path());
  std::vector<char> bytes = read_bytes(dir / "rank_00003.bin");
  bytes[90] = static_cast<char>(bytes[90] ^ 0x10);
  write_bytes(dir / "rank_00003.bin", bytes);
  const std::string message = error_of([&] { ShardReader(dir.path(), entry); });
  EXPECT_TRUE(contains(message, "checksum mismatch in shard file " + (dir / "rank_00003.bin").string())) << message;
  EXPECT_TRUE(contains(message, "the manifest says " + checksum_hex(entry.xxh3) + ": the file is corrupt")) << message;
}

TEST(ShardFile, WrongMagic) {
  ScratchDir dir("shard");
  const FileEntry entry = write_sample(dir.path());
  std::vector<char> bytes = read_bytes(dir / "rank_00003.bin");
  std::memcpy(bytes.data(), "MTCKPT02", 8);
  write_bytes(dir / "rank_00003.bin", bytes);
  EXPECT_TRUE(contains(error_of([&] { ShardReader(dir.path(), entry); }),
                       "does not start with the magic MTCKPT01: not a meshtrain shard file"));
}

TEST(ShardFile, RankDiffersFromTheManifest) {
  ScratchDir dir("shard");
  FileEntry entry = write_sample(dir.path());
  entry.rank = 2;
  EXPECT_TRUE(
      contains(error_of([&] { ShardReader(dir.path(), entry); }), "was written by rank 3, the manifest says rank 2"));
}

TEST(ShardFile, Missing) {
  ScratchDir dir("shard");
  const FileEntry entry{"rank_00005.bin", 5, 96, 0};
  EXPECT_EQ(error_of([&] { ShardReader(dir.path(), entry); }),
            "missing shard file " + (dir / "rank_00005.bin").string() + " (the manifest lists it)");
}

TEST(ShardFile, ReadBeyondTheEnd) {
  ScratchDir dir("shard");
  const ShardReader reader(dir.path(), write_sample(dir.path()));
  std::vector<float> out(4);
  const std::string message = error_of([&] { reader.read(84, out); });
  EXPECT_TRUE(contains(message, "bytes [84, 100) lie outside its data (bytes [64, 96))")) << message;
  EXPECT_TRUE(contains(error_of([&] { reader.read(60, std::span(out).first(1)); }), "lie outside its data"));
  EXPECT_TRUE(contains(error_of([&] { reader.read(-4, std::span(out).first(1)); }), "lie outside its data"));
}

TEST(ShardFile, CannotCreate) {
  ScratchDir dir("shard");
  const std::string message = error_of([&] { ShardWriter(dir / "no" / "rank_00000.bin", 0, 0); });
  EXPECT_TRUE(contains(
      message, "cannot create shard file " + (dir / "no" / "rank_00000.bin").string() + ": No such file or directory"))
      << message;
}

TEST(ShardFile, FullDiskIsNamed) {
  ShardWriter writer("/dev/full", 0, 0);
  const std::vector<float> data(1 << 16, 1.0f);  // more than stdio buffers: the write itself fails
  EXPECT_EQ(error_of([&] { writer.append(data); }), "cannot write shard file /dev/full: No space left on device");
}

}  // namespace
}  // namespace mt::ckpt
