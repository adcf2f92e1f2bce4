// defines: RegexSplitter, with_unicode_white_space (see regex_splitter.h)
#include "data/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include "runtime/error.h"  // defines: MT_FAIL

namespace mt::data {
namespace {

// Unicode's White_Space property (unchanged since Unicode 6.3), as a class body.
constexpr std::string_view kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

pcre2_code* code_of(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int error) {
  PCRE2_UCHAR buffer[256];
  return pcre2_get_error_message(error, buffer, sizeof buffer) < 0 ? "error " + std::to_string(error)
                                                                   : std::string(reinterpret_cast<char*>(buffer));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* s) const { pcre2_jit_stack_free(s); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* c) const { pcre2_match_context_free(c); }
};

// Where the first character at or after byte `at` ends (the text is valid UTF-8).
std::size_t next_character(std::string_view text, std::size_t at) {
  ++at;
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  return at;
}

}  // namespace

std::string with_unicode_white_space(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        if (in_class) MT_FAIL("pre-tokenizer pattern ", pattern, ": \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern) {
  const std::string translated = with_unicode_white_space(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    MT_FAIL("pre-tokenizer pattern ", pattern, " does not compile (PCRE2, at offset ", offset, " of ", translated,
            "): ", pcre2_message(error));
  }
  code_ = code;
  // Without JIT support (some platforms) PCRE2's interpreter runs the same pattern, only slower.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

RegexSplitter::RegexSplitter(RegexSplitter&& other) noexcept
    : pattern_(std::move(other.pattern_)), code_(std::exchange(other.code_, nullptr)) {}

RegexSplitter& RegexSplitter::operator=(RegexSplitter&& other) noexcept {
  if (this != &other) {
    RegexSplitter dead(std::move(*this));
    pattern_ = std::move(other.pattern_);
    code_ = std::exchange(other.code_, nullptr);
  }
  return *this;
}

RegexSplitter::~RegexSplitter() {
  if (code_ != nullptr) pcre2_code_free(code_of(code_));
}

void RegexSplitter::split(std::string_view utf8, std::vector<std::string_view>& pieces) const {
  split(utf8, [&](std::string_view piece) { pieces.push_back(piece); });
}

void RegexSplitter::split(std::string_view utf8, const std::function<void(std::string_view)>& visit) const {
  const std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(code_of(code_), nullptr));
  // The JIT's default 32 KiB stack is enough for these patterns; a larger one costs one mapping a
  // call and keeps unusual patterns from failing.
  const std::unique_ptr<pcre2_jit_stack, JitStackDeleter> stack(pcre2_jit_stack_create(32 * 1024, 8 << 20, nullptr));
  const std::unique_ptr<pcre2_match_context, MatchContextDeleter> context(pcre2_match_context_create(nullptr));
  if (!match || !stack || !context) MT_FAIL("out of memory for a PCRE2 match of ", pattern_);
  pcre2_jit_stack_assign(context.get(), nullptr, stack.get());
  // PCRE2's default limit (10^7 backtracks a match) stops o200k on a run of ten million capitals,
  // where its first alternative takes the run and gives it back a letter at a time: linear in the
  // run, as OpenAI's patterns backtrack, so no limit is needed.
  pcre2_set_match_limit(context.get(), std::numeric_limits<std::uint32_t>::max());

  const auto* subject = reinterpret_cast<PCRE2_SPTR>(utf8.data());
  std::size_t at = 0;
  while (at < utf8.size()) {
    const int rc = pcre2_match(code_of(code_), subject, utf8.size(), at, PCRE2_NO_UTF_CHECK, match.get(),
                               context.get());
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) MT_FAIL("pre-tokenizer pattern ", pattern_, " failed at byte ", at, ": ", pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const std::size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      visit(utf8.substr(begin, end - begin));
      at = end;
    } else {
      at = next_character(utf8, begin);  // an empty match: move on, as find_iter does
    }
  }
}

}  // namespace mt::data
