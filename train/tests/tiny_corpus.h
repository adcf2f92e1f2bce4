// A small English-like corpus for training tests, made on first use in a scratch directory (one
// per process, so every rank of a multi-rank test has its own): a seeded sentence grammar through
// the bytes tokenizer (vocabulary 256).
// defines: english_like_text, Corpus, corpus
#pragma once

#include <filesystem>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "data/shard.h"
#include "data/tokenizer/tokenizer.h"
#include "tests/scratch_dir.h"

namespace mt::testing {

// Sentences from a small grammar ("the old cat sat on the mat."), drawn with a seeded generator:
// plenty of byte-level structure for a tiny model to learn in a few dozen steps.
inline std::string english_like_text(std::size_t bytes, unsigned seed) {
  static const char* const kDet[] = {"the", "a", "my", "every", "one"};
  static const char* const kAdj[] = {"old", "small", "happy", "quiet", "red", "clever"};
  static const char* const kNoun[] = {"cat", "dog", "bird", "child", "farmer", "teacher", "river", "house"};
  static const char* const kVerb[] = {"sat on", "ran to", "looked at", "walked past", "slept near", "sang to"};
  std::mt19937 rng(seed);
  auto pick = [&](const auto& list) { return std::string(list[rng() % std::size(list)]); };
  std::string text;
  while (text.size() < bytes) {
    std::string s = pick(kDet) + " " + pick(kAdj) + " " + pick(kNoun) + " " + pick(kVerb) + " " + pick(kDet) +
                    " " + pick(kNoun) + ".";
    s[0] = static_cast<char>(s[0] - 'a' + 'A');
    text += s + (rng() % 4 == 0 ? "\n" : " ");
  }
  return text;
}

// <dir>/tiny_train_000000.bin and tiny_val_000000.bin: [eot] + bytes of the text, as prepare writes.
struct Corpus {
  ScratchDir dir{"corpus"};
  Corpus() {
    const auto tokenizer = data::make_tokenizer("bytes", {});
    auto write = [&](const std::string& split, std::size_t bytes, unsigned seed) {
      std::vector<std::int32_t> ids{tokenizer->eot_token()};
      const std::vector<std::int32_t> text = tokenizer->encode(english_like_text(bytes, seed));
      ids.insert(ids.end(), text.begin(), text.end());
      data::write_shard(dir.path() / ("tiny_" + split + "_000000.bin"), std::span<const std::int32_t>(ids));
    };
    write("train", 40'000, 1);
    write("val", 4'000, 2);
  }
  const std::filesystem::path& path() const { return dir.path(); }
};

inline const Corpus& corpus() {
  static const Corpus c;
  return c;
}

}  // namespace mt::testing
