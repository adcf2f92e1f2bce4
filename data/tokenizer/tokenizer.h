// Text <-> token ids. Two implementations: GPT-2's byte-level BPE (reading OpenAI's encoder.json
// and vocab.bpe; token for token what the JavaScript reference Encoder.js gives, see
// gpt2_tokenizer.h) and a byte tokenizer (vocab 256) for tiny tests. encode and decode may run on
// several threads at once.
// defines: Tokenizer, make_tokenizer, default_tokenizer_dir
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mt::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;   // "gpt2" or "bytes"
  virtual int vocab_size() const = 0;     // 50257 or 256
  virtual std::int32_t eot_token() const = 0;  // separates documents: <|endoftext|> (50256), or 0 for bytes
  // Any bytes in. gpt2 reads invalid UTF-8 as U+FFFD per maximal subpart, as JavaScript does
  // (fs.readFileSync(f, 'utf8'), TextDecoder), so decode(encode(s)) == s only for valid UTF-8; bytes
  // keeps every byte. A literal "<|endoftext|>" in the text is ordinary text, not eot_token().
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // Ids out of range throw Error naming the id. The bytes come out as the tokens spell them, even
  // where they are not valid UTF-8 (a multi-byte character split across tokens).
  virtual std::string decode(std::span<const std::int32_t> tokens) const = 0;
};

// "gpt2" (files encoder.json and vocab.bpe in `dir`) or "bytes" (no files). Unknown names, missing
// or malformed files throw Error naming the file and what is wrong.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::filesystem::path& dir);

// $MESHTRAIN_TOKENIZER_DIR if set, else the directory scripts/fetch_tokenizer.sh fills
// (<source>/assets/gpt2, compiled in).
std::filesystem::path default_tokenizer_dir();

}  // namespace mt::data
