// The BPE of a long pre-token piece, window by window, token for token what a merge over the whole
// piece gives; its memory is that of one window (and the piece's tokens), not of the piece.
//
// Why the windows give the same tokens. Write B(x) for the BPE of bytes x, where each step merges
// the least (rank, position) pair (tiktoken), or every occurrence of the least-ranked pair kind
// (Encoder.js, when no two kinds share a rank), and a pair's rank depends only on its two parts.
// Lemma: let t be a token of B(a t) at its end and of B(t c) at its start; then B(a t c) is
// B(a t) followed by B(t c) less its first t. Proof: until some merge of the run on a t c crosses
// an edge of t, the merges inside a t happen in the order the run on a t makes them (each was the
// least pair of a set holding all of a t's pairs), and likewise inside t c. The first merge that
// crosses the left edge of t is then, at that moment, also the least pair of the run on a t, which
// would have merged it too and so could not end in t; across the right edge, the same for t c. So
// no merge crosses t, and both halves end as their own runs do. (With Encoder.js's rounds: which
// occurrences of a kind merge is decided left to right, and the same argument holds.) The same
// argument shows that the tokens of B(x) on either side of one of its token boundaries are the BPE
// of the bytes there: no merge crosses that boundary.
// The algorithm: hold B(x[0, end)) as the tokens already given plus `held`, the BPE of the bytes
// from some token start on; encode a window from a held token start y some way before `end` to
// further on; where a token of the window's BPE has the same bytes and position as a held one, the
// lemma joins the held tokens before it to the window's tokens from it into B(x[0, new end)).
// Windows that share no token are possible in principle (a change at a window's end can reach
// back through every token): then bpe_by_windows gives up and the caller merges the whole piece.
//
// GPT-2's Encoder.js breaks the lemma's premise where two pair kinds share a rank (its key
// collisions, all around commas: see gpt2_vocab.cpp), so GPT-2 uses windows only for pieces
// without a comma.
// defines: WindowSizes, bpe_by_windows
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace mt::data {

struct WindowSizes {
  std::size_t window = std::size_t{64} << 10;  // bytes a window encodes
  std::size_t overlap = std::size_t{4} << 10;  // bytes back from the held end where the next starts
};

// Appends B(piece) to `out` (a vector or a deque of token ids) and returns true, or returns false
// with `out` as it was when two windows share no token. `bpe(bytes, tokens)` appends B(bytes) to
// the vector `tokens`; `length(token)` is a token's byte count. Pieces of at most one window are
// encoded whole.
template <class Bpe, class Length, class Tokens>
bool bpe_by_windows(std::string_view piece, const Bpe& bpe, const Length& length, Tokens& out, WindowSizes sizes = {}) {
  const std::size_t n = piece.size(), first = out.size();
  std::size_t held_begin = 0, held_end = std::min(n, sizes.window);
  std::vector<std::int32_t> held, next;
  bpe(piece.substr(0, held_end), held);
  while (held_end < n) {
    // The window starts at the last held token that starts at least `overlap` bytes before the
    // held end (or at the first held token).
    std::size_t y = held_begin, k = 0;
    for (std::size_t i = 0, at = held_begin; i < held.size() && at + sizes.overlap <= held_end; at += length(held[i++])) {
      y = at;
      k = i;
    }
    const std::size_t end = std::min(n, std::max(y + sizes.window, held_end + 1));
    next.clear();
    bpe(piece.substr(y, end - y), next);
    // The first token at the same place in both: starts ascend in each, so step the one behind.
    std::size_t i = k, j = 0, a = y, b = y;
    while (i < held.size() && j < next.size() && !(a == b && held[i] == next[j])) {
      const bool step_held = a <= b, step_next = b <= a;
      if (step_held) a += length(held[i++]);
      if (step_next) b += length(next[j++]);
    }
    if (i == held.size() || j == next.size()) {
      out.resize(first);
      return false;
    }
    out.insert(out.end(), held.begin(), held.begin() + static_cast<std::ptrdiff_t>(i));
    held.assign(next.begin() + static_cast<std::ptrdiff_t>(j), next.end());
    held_begin = a;
    held_end = end;
  }
  out.insert(out.end(), held.begin(), held.end());
  return true;
}

}  // namespace mt::data
