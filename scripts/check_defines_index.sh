#!/usr/bin/env bash
# Keeps the `defines:` indices true (an index that drifts is worse than none). An index is a
# comment, `//` or `#`, whose text starts with "defines:" followed by names separated by commas; a
# line ending in a comma continues on the next comment line; "(...)" is a remark and is skipped; a
# name may be qualified (ns::name, checked by its last part).
#   - A file's own index: each name must occur as a word elsewhere in that file.
#   - An index on an #include line says what this file uses from the header: each name must occur as
#     a word elsewhere in this file and, for a header of the repository, in the header outside its
#     own indices.
#   - An index on a CMake include(NAME) line says what cmake/NAME.cmake defines for the whole
#     project: each name must occur there.
# Prints FILE:LINE: and the name for every name that fails; exits 1 if any did.
#
#   scripts/check_defines_index.sh [REPOSITORY_ROOT]      default: this script's repository
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
sources='\.(h|hpp|cpp|cu|cuh|cmake|sh)$|(^|/)CMakeLists\.txt$'
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files | grep -E "$sources" || true)
else  # an exported tree: the same files, minus the build outputs and the fetched assets
  files=$(find . \( -name build -o -name assets -o -name .git \) -prune -o -type f -print | sed 's|^\./||' |
          grep -E "$sources" || true)
fi
[ -n "$files" ] || { echo "check_defines_index.sh: no sources under $root" >&2; exit 2; }
# shellcheck disable=SC2086  # the names have no spaces (git ls-files above)
indexed=$(grep -lE '(//|#)[[:space:]]*defines:' $files || true)
[ -n "$indexed" ] || exit 0

# shellcheck disable=SC2086
exec awk '
  function is_index_start(s) { return match(s, /(\/\/|#)[ \t]*defines:/) }
  function is_comment(s) { return s ~ /^[ \t]*(\/\/|#)/ }

  # Marks in mark[1..n] the lines of l[1..n] that belong to an index; records each index in
  # start[k], list[k] (names text, continuations joined) when record is set. Returns the count.
  function find_indices(l, n, mark, record,   i, k, s, t) {
    k = 0
    for (i = 1; i <= n; i++) mark[i] = 0
    for (i = 1; i <= n; i++) {
      if (!is_index_start(l[i])) continue
      s = substr(l[i], RSTART + RLENGTH)
      mark[i] = 1
      k++
      if (record) start[k] = i
      while (s ~ /,[ \t]*$/ && i < n && is_comment(l[i + 1])) {
        i++
        mark[i] = 1
        t = l[i]
        sub(/^[ \t]*(\/\/|#)/, "", t)
        s = s " " t
      }
      if (record) list[k] = s
    }
    return k
  }

  function body_of(l, n, mark,   i, b) {
    b = "\n"
    for (i = 1; i <= n; i++) if (!mark[i]) b = b l[i] "\n"
    return b
  }

  function has_word(text, name) {
    sub(/^.*::/, "", name)
    return text ~ ("[^A-Za-z0-9_]" name "[^A-Za-z0-9_]")
  }

  # The repository file an index line includes, or "" (a system header, or none); sets cmake_include.
  function included_file(s,   p) {
    cmake_include = 0
    if (match(s, /^[ \t]*#[ \t]*include[ \t]*"[^"]+"/)) {
      p = substr(s, RSTART, RLENGTH)
      sub(/^[^"]*"/, "", p)
      sub(/"$/, "", p)
    } else if (match(s, /^[ \t]*include\([A-Za-z0-9_]+\)/)) {
      p = substr(s, RSTART, RLENGTH)
      sub(/^[ \t]*include\(/, "", p)
      sub(/\)$/, "", p)
      p = "cmake/" p ".cmake"
      cmake_include = 1
    } else return ""
    if ((getline probe < p) < 0) {  # not in the repository
      cmake_include = 0
      return ""
    }
    close(p)
    return p
  }

  function body_of_file(p,   m, x, il, im) {
    if (p in cached) return cached[p]
    m = 0
    while ((getline x < p) > 0) il[++m] = x
    close(p)
    find_indices(il, m, im, 0)
    cached[p] = body_of(il, m, im)
    return cached[p]
  }

  function fail(where, msg) { print where ": " msg; bad = 1 }

  function check(   k, i, j, items, count, name, where, body, inc, incbody, s, names) {
    k = find_indices(line, n, mark, 1)
    if (!k) return
    body = body_of(line, n, mark)
    for (i = 1; i <= k; i++) {
      where = file ":" start[i]
      s = list[i]
      gsub(/\([^)]*\)/, "", s)
      count = split(s, items, ",")
      inc = included_file(line[start[i]])
      if (inc != "") incbody = body_of_file(inc)
      names = 0
      for (j = 1; j <= count; j++) {
        name = items[j]
        gsub(/^[ \t]+|[ \t]+$/, "", name)
        if (name == "") continue
        names++
        if (name !~ /^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*$/)
          fail(where, "\"" name "\" is not a name (names are separated by commas; remarks go in parentheses)")
        else if (!cmake_include && !has_word(body, name))
          fail(where, name " does not occur elsewhere in " file)
        else if (inc != "" && !has_word(incbody, name))
          fail(where, name " does not occur in " inc)
      }
      if (!names) fail(where, "the index names nothing")
    }
  }

  FNR == 1 { if (n) check(); n = 0; file = FILENAME }
  { line[++n] = $0 }
  END { if (n) check(); exit bad }
' $indexed
