// Pre-tokenization by a regular expression, as tiktoken does it: the pieces are the successive
// non-overlapping leftmost matches of the pattern in the text (Rust regex's find_iter); text that no
// match covers is dropped (cl100k_base's and o200k_base's patterns cover every character).
//
// The engine is PCRE2 (Debian's libpcre2-8), in UTF mode with Unicode properties (PCRE2_UCP), JIT
// compiled where the platform allows. It has what OpenAI's patterns use and what tiktoken's engine
// (the Rust crate fancy-regex) gives them: \p{L}, \p{N}, \p{Lu}, \p{Lt}, \p{Lm}, \p{Lo}, \p{Ll},
// \p{M}; backtracking with leftmost-first alternation; (?i:...) with Unicode case folding; and the
// negative lookahead (?!\S). One difference is removed here: PCRE2's \s also takes U+180E MONGOLIAN
// VOWEL SEPARATOR (a space before Unicode 6.3), Rust's is exactly Unicode's White_Space; so \s and \S
// are rewritten as that explicit set before compiling. Left as is: PCRE2 10.42 knows Unicode 14, so
// letters and digits added since are unassigned (neither \p{L} nor \p{N}) to it.
// defines: RegexSplitter
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mt::data {

class RegexSplitter {
 public:
  // Throws Error naming the pattern, the offset and PCRE2's reason when it does not compile.
  explicit RegexSplitter(const std::string& pattern);
  RegexSplitter(RegexSplitter&& other) noexcept;
  RegexSplitter& operator=(RegexSplitter&& other) noexcept;
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;
  ~RegexSplitter();

  const std::string& pattern() const { return pattern_; }

  // Calls `visit` with each piece of `utf8` (valid UTF-8: not checked), in order, as they are
  // found: no memory grows with the text. The pieces point into `utf8`. Thread-safe. Throws Error
  // when PCRE2 gives up (a match or memory limit).
  void split(std::string_view utf8, const std::function<void(std::string_view)>& visit) const;
  // The same, appending the pieces to `pieces`.
  void split(std::string_view utf8, std::vector<std::string_view>& pieces) const;

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// `pattern` with \s and \S spelled out as Unicode's White_Space set (see above). Throws Error for \S
// inside a character class, which a set cannot express. Exposed for tests.
std::string with_unicode_white_space(const std::string& pattern);

}  // namespace mt::data
