// The deterministic loader: windows and shifting, order with and without shuffling, epochs,
// random access against the cursor, checkpoint state, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "data/loader.h"
#include "data/tests/data_test_util.h"
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt::data {
namespace {
using mt::testing::contains;
using mt::testing::error_of;
using testing::ScratchDir;
namespace fs = std::filesystem;

constexpr int kT = 10;

// Shards whose token at position j of shard s is s * 2000 + j, so a window names where it came
// from. Sizes 101, 57 and 8 give 10 + 5 + 0 windows of T = 10 (the last shard is too short).
std::vector<fs::path> make_shards(const fs::path& dir, std::vector<int> sizes = {101, 57, 8}) {
  std::vector<fs::path> files;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    std::vector<std::uint16_t> t(static_cast<std::size_t>(sizes[s]));
    for (int j = 0; j < sizes[s]; ++j) t[static_cast<std::size_t>(j)] = static_cast<std::uint16_t>(s * 2000 + j);
    files.push_back(dir / shard_file_name("toy", "train", static_cast<int>(s)));
    write_shard(files.back(), std::span<const std::uint16_t>(t));
  }
  return files;
}

LoaderOptions opts(std::uint64_t seed, bool shuffle, int T = kT) {
  LoaderOptions o;
  o.seq_len = T;
  o.seed = seed;
  o.shuffle = shuffle;
  return o;
}

// The first input token of each of `count` sequences from `first` on: (shard * 2000 + offset).
std::vector<int> starts(const DataLoader& loader, std::int64_t first, int count) {
  const std::size_t n = static_cast<std::size_t>(count) * static_cast<std::size_t>(loader.seq_len());
  std::vector<std::int32_t> in(n), tg(n);
  loader.read(first, count, in, tg);
  std::vector<int> out;
  for (int k = 0; k < count; ++k) out.push_back(in[static_cast<std::size_t>(k * loader.seq_len())]);
  return out;
}

TEST(LoaderTest, WindowsPerShardAtStrideT) {
  ScratchDir dir;
  DataLoader loader(make_shards(dir.path()), opts(1, false));
  EXPECT_EQ(loader.sequences_per_epoch(), 15);
  EXPECT_EQ(loader.tokens_per_epoch(), 150);
  EXPECT_EQ(loader.num_shards(), 3u);
  // Exactly T + 1 tokens make one window; 2T tokens still one.
  DataLoader edge(make_shards(dir.path(), {11, 20, 21}), opts(1, false));
  EXPECT_EQ(edge.sequences_per_epoch(), 1 + 1 + 2);
}

TEST(LoaderTest, TargetsAreInputsShiftedByOne) {
  ScratchDir dir;
  DataLoader loader(make_shards(dir.path()), opts(3, true));
  std::vector<std::int32_t> in(4 * kT), tg(4 * kT);
  loader.read(7, 4, in, tg);
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < kT; ++j) {
      const std::size_t i = static_cast<std::size_t>(k * kT + j);
      EXPECT_EQ(tg[i], in[i] + 1);
      if (j + 1 < kT) {
        EXPECT_EQ(in[i + 1], tg[i]);
      }
    }
    EXPECT_EQ(in[static_cast<std::size_t>(k * kT)] % 2000 % kT, 0);  // windows start at multiples of T
  }
}

TEST(LoaderTest, WithoutShuffleFileOrderEveryEpoch) {
  ScratchDir dir;
  DataLoader loader(make_shards(dir.path()), opts(99, false));
  std::vector<int> expect;
  for (int w = 0; w < 10; ++w) expect.push_back(w * kT);
  for (int w = 0; w < 5; ++w) expect.push_back(2000 + w * kT);
  EXPECT_EQ(starts(loader, 0, 15), expect);
  EXPECT_EQ(starts(loader, 15, 15), expect);
  EXPECT_EQ(starts(loader, 45, 15), expect);
  // The seed does not matter without shuffling, fingerprint included.
  DataLoader other(make_shards(dir.path()), opts(5, false));
  EXPECT_EQ(other.fingerprint(), loader.fingerprint());
}

TEST(LoaderTest, SameSeedSameOrderOtherSeedOtherOrder) {
  ScratchDir dir;
  const auto files = make_shards(dir.path(), {401, 301});  // 70 windows
  DataLoader a(files, opts(42, true)), b(files, opts(42, true)), c(files, opts(43, true));
  EXPECT_EQ(starts(a, 0, 140), starts(b, 0, 140));
  EXPECT_NE(starts(a, 0, 70), starts(c, 0, 70));
  DataLoader plain(files, opts(42, false));
  EXPECT_NE(starts(a, 0, 70), starts(plain, 0, 70));
}

TEST(LoaderTest, EveryWindowOncePerEpochInANewOrderEachEpoch) {
  ScratchDir dir;
  DataLoader loader(make_shards(dir.path(), {401, 301, 5, 95}), opts(7, true));
  const std::int64_t W = loader.sequences_per_epoch();
  ASSERT_EQ(W, 40 + 30 + 0 + 9);
  std::set<int> all;
  for (int v : starts(DataLoader(make_shards(dir.path(), {401, 301, 5, 95}), opts(0, false)), 0, static_cast<int>(W))) {
    all.insert(v);
  }
  ASSERT_EQ(static_cast<std::int64_t>(all.size()), W);
  std::vector<std::vector<int>> orders;
  for (int epoch = 0; epoch < 4; ++epoch) {
    orders.push_back(starts(loader, epoch * W, static_cast<int>(W)));
    EXPECT_EQ(std::set<int>(orders.back().begin(), orders.back().end()), all) << "epoch " << epoch;
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST(LoaderTest, EpochBoundaryInsideOneBatch) {
  ScratchDir dir;
  DataLoader loader(make_shards(dir.path()), opts(11, true));  // W = 15
  const auto epoch0 = starts(loader, 0, 15);
  const auto epoch1 = starts(loader, 15, 15);
  std::vector<std::int32_t> in(4 * kT), tg(4 * kT);
  loader.seek(13);
  EXPECT_EQ(loader.epoch(), 0);
  loader.next(4, in, tg);  // sequences 13, 14 | 15, 16
  EXPECT_EQ(loader.position(), 17);
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(in[0], epoch0[13]);
  EXPECT_EQ(in[kT], epoch0[14]);
  EXPECT_EQ(in[2 * kT], epoch1[0]);
  EXPECT_EQ(in[3 * kT], epoch1[1]);
}

TEST(LoaderTest, RandomAccessEqualsSequentialNext) {
  ScratchDir dir;
  DataLoader loader(make_shards(dir.path()), opts(5, true));
  std::vector<std::int32_t> all_in, all_tg;
  std::vector<std::int32_t> in(3 * kT), tg(3 * kT);
  for (int step = 0; step < 12; ++step) {  // 36 sequences: more than two epochs
    loader.next(3, in, tg);
    all_in.insert(all_in.end(), in.begin(), in.end());
    all_tg.insert(all_tg.end(), tg.begin(), tg.end());
  }
  // Two "ranks" each reading half of every global batch of 6 by index see the same data.
  std::vector<std::int32_t> rin(3 * kT), rtg(3 * kT);
  for (int batch = 0; batch < 6; ++batch) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::int64_t first = batch * 6 + rank * 3;
      loader.read(first, 3, rin, rtg);
      EXPECT_TRUE(std::equal(rin.begin(), rin.end(), all_in.begin() + first * kT));
      EXPECT_TRUE(std::equal(rtg.begin(), rtg.end(), all_tg.begin() + first * kT));
    }
  }
  loader.reset();
  EXPECT_EQ(loader.position(), 0);
  loader.next(3, in, tg);
  EXPECT_TRUE(std::equal(in.begin(), in.end(), all_in.begin()));
}

TEST(LoaderTest, StateRestoreMidEpochContinuesIdentically) {
  ScratchDir dir;
  const auto files = make_shards(dir.path());
  DataLoader first(files, opts(21, true));
  std::vector<std::int32_t> in(2 * kT), tg(2 * kT);
  first.next(2, in, tg);
  first.next(2, in, tg);
  first.next(2, in, tg);  // mid-epoch: 6 of 15
  const LoaderState saved = first.state();
  EXPECT_EQ(saved.next_sequence, 6);
  std::vector<std::int32_t> expect;
  for (int i = 0; i < 8; ++i) {
    first.next(2, in, tg);
    expect.insert(expect.end(), in.begin(), in.end());
  }
  DataLoader second(files, opts(21, true));  // as after a restart
  second.restore(saved);
  std::vector<std::int32_t> got;
  for (int i = 0; i < 8; ++i) {
    second.next(2, in, tg);
    got.insert(got.end(), in.begin(), in.end());
  }
  EXPECT_EQ(got, expect);
}

TEST(LoaderTest, RestoreIntoAMismatchedLoaderThrows) {
  ScratchDir dir;
  const auto files = make_shards(dir.path());
  DataLoader loader(files, opts(21, true));
  loader.seek(4);
  const LoaderState saved = loader.state();
  DataLoader other_seed(files, opts(22, true));
  std::string msg = error_of([&] { other_seed.restore(saved); });
  EXPECT_TRUE(contains(msg, "cannot restore the data loader")) << msg;
  DataLoader other_len(files, opts(21, true, 9));
  EXPECT_FALSE(error_of([&] { other_len.restore(saved); }).empty());
  DataLoader other_files({files[0]}, opts(21, true));
  EXPECT_FALSE(error_of([&] { other_files.restore(saved); }).empty());
  DataLoader unshuffled(files, opts(21, false));
  EXPECT_FALSE(error_of([&] { unshuffled.restore(saved); }).empty());
  EXPECT_EQ(other_seed.position(), 0);  // a refused restore leaves the cursor alone
}

TEST(LoaderTest, TooShortDataNamesTheDirectory) {
  ScratchDir dir;
  const auto files = make_shards(dir.path(), {5, 10});
  const std::string msg = error_of([&] { DataLoader(files, opts(1, true)); });
  EXPECT_TRUE(contains(msg, dir.path().string())) << msg;
  EXPECT_TRUE(contains(msg, "11 tokens")) << msg;
  EXPECT_FALSE(error_of([&] { DataLoader({}, opts(1, true)); }).empty());
}

// A split too short for one sequence names the split, its files and the fix. Before, 30 validation
// tokens under --seq-len 32 said only `too little data in "p_utf8": ... the longest of the 1
// shard(s) holds 30 tokens`, whatever the split.
TEST(LoaderTest, TooShortSplitNamesTheSplitTheFilesAndTheFix) {
  ScratchDir dir;
  const std::vector<std::uint16_t> train(37, 1), val(30, 1);
  write_shard(dir / "p_train_000000.bin", std::span<const std::uint16_t>(train));
  write_shard(dir / "p_val_000000.bin", std::span<const std::uint16_t>(val));
  EXPECT_NO_THROW(DataLoader::for_split(dir.path(), "train", 32, 1, 0));
  std::string msg = error_of<UsageError>([&] { DataLoader::for_split(dir.path(), "val", 32, 1, 0); });
  EXPECT_EQ(msg, "too little data in the validation shards of \"" + dir.path().string() +
                     "\" (p_val_000000.bin): a sequence of --seq-len 32 needs 33 tokens in one shard, and the longest "
                     "holds 30: give a shorter --seq-len (at most 29), or prepare more text (or with a larger "
                     "--val-fraction)");
  msg = error_of<UsageError>([&] { DataLoader::for_split(dir.path(), "train", 40, 1, 0); });
  EXPECT_TRUE(contains(msg, "too little data in the train shards of")) << msg;
  EXPECT_TRUE(contains(msg, "(p_train_000000.bin): a sequence of --seq-len 40 needs 41 tokens")) << msg;
  EXPECT_TRUE(contains(msg, "(at most 36), or prepare more text")) << msg;
  EXPECT_FALSE(contains(msg, "--val-fraction")) << msg;
}

// Two corpora prepared into one directory under two names: training read both sets' shards and mixed
// their ids (byte ids with GPT-2 ids: "370.3k train tokens in 2 shard(s)"). Refused, naming both; one
// set's many shards (llm.c's fineweb_train_000001.bin ...), or tinyshakespeare's unnumbered names, pass.
TEST(LoaderTest, ForSplitRefusesTheShardsOfTwoCorpora) {
  ScratchDir dir;
  const std::vector<std::uint16_t> t(50, 1);
  for (const char* name : {"data_train_000000.bin", "data_val_000000.bin", "other_train_000000.bin",
                           "other_train_000001.bin"})
    write_shard(dir / name, std::span<const std::uint16_t>(t));
  const std::string msg = error_of<UsageError>([&] { DataLoader::for_split(dir.path(), "train", kT, 3, 0); });
  EXPECT_EQ(msg, "data directory \"" + dir.path().string() + "\" holds the train shards of 2 corpora, \"data\" "
                 "(data_train_000000.bin) and \"other\" (other_train_000000.bin and 1 more), and training would mix "
                 "their token ids: prepare each corpus into a directory of its own (meshtrain prepare --output) and "
                 "train on one");
  EXPECT_NO_THROW(DataLoader::for_split(dir.path(), "val", kT, 3, 0));  // one set's
  EXPECT_EQ(shard_set_name(dir / "fineweb_train_000001.bin", "train"), "fineweb");
  EXPECT_EQ(shard_set_name(dir / "tiny_shakespeare_val.bin", "val"), "tiny_shakespeare");

  ScratchDir llmc;
  for (const char* name : {"fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"})
    write_shard(llmc / name, std::span<const std::uint16_t>(t));
  EXPECT_EQ(DataLoader::for_split(llmc.path(), "train", kT, 3, 0).num_shards(), 2u);
  EXPECT_EQ(DataLoader::for_split(llmc.path(), "val", kT, 3, 0).num_shards(), 1u);
}

// Version-2 shards record the vocabulary of the tokenizer that wrote them: shards of one name but
// two vocabularies are two corpora too.
TEST(LoaderTest, ShardsOfTwoRecordedVocabulariesAreRefused) {
  ScratchDir dir;
  const std::vector<std::int32_t> t(50, 70000);
  write_shard(dir / "c_train_000000.bin", std::span<const std::int32_t>(t), kShardVersionUint32, 100277);
  write_shard(dir / "c_train_000001.bin", std::span<const std::int32_t>(t), kShardVersionUint32, 200019);
  const std::string msg = error_of<UsageError>([&] { DataLoader::for_split(dir.path(), "train", kT, 3, 0); });
  EXPECT_TRUE(contains(msg, "c_train_000000.bin")) << msg;
  EXPECT_TRUE(contains(msg, "c_train_000001.bin")) << msg;
  EXPECT_TRUE(contains(msg, "tokenizers of 100277 and 200019 tokens")) << msg;
  write_shard(dir / "c_train_000001.bin", std::span<const std::int32_t>(t), kShardVersionUint32, 100277);
  EXPECT_NO_THROW(DataLoader::for_split(dir.path(), "train", kT, 3, 0));
}

TEST(LoaderTest, ForSplitShufflesTrainOnlyAndMissingSplitThrows) {
  ScratchDir dir;
  make_shards(dir.path());
  DataLoader train = DataLoader::for_split(dir.path(), "train", kT, 3, 0);
  EXPECT_TRUE(train.options().shuffle);
  const std::string msg = error_of([&] { DataLoader::for_split(dir.path(), "val", kT, 3, 0); });
  EXPECT_TRUE(contains(msg, "*_val_NNNNNN.bin")) << msg;
}

TEST(LoaderTest, TokensOutsideTheVocabularyAreReported) {
  ScratchDir dir;
  LoaderOptions o = opts(1, false);
  o.vocab_size = 2050;  // shard 1 holds ids 2000..2056
  DataLoader loader(make_shards(dir.path()), o);
  std::vector<std::int32_t> in(kT), tg(kT);
  loader.read(13, 1, in, tg);  // tokens 2030..2040: fine
  const std::string msg = error_of([&] { loader.read(14, 1, in, tg); });  // 2040..2050
  EXPECT_TRUE(contains(msg, "toy_train_000001.bin")) << msg;
  EXPECT_TRUE(contains(msg, "token id 2050 at position 50")) << msg;
  EXPECT_TRUE(contains(msg, "sequence 14")) << msg;
}

TEST(LoaderTest, BufferSizesAndIndicesAreChecked) {
  ScratchDir dir;
  DataLoader loader(make_shards(dir.path()), opts(1, true));
  std::vector<std::int32_t> in(2 * kT), tg(2 * kT - 1);
  EXPECT_TRUE(contains(error_of([&] { loader.read(0, 2, in, tg); }), "20 elements"));
  std::vector<std::int32_t> ok(kT);
  EXPECT_FALSE(error_of([&] { loader.read(-1, 1, ok, ok); }).empty());
  EXPECT_FALSE(error_of([&] { loader.seek(-3); }).empty());
}

TEST(LoaderTest, PermutationIsABijectionAtManySizes) {
  for (std::int64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 100, 255, 256, 257, 1000, 4097}) {
    for (std::int64_t epoch : {0, 1, 9}) {
      std::vector<char> seen(static_cast<std::size_t>(n), 0);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t p = window_permutation(i, n, 12345, epoch);
        ASSERT_TRUE(p >= 0 && p < n) << n;
        ASSERT_EQ(seen[static_cast<std::size_t>(p)]++, 0) << "n " << n << " index " << i;
      }
    }
  }
}

TEST(LoaderTest, MillionsOfWindowsCostNothingUpFront) {
  // Three million windows: the whole permutation, checked to be one, in well under a second.
  const std::int64_t n = 3'000'000;
  std::vector<bool> seen(static_cast<std::size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t fixed_points = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t p = window_permutation(i, n, 7, 3);
    ASSERT_FALSE(seen[static_cast<std::size_t>(p)]);
    seen[static_cast<std::size_t>(p)] = true;
    fixed_points += p == i;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(fixed_points, 20);  // a random permutation has 1 on average
  EXPECT_LT(seconds, 5.0);
  // Any single index of any epoch is available at once.
  EXPECT_GE(window_permutation(n - 1, n, 7, 1'000'000), 0);
}

TEST(LoaderTest, ReadsVersion2ShardsAndChecksTheirIds) {
  ScratchDir dir;
  std::vector<std::int32_t> t(41);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = 100000 + static_cast<std::int32_t>(i);
  t[35] = 100277;  // beyond cl100k's vocabulary, in the last window
  write_shard(dir / "cl_train_000000.bin", std::span<const std::int32_t>(t), kShardVersionUint32, 100277);
  LoaderOptions o = opts(0, false);
  o.vocab_size = 100277;
  const DataLoader loader({dir / "cl_train_000000.bin"}, o);
  ASSERT_EQ(loader.sequences_per_epoch(), 4);
  std::vector<std::int32_t> in(2 * kT), tg(2 * kT);
  loader.read(0, 2, in, tg);
  EXPECT_EQ(in[0], 100000);
  EXPECT_EQ(tg[0], 100001);
  EXPECT_EQ(in[kT], 100000 + kT);
  EXPECT_EQ(tg[2 * kT - 1], 100000 + 2 * kT);
  const std::string msg = error_of([&] { loader.read(3, 1, std::span(in).first(kT), std::span(tg).first(kT)); });
  EXPECT_TRUE(contains(msg, "holds token id 100277 at position 35, outside the vocabulary of 100277 tokens")) << msg;
  EXPECT_TRUE(contains(msg, "(reading sequence 3)")) << msg;
}

TEST(LoaderTest, ReadingABatchOf4x1024TakesMicroseconds) {
  ScratchDir dir;
  std::vector<std::uint16_t> t(1 << 20);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::uint16_t>(i * 7919 % 50257);
  write_shard(dir / "big_train_000000.bin", std::span<const std::uint16_t>(t));
  LoaderOptions o = opts(1, true, 1024);
  o.vocab_size = 50257;
  DataLoader loader({dir / "big_train_000000.bin"}, o);
  std::vector<std::int32_t> in(4 * 1024), tg(4 * 1024);
  loader.next(4, in, tg);  // touch the pages once
  const int reps = 200;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) loader.next(4, in, tg);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
  RecordProperty("microseconds_per_4x1024_batch", std::to_string(us));
  EXPECT_LT(us, 2000.0);  // loose for sanitizer/debug builds; ~5-20 us in release
}

}  // namespace
}  // namespace mt::data
