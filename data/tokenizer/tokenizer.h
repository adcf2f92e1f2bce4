// Text <-> token ids. Two implementations: GPT-2's byte-level BPE (reading OpenAI's encoder.json
// and vocab.bpe; token for token what the JavaScript reference Encoder.js gives, see
// gpt2_tokenizer.h) and a byte tokenizer (vocab 256) for tiny tests. encode and decode may run on
// several threads at once.
// defines: Tokenizer, TokenSink, TokenBatch, collect_tokens, make_tokenizer, default_tokenizer_dir
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mt::data {

// Takes the tokens of a text a batch at a time, in order.
using TokenSink = std::function<void(std::span<const std::int32_t> tokens)>;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;   // "gpt2", "cl100k", "o200k" or "bytes"
  virtual int vocab_size() const = 0;     // 50257, 100277, 200019 or 256 (the largest id + 1)
  // Separates documents: <|endoftext|> (50256, 100257, 199999), or 0 for bytes.
  virtual std::int32_t eot_token() const = 0;
  // Any bytes in. gpt2, cl100k and o200k read invalid UTF-8 as U+FFFD per maximal subpart, as JavaScript does
  // (fs.readFileSync(f, 'utf8'), TextDecoder), so decode(encode(s)) == s only for valid UTF-8; bytes
  // keeps every byte. A literal "<|endoftext|>" in the text is ordinary text, not eot_token().
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The same tokens, handed to `sink` in batches as they are made, so that encoding a long text
  // needs memory for the text and a batch (and the tokens of its longest pre-token piece), not for
  // all its tokens. The default hands over encode(text) at once.
  virtual void encode_to(std::string_view text, const TokenSink& sink) const { sink(encode(text)); }
  // Ids out of range throw Error naming the id. The bytes come out as the tokens spell them, even
  // where they are not valid UTF-8 (a multi-byte character split across tokens).
  virtual std::string decode(std::span<const std::int32_t> tokens) const = 0;
};

// Collects tokens and hands them to a TokenSink whenever a batch is full, and at flush().
class TokenBatch {
 public:
  explicit TokenBatch(const TokenSink& sink) : sink_(sink) {}
  std::vector<std::int32_t>& tokens() { return tokens_; }
  void flush_if_full() {
    if (tokens_.size() >= kTokens) flush();
  }
  // Appends the tokens of a long piece (any container of ids), a batch at a time.
  template <class Tokens>
  void append(const Tokens& tokens) {
    for (const std::int32_t t : tokens) {
      tokens_.push_back(t);
      flush_if_full();
    }
  }
  void flush() {
    if (!tokens_.empty()) sink_(tokens_);
    tokens_.clear();
  }

 private:
  static constexpr std::size_t kTokens = std::size_t{1} << 16;
  const TokenSink& sink_;
  std::vector<std::int32_t> tokens_;
};

// All the tokens encode_to(text) hands over, in one vector: encode() of the streaming tokenizers.
std::vector<std::int32_t> collect_tokens(const Tokenizer& tokenizer, std::string_view text);

// "gpt2" (files encoder.json and vocab.bpe in `dir`), "cl100k" (cl100k_base.tiktoken), "o200k"
// (o200k_base.tiktoken) or "bytes" (no files). Unknown names, missing or malformed files throw Error
// naming the file and what is wrong.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::filesystem::path& dir);

// GPT-2's files: $MESHTRAIN_TOKENIZER_DIR if set, else the directory scripts/fetch_tokenizer.sh
// fills (<source>/assets/gpt2, compiled in).
std::filesystem::path default_tokenizer_dir();
// The files of tokenizer `name`: default_tokenizer_dir() for gpt2; <source>/assets/cl100k or
// assets/o200k (scripts/fetch_tiktoken.sh) for those; empty for bytes.
std::filesystem::path default_tokenizer_dir(const std::string& name);

std::vector<std::string> tokenizer_names();  // {"gpt2", "cl100k", "o200k", "bytes"}
// The vocab_size() of tokenizer `name` without reading any file; 0 for an unknown name.
int known_vocab_size(const std::string& name);

}  // namespace mt::data
