// Corpus preparation: documents from fortune files and plain files, text cleaning and encodings,
// the train/validation split, shard names and rollover, determinism, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "data/loader.h"
#include "data/prepare.h"
#include "data/tests/data_test_util.h"
#include "data/tokenizer/tokenizer.h"  // defines: make_tokenizer, default_tokenizer_dir
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt::data {
namespace {
using mt::testing::contains;
using mt::testing::error_of;
using testing::FakeByteTokenizer;
using testing::ScratchDir;
using testing::write_bytes;
namespace fs = std::filesystem;

// Documents per split, decoded: the shard tokens cut at each eot (id 0 for bytes tokenizers).
std::vector<std::string> decoded_documents(const std::vector<fs::path>& shards, const Tokenizer& tok) {
  std::vector<std::int32_t> all;
  for (const fs::path& s : shards) {
    for (std::uint16_t t : read_shard(s, tok.vocab_size())) all.push_back(t);
  }
  std::vector<std::string> docs;
  if (all.empty()) return docs;
  EXPECT_EQ(all.front(), tok.eot_token());
  std::size_t begin = 1;
  for (std::size_t i = 1; i <= all.size(); ++i) {
    if (i == all.size() || all[i] == tok.eot_token()) {
      docs.push_back(tok.decode(std::span<const std::int32_t>(all.data() + begin, i - begin)));
      begin = i + 1;
    }
  }
  return docs;
}

// A small corpus: a fortune file of 40 numbered entries, one with three, and a plain file.
struct Corpus {
  std::vector<fs::path> files;
  std::vector<std::string> documents;  // in order
};

Corpus make_corpus(const fs::path& dir) {
  Corpus c;
  std::string many;
  for (int i = 0; i < 40; ++i) {
    const std::string doc = "Fortune number " + std::to_string(i) + ".\n" + (i % 3 == 0 ? "  -- a second line\n" : "");
    many += doc + "%\n";
    c.documents.push_back(doc);
  }
  write_bytes(dir / "numbered", many);
  write_bytes(dir / "quotes", "First fortune.\n%\nSecond one,\n100% on two lines.\n%\n\n%\nThird: caf\xc3\xa9.\n");
  c.documents.insert(c.documents.end(), {"First fortune.\n", "Second one,\n100% on two lines.\n", "Third: caf\xc3\xa9.\n"});
  write_bytes(dir / "essay.txt", "A plain file\nwith no separators.\n");
  c.documents.push_back("A plain file\nwith no separators.\n");
  c.files = {dir / "numbered", dir / "quotes", dir / "essay.txt"};
  return c;
}

PrepareOptions options_for(const Corpus& c, const fs::path& out) {
  PrepareOptions o;
  o.tokenizer = "bytes";
  o.inputs = c.files;
  o.output_dir = out;
  o.val_fraction = 0.2;
  return o;
}

TEST(PrepareTest, FortuneFilesSplitOnPercentLinesOtherFilesAreOneDocument) {
  EXPECT_EQ(split_documents("a\n%\nb\nc\n%\n", "f"), (std::vector<std::string>{"a\n", "b\nc\n"}));
  EXPECT_EQ(split_documents("%\na\n%\n   \n\t\n%\nlast line, no newline", "f"),
            (std::vector<std::string>{"a\n", "last line, no newline"}));
  EXPECT_EQ(split_documents("50% off\n%%\n", "f"), (std::vector<std::string>{"50% off\n%%\n"}));
  EXPECT_EQ(split_documents("x\r\n%\r\ny\r\n", "f"), (std::vector<std::string>{"x\n", "y\n"}));
  EXPECT_TRUE(split_documents(" \n\n", "f").empty());
  EXPECT_TRUE(split_documents("", "f").empty());
}

TEST(PrepareTest, CleaningResolvesOverstrikeAndDropsControls) {
  EXPECT_EQ(clean_text("An _\bI satisfies"), "An I satisfies");
  EXPECT_EQ(clean_text("*____\b\b\b\bonly* ones"), "*only* ones");
  EXPECT_EQ(clean_text("B\bBo\bol\bld\bd"), "Bold");
  EXPECT_EQ(clean_text("ring\a\a!\tok\r\nnext\rline\n"), "ring!\tok\nnext\nline\n");
  EXPECT_EQ(clean_text("_\b\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");  // underlined é stays one character
}

TEST(PrepareTest, NonUtf8IsReadAsWindows1252) {
  bool transcoded = false;
  auto docs = split_documents("caf\xe9 \x93quoted\x94\n", "latin", TextHandling::clean, &transcoded);
  EXPECT_TRUE(transcoded);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0], "caf\xc3\xa9 \xe2\x80\x9cquoted\xe2\x80\x9d\n");
  docs = split_documents("\xef\xbb\xbf" "caf\xc3\xa9\n", "utf8", TextHandling::clean, &transcoded);
  EXPECT_FALSE(transcoded);
  EXPECT_EQ(docs[0], "caf\xc3\xa9\n");  // BOM dropped
  std::string msg = error_of<PrepareError>([] { split_documents(std::string("ab\0cd", 5), "blob.dat"); });
  EXPECT_TRUE(contains(msg, "blob.dat")) << msg;
  EXPECT_TRUE(contains(msg, "binary")) << msg;
  msg = error_of<PrepareError>(
      [] { split_documents(std::string("ab\0cd", 5), "blob.dat", TextHandling::keep_bytes); });
  EXPECT_TRUE(contains(msg, "binary")) << msg;  // kept bytes too: for the bytes tokenizer 0 is eot
}

// The same file, cleaned and kept: a BOM, CRLF, a bell, a Latin-1 byte, a blank entry.
constexpr std::string_view kRawFortunes = "\xef\xbb\xbf" "a\r\nb\x07\r\n%\r\n \r\n%\r\nc\xe9\r\n%\nd";

TEST(PrepareTest, KeepBytesSplitsEntriesButKeepsEveryByte) {
  bool transcoded = true;
  EXPECT_EQ(split_documents(kRawFortunes, "f", TextHandling::keep_bytes, &transcoded),
            (std::vector<std::string>{"\xef\xbb\xbf" "a\r\nb\x07\r\n", "c\xe9\r\n", "d"}));
  EXPECT_FALSE(transcoded);  // kept as it is, not read as Windows-1252
  // By default the same bytes are cleaned (Windows-1252 since they are not UTF-8: the BOM's bytes
  // become three characters there, and only a UTF-8 file's BOM is dropped).
  EXPECT_EQ(split_documents(kRawFortunes, "f", TextHandling::clean, &transcoded),
            (std::vector<std::string>{"\xc3\xaf\xc2\xbb\xc2\xbf" "a\nb\n", "c\xc3\xa9\n", "d"}));
  EXPECT_TRUE(transcoded);
  EXPECT_EQ(split_documents("\xef\xbb\xbfx\r\ny\x01\n", "f", TextHandling::keep_bytes),
            (std::vector<std::string>{"\xef\xbb\xbfx\r\ny\x01\n"}));
  EXPECT_EQ(split_documents("\xef\xbb\xbfx\r\ny\x01\n", "f"), (std::vector<std::string>{"x\ny\n"}));
  EXPECT_TRUE(split_documents("\r\n \r\n", "f", TextHandling::keep_bytes).empty());  // blank
}

TEST(PrepareTest, KeepBytesWritesTheFilesBytesAndSaysWhichAreNotUtf8) {
  ScratchDir dir;
  write_bytes(dir / "raw", std::string(kRawFortunes));
  FakeByteTokenizer tok;
  PrepareOptions o;
  o.inputs = {dir / "raw"};
  o.val_fraction = 0;
  o.text = TextHandling::keep_bytes;
  o.output_dir = dir / "kept";
  std::vector<std::string> lines;
  const PrepareSummary kept = prepare_corpus(o, tok, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(decoded_documents(kept.train_shards, tok),
            (std::vector<std::string>{"\xef\xbb\xbf" "a\r\nb\x07\r\n", "c\xe9\r\n", "d"}));
  EXPECT_EQ(kept.invalid_utf8_files, 1);
  EXPECT_EQ(kept.transcoded_files, 0);
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(contains(lines[0], "3 documents (not valid UTF-8: kept byte for byte)")) << lines[0];

  o.text = TextHandling::clean;
  o.output_dir = dir / "cleaned";
  const PrepareSummary cleaned = prepare_corpus(o, tok);
  EXPECT_EQ(decoded_documents(cleaned.train_shards, tok),
            (std::vector<std::string>{"\xc3\xaf\xc2\xbb\xc2\xbf" "a\nb\n", "c\xc3\xa9\n", "d"}));
  EXPECT_EQ(cleaned.invalid_utf8_files, 0);
  EXPECT_EQ(cleaned.transcoded_files, 1);
}

TEST(PrepareTest, OneDocumentGivesNoValidationSplit) {
  ScratchDir dir;
  write_bytes(dir / "one", "a single plain document\n");
  FakeByteTokenizer tok;
  PrepareOptions o;
  o.inputs = {dir / "one"};
  o.output_dir = dir / "out";
  o.val_fraction = 0.5;
  const PrepareSummary s = prepare_corpus(o, tok);
  EXPECT_EQ(s.documents, 1);
  EXPECT_EQ(s.train_documents, 1);
  EXPECT_EQ(s.val_documents, 0);
  EXPECT_TRUE(s.val_shards.empty());
}

TEST(PrepareTest, WritesTrainAndValShardsWhoseTokensDecodeToTheDocuments) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  FakeByteTokenizer tok;
  std::vector<std::string> lines;
  const PrepareSummary s =
      prepare_corpus(options_for(corpus, dir / "fortunes"), tok, [&](const std::string& l) { lines.push_back(l); });

  ASSERT_EQ(s.train_shards.size(), 1u);
  ASSERT_EQ(s.val_shards.size(), 1u);
  EXPECT_EQ(s.train_shards[0], dir / "fortunes" / "fortunes_train_000000.bin");
  EXPECT_EQ(s.val_shards[0], dir / "fortunes" / "fortunes_val_000000.bin");
  EXPECT_TRUE(fs::exists(s.train_shards[0]));
  EXPECT_TRUE(fs::exists(s.val_shards[0]));
  EXPECT_EQ(s.files, 3);
  EXPECT_EQ(s.documents, 44);
  EXPECT_EQ(s.train_documents + s.val_documents, 44);
  EXPECT_GE(s.val_documents, 1);
  EXPECT_GE(s.train_documents, 1);
  EXPECT_EQ(s.vocab_size, 256);
  EXPECT_EQ(lines.size(), 3u + 2u);  // 3 files read, 2 shards written

  std::int64_t expect_tokens = 0;
  for (const std::string& d : corpus.documents) expect_tokens += 1 + static_cast<std::int64_t>(d.size());
  EXPECT_EQ(s.train_tokens + s.val_tokens, expect_tokens);
  EXPECT_EQ(ShardFile::open(s.train_shards[0]).size(), s.train_tokens);
  EXPECT_EQ(ShardFile::open(s.val_shards[0]).size(), s.val_tokens);

  const auto train = decoded_documents(s.train_shards, tok);
  const auto val = decoded_documents(s.val_shards, tok);
  EXPECT_EQ(static_cast<std::int64_t>(train.size()), s.train_documents);
  EXPECT_EQ(static_cast<std::int64_t>(val.size()), s.val_documents);
  // Each split keeps the input order, and together they are exactly the documents.
  std::vector<std::string> merged;
  std::size_t ti = 0, vi = 0;
  for (const std::string& d : corpus.documents) {
    if (ti < train.size() && train[ti] == d) {
      merged.push_back(train[ti++]);
    } else if (vi < val.size() && val[vi] == d) {
      merged.push_back(val[vi++]);
    }
  }
  EXPECT_EQ(merged, corpus.documents);
}

TEST(PrepareTest, TrainShardsRollOverAtShardTokens) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  FakeByteTokenizer tok;
  PrepareOptions o = options_for(corpus, dir / "out");
  o.shard_tokens = 100;
  o.prefix = "tiny";
  const PrepareSummary s = prepare_corpus(o, tok);
  ASSERT_GE(s.train_shards.size(), 5u);
  for (std::size_t i = 0; i < s.train_shards.size(); ++i) {
    EXPECT_EQ(s.train_shards[i].filename(), shard_file_name("tiny", "train", static_cast<int>(i)));
    const std::int64_t n = ShardFile::open(s.train_shards[i]).size();
    if (i + 1 < s.train_shards.size()) {
      EXPECT_EQ(n, 100);
    }
  }
  EXPECT_EQ(find_shards(dir / "out", "train"), s.train_shards);
  // Documents continue across shard boundaries; the round trip still holds.
  std::int64_t expect_tokens = 0;
  for (const std::string& d : corpus.documents) expect_tokens += 1 + static_cast<std::int64_t>(d.size());
  EXPECT_EQ(s.train_tokens + s.val_tokens, expect_tokens);
  EXPECT_EQ(static_cast<std::int64_t>(decoded_documents(s.train_shards, tok).size()), s.train_documents);
}

TEST(PrepareTest, TheSplitIsDeterministicAndKeyedBySeed) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  FakeByteTokenizer tok;
  PrepareOptions a = options_for(corpus, dir / "a");
  PrepareOptions b = options_for(corpus, dir / "b");
  b.prefix = "a";
  const PrepareSummary sa = prepare_corpus(a, tok);
  const PrepareSummary sb = prepare_corpus(b, tok);
  EXPECT_EQ(testing::read_bytes(sa.train_shards[0]), testing::read_bytes(sb.train_shards[0]));
  EXPECT_EQ(testing::read_bytes(sa.val_shards[0]), testing::read_bytes(sb.val_shards[0]));
  PrepareOptions c = options_for(corpus, dir / "c");
  c.split_seed = a.split_seed + 1;
  const PrepareSummary sc = prepare_corpus(c, tok);
  EXPECT_NE(decoded_documents(sa.val_shards, tok), decoded_documents(sc.val_shards, tok));
}

TEST(PrepareTest, EachSideGetsADocumentAndZeroFractionWritesNoValidation) {
  ScratchDir dir;
  write_bytes(dir / "two", "one\n%\ntwo\n");
  FakeByteTokenizer tok;
  PrepareOptions o;
  o.inputs = {dir / "two"};
  for (double fraction : {1e-9, 0.999999}) {
    o.output_dir = dir / ("out" + std::to_string(fraction));
    o.val_fraction = fraction;
    const PrepareSummary s = prepare_corpus(o, tok);
    EXPECT_EQ(s.val_documents, 1) << fraction;
    EXPECT_EQ(s.train_documents, 1) << fraction;
  }
  o.output_dir = dir / "none";
  o.val_fraction = 0;
  const PrepareSummary s = prepare_corpus(o, tok);
  EXPECT_EQ(s.val_documents, 0);
  EXPECT_TRUE(s.val_shards.empty());
  EXPECT_EQ(s.train_documents, 2);
}

TEST(PrepareTest, ShardsOfAnEarlierLargerRunAreRemoved) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  FakeByteTokenizer tok;
  PrepareOptions o = options_for(corpus, dir / "out");
  o.shard_tokens = 100;
  const PrepareSummary small = prepare_corpus(o, tok);
  write_bytes(dir / "out" / "out_test_000009.bin", "not a train or validation shard");
  o.shard_tokens = 100'000;
  const PrepareSummary big = prepare_corpus(o, tok);
  EXPECT_EQ(big.train_shards.size(), 1u);
  EXPECT_EQ(big.removed_stale_shards.size(), small.train_shards.size() - 1 + small.val_shards.size() - 1);
  EXPECT_TRUE(fs::exists(dir / "out" / "out_test_000009.bin"));
  EXPECT_EQ(find_shards(dir / "out", "val").size(), 1u);
}

// Another corpus into a directory holding shards of another name would leave two sets there that
// training mixes (the loader refuses them): refused up front, before anything is read or written.
TEST(PrepareTest, AnOutputDirectoryHoldingAnotherCorpusIsRefused) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  FakeByteTokenizer tok;
  PrepareOptions o = options_for(corpus, dir / "out");
  const PrepareSummary first = prepare_corpus(o, tok);  // out_train_000000.bin, out_val_000000.bin
  const std::string before = testing::read_bytes(first.train_shards[0]);
  PrepareOptions other = o;
  other.prefix = "other";
  const std::string msg = error_of<PrepareError>([&] { prepare_corpus(other, tok); });
  EXPECT_EQ(msg, "output directory \"" + (dir / "out").string() + "\" already holds the shards of \"out\": shards "
                 "named \"other\" beside them would be trained together with them; give another --output (a "
                 "directory per corpus), or --name out to replace them");
  EXPECT_FALSE(fs::exists(dir / "out" / "other_train_000000.bin"));
  EXPECT_EQ(testing::read_bytes(first.train_shards[0]), before);
  // The same name again replaces its own shards, as before.
  EXPECT_NO_THROW(prepare_corpus(o, tok));
}

TEST(PrepareTest, PreparedDataFeedsTheLoader) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  FakeByteTokenizer tok;
  const PrepareSummary s = prepare_corpus(options_for(corpus, dir / "ds"), tok);
  DataLoader train = DataLoader::for_split(dir / "ds", "train", 16, 1, tok.vocab_size());
  DataLoader val = DataLoader::for_split(dir / "ds", "val", 16, 1, tok.vocab_size());
  EXPECT_EQ(train.sequences_per_epoch(), (s.train_tokens - 1) / 16);
  EXPECT_FALSE(val.options().shuffle);
  std::vector<std::int32_t> in(2 * 16), tg(2 * 16);
  train.next(2, in, tg);
  EXPECT_EQ(tg[0], in[1]);
}

TEST(PrepareTest, Errors) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  FakeByteTokenizer tok;
  PrepareOptions o = options_for(corpus, dir / "out");

  PrepareOptions missing = o;
  missing.inputs.push_back(dir / "absent.txt");
  std::string msg = error_of<PrepareError>([&] { prepare_corpus(missing, tok); });
  EXPECT_TRUE(contains(msg, "absent.txt")) << msg;
  EXPECT_TRUE(contains(msg, "does not exist")) << msg;
  EXPECT_FALSE(fs::exists(dir / "out"));  // nothing written before the inputs are known good

  write_bytes(dir / "blank", "\n%\n  \n%\n");
  PrepareOptions empty = o;
  empty.inputs = {dir / "blank"};
  msg = error_of<PrepareError>([&] { prepare_corpus(empty, tok); });
  EXPECT_TRUE(contains(msg, "empty corpus")) << msg;
  empty.inputs = {};
  EXPECT_TRUE(contains(error_of<PrepareError>([&] { prepare_corpus(empty, tok); }), "no input files"));

  write_bytes(dir / "a_file", "x");
  PrepareOptions bad_out = o;
  bad_out.output_dir = dir / "a_file" / "sub";
  msg = error_of<PrepareError>([&] { prepare_corpus(bad_out, tok); });
  EXPECT_TRUE(contains(msg, "cannot create output directory")) << msg;
  EXPECT_TRUE(contains(msg, "a_file")) << msg;

  for (double bad : {-0.1, 1.0, 1.5}) {
    PrepareOptions f = o;
    f.val_fraction = bad;
    msg = error_of<PrepareError>([&] { prepare_corpus(f, tok); });
    EXPECT_TRUE(contains(msg, "validation fraction")) << msg;
  }
  PrepareOptions dir_input = o;
  dir_input.inputs = {dir.path()};
  EXPECT_TRUE(contains(error_of<PrepareError>([&] { prepare_corpus(dir_input, tok); }), "is a directory"));
  PrepareOptions shard_tokens = o;
  shard_tokens.shard_tokens = 0;
  EXPECT_TRUE(contains(error_of<PrepareError>([&] { prepare_corpus(shard_tokens, tok); }), "--shard-tokens"));
  PrepareOptions slash = o;
  slash.prefix = "a/b";
  EXPECT_TRUE(contains(error_of<PrepareError>([&] { prepare_corpus(slash, tok); }), "must not hold '/'"));
  // A shard that cannot be written (a directory stands where it goes) is the user's to fix too.
  fs::create_directories(dir / "blocked" / "blocked_train_000000.bin");
  PrepareOptions blocked = o;
  blocked.output_dir = dir / "blocked";
  msg = error_of<PrepareError>([&] { prepare_corpus(blocked, tok); });
  EXPECT_TRUE(contains(msg, "blocked_train_000000.bin")) << msg;
  // Missing tokenizer files, by name.
  PrepareOptions no_files = o;
  no_files.tokenizer = "gpt2";
  no_files.tokenizer_dir = dir / "no_gpt2";
  EXPECT_TRUE(contains(error_of<PrepareError>([&] { prepare_corpus(no_files); }), "encoder.json does not exist"));
}

TEST(PrepareTest, ByNameWithTheBytesTokenizer) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  const PrepareSummary s = prepare_corpus(options_for(corpus, dir / "named"));  // tokenizer "bytes"
  EXPECT_EQ(s.tokenizer, "bytes");
  EXPECT_EQ(s.vocab_size, 256);
  const auto bytes = make_tokenizer("bytes", {});
  auto docs = decoded_documents(s.train_shards, *bytes);
  const auto val = decoded_documents(s.val_shards, *bytes);
  docs.insert(docs.end(), val.begin(), val.end());
  std::vector<std::string> expect = corpus.documents;
  std::sort(docs.begin(), docs.end());
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(docs, expect);
  // Same bytes as with the fake tokenizer that the other tests use.
  FakeByteTokenizer fake;
  const PrepareSummary f = prepare_corpus(options_for(corpus, dir / "fake"), fake);
  EXPECT_EQ(testing::read_bytes(s.train_shards[0]), testing::read_bytes(f.train_shards[0]));
}

TEST(PrepareTest, WithGpt2TokensDecodeToTheDocuments) {
  const fs::path vocab = default_tokenizer_dir();
  if (!fs::exists(vocab / "encoder.json") || !fs::exists(vocab / "vocab.bpe")) {
    GTEST_SKIP() << "no GPT-2 tokenizer files in " << vocab << " (scripts/fetch_tokenizer.sh)";
  }
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  PrepareOptions o = options_for(corpus, dir / "gpt2");
  o.tokenizer = "gpt2";
  o.tokenizer_dir = vocab;
  const PrepareSummary s = prepare_corpus(o);
  EXPECT_EQ(s.vocab_size, 50257);
  const auto gpt2 = make_tokenizer("gpt2", vocab);
  auto docs = decoded_documents(s.train_shards, *gpt2);
  const auto val = decoded_documents(s.val_shards, *gpt2);
  docs.insert(docs.end(), val.begin(), val.end());
  std::vector<std::string> expect = corpus.documents;
  std::sort(docs.begin(), docs.end());
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(docs, expect);
  EXPECT_LT(s.train_tokens + s.val_tokens, 600);  // BPE: far fewer tokens than the ~900 bytes

  // Kept bytes: GPT-2's byte-level BPE spells CRLF, a BOM and a bell as they are; invalid UTF-8 is
  // read as U+FFFD (EF BF BD), as Encoder.js reads it.
  write_bytes(dir / "raw", "\xef\xbb\xbfHello\r\nbell\x07\r\n%\r\ncaf\xe9\r\n");
  o.inputs = {dir / "raw"};
  o.val_fraction = 0;
  o.text = TextHandling::keep_bytes;
  o.output_dir = dir / "gpt2_kept";
  const PrepareSummary kept = prepare_corpus(o);
  EXPECT_EQ(decoded_documents(kept.train_shards, *gpt2),
            (std::vector<std::string>{"\xef\xbb\xbfHello\r\nbell\x07\r\n", "caf\xef\xbf\xbd\r\n"}));
  EXPECT_EQ(kept.invalid_utf8_files, 1);
}

// A tokenizer beyond uint16: each byte b is id 65536 + b, eot is 0, vocabulary 65536 + 256.
class FakeWideTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "fake-wide"; }
  int vocab_size() const override { return 65536 + 256; }
  std::int32_t eot_token() const override { return 0; }
  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    for (char c : text) ids.push_back(65536 + static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(std::span<const std::int32_t> tokens) const override {
    std::string text;
    for (std::int32_t t : tokens) text += static_cast<char>(t - 65536);
    return text;
  }
};

TEST(PrepareTest, AVocabularyBeyond65536WritesVersion2Shards) {
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  const FakeWideTokenizer wide;
  const PrepareSummary s = prepare_corpus(options_for(corpus, dir / "wide"), wide);
  EXPECT_EQ(s.vocab_size, 65536 + 256);
  ASSERT_FALSE(s.train_shards.empty());
  const ShardFile shard = ShardFile::open(s.train_shards[0]);
  EXPECT_EQ(shard.version(), 2);
  EXPECT_EQ(shard.written_vocab(), 65536 + 256);
  const std::vector<std::int32_t> ids = read_shard_ids(s.train_shards[0], wide.vocab_size());
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 65536 + 'F');  // "Fortune number 0." or another document: each starts with a letter
  // The bytes tokenizer still writes version 1, as llm.c does.
  const PrepareSummary narrow = prepare_corpus(options_for(corpus, dir / "narrow"), FakeByteTokenizer());
  EXPECT_EQ(ShardFile::open(narrow.train_shards[0]).version(), 1);
}

TEST(PrepareTest, WithCl100kTokensDecodeToTheDocuments) {
  const fs::path ranks = default_tokenizer_dir("cl100k");
  if (!fs::exists(ranks / "cl100k_base.tiktoken")) {
    GTEST_SKIP() << "no cl100k_base.tiktoken in " << ranks << " (scripts/fetch_tiktoken.sh)";
  }
  ScratchDir dir;
  const Corpus corpus = make_corpus(dir.path());
  PrepareOptions o = options_for(corpus, dir / "cl100k");
  o.tokenizer = "cl100k";
  o.tokenizer_dir = ranks;
  const PrepareSummary s = prepare_corpus(o);
  EXPECT_EQ(s.vocab_size, 100277);
  const auto cl100k = make_tokenizer("cl100k", ranks);
  std::vector<std::string> docs;
  for (const auto* shards : {&s.train_shards, &s.val_shards}) {
    for (const fs::path& file : *shards) {
      EXPECT_EQ(ShardFile::open(file).version(), 2);
      const std::vector<std::int32_t> ids = read_shard_ids(file, cl100k->vocab_size());
      ASSERT_FALSE(ids.empty());
      EXPECT_EQ(ids[0], 100257);
      std::size_t begin = 1;
      for (std::size_t i = 1; i <= ids.size(); ++i) {
        if (i == ids.size() || ids[i] == 100257) {
          docs.push_back(cl100k->decode(std::span<const std::int32_t>(ids.data() + begin, i - begin)));
          begin = i + 1;
        }
      }
    }
  }
  std::vector<std::string> expect = corpus.documents;
  std::sort(docs.begin(), docs.end());
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(docs, expect);
}

TEST(PrepareTest, DefaultCorpusListsFortuneTextFilesOnly) {
  ScratchDir dir;
  write_bytes(dir / "zen", "a\n%\n");
  write_bytes(dir / "zen.dat", "index");
  fs::create_symlink("zen", dir / "zen.u8");
  write_bytes(dir / "art", "b\n%\n");
  write_bytes(dir / ".hidden", "c");
  fs::create_directories(dir / "off");
  const auto files = default_corpus_files(dir.path());
  EXPECT_EQ(files, (std::vector<fs::path>{dir / "art", dir / "zen"}));
  const std::string msg = error_of<PrepareError>([&] { default_corpus_files(dir / "off"); });
  EXPECT_TRUE(contains(msg, "fortunes")) << msg;

  // The installed corpus, where this machine has it: every file is text and yields documents.
  if (!fs::is_directory(default_corpus_dir())) GTEST_SKIP() << "Debian's fortunes package is not installed";
  const auto real = default_corpus_files();
  EXPECT_GE(real.size(), 10u);
  for (const fs::path& f : real) {
    EXPECT_NE(f.extension(), ".dat");
    EXPECT_NE(f.extension(), ".u8");
    EXPECT_FALSE(fs::is_symlink(f));
    bool transcoded = true;
    EXPECT_FALSE(split_documents(testing::read_bytes(f), f.string(), TextHandling::clean, &transcoded).empty()) << f;
    EXPECT_FALSE(transcoded) << f << " is not UTF-8";  // Debian ships them all as UTF-8
  }
}

}  // namespace
}  // namespace mt::data
