#!/usr/bin/env bash
# `meshtrain prepare` end to end with the bytes tokenizer (a token is a byte, eot is 0, so a shard
# shows exactly which bytes were tokenized): the help states the cleaning and --keep-bytes, the
# default cleans, --keep-bytes keeps CRLF, a BOM, control and Latin-1 bytes, a corpus of one
# document warns that it gets no validation split, and each user error is one plain line (no
# source location), from rank 0 alone under mpirun, with exit 2 on every rank.
# Usage: prepare_cli_test.sh MESHTRAIN MPIEXEC
set -u
meshtrain=$1
mpiexec=$2
. "$(dirname "$0")/cli_test_lib.sh"

# tokens SHARD: the shard's uint16 tokens (after the 1024-byte header), space-separated.
tokens() { od -An -v -tu2 -j1024 "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }

# expect_tokens NAME SHARD EXPECTED
expect_tokens() {
  local got
  got=$(tokens "$2")
  if [ "$got" = "$3" ]; then echo "ok   $1"; else fail "$1: tokens [$got], expected [$3]"; fi
}

# expect_line NAME EXPECTED_LINE COMMAND...: exit 2, and stderr is exactly that one line.
expect_line() {
  local name=$1 line=$2
  shift 2
  run "$@"
  if [ "$rc" -ne 2 ]; then fail "$name: exit code $rc, expected 2"; show; return 1; fi
  if [ "$(cat "$err")" != "$line" ]; then fail "$name: stderr is not the one line [$line]"; show; return 1; fi
  echo "ok   $name: $line"
}

# expect_line_np2 NAME EXPECTED_LINE COMMAND...: the same under mpirun -np 2: one line, from rank 0,
# no abort, exit 2.
expect_line_np2() {
  local name=$1 line=$2
  shift 2
  local pattern
  pattern="^$(printf '%s' "$line" | sed 's/[][\.*^$(){}?+|/]/\\&/g')\$"
  expect_rank0_error "$name (np 2)" "$pattern" 2 "$@" || return 1
  [ "$rc" -eq 2 ] || fail "$name (np 2): exit code $rc, expected 2"
}

# --- the help
if expect_ok "prepare --help" "$meshtrain" prepare --help; then
  grep -q -E -- '^  --val-fraction arg \(=0\.1\) ' "$out" || { fail "help: --val-fraction's default is not shown as 0.1"; show; }
  for step in "read as Windows-1252" "byte order mark (BOM) is dropped" "CRLF and lone CR line ends become LF" \
              "overstriking" "other control characters except tab and newline are dropped" "--keep-bytes" \
              "token parity with OpenAI's encoder"; do
    grep -q -F -- "$step" "$out" || fail "help: does not say \"$step\""
  done
  grep -q -E -- '^  --keep-bytes +tokenize each document.s bytes as given' "$out" || { fail "help: no --keep-bytes option"; show; }
fi

# --- cleaning by default, the bytes as given with --keep-bytes
printf '\xef\xbb\xbfab\r\nc\x07d\n' >"$dir/crlf.txt"
if expect_ok "prepare (cleans)" "$meshtrain" prepare --tokenizer bytes --input "$dir/crlf.txt" --output "$dir/clean" \
     --val-fraction 0; then
  expect_tokens "default: BOM, CR and the bell dropped" "$dir/clean/clean_train_000000.bin" "0 97 98 10 99 100 10"
fi
if expect_ok "prepare --keep-bytes" "$meshtrain" prepare --tokenizer bytes --keep-bytes --input "$dir/crlf.txt" \
     --output "$dir/raw" --val-fraction 0; then
  expect_tokens "--keep-bytes: BOM, CRLF and the bell kept" "$dir/raw/raw_train_000000.bin" \
    "0 239 187 191 97 98 13 10 99 7 100 10"
fi
# Not UTF-8: Latin-1 "café" is converted by default, kept byte for byte (and said) with --keep-bytes.
printf 'caf\xe9\n' >"$dir/latin1.txt"
if expect_ok "prepare a Latin-1 file" "$meshtrain" prepare --tokenizer bytes --input "$dir/latin1.txt" \
     --output "$dir/latin" --val-fraction 0; then
  expect_tokens "default: Latin-1 read as Windows-1252" "$dir/latin/latin_train_000000.bin" "0 99 97 102 195 169 10"
fi
if expect_ok "prepare --keep-bytes a Latin-1 file" "$meshtrain" prepare --tokenizer bytes --keep-bytes \
     --input "$dir/latin1.txt" --output "$dir/latin_raw" --val-fraction 0; then
  expect_tokens "--keep-bytes: the Latin-1 byte kept" "$dir/latin_raw/latin_raw_train_000000.bin" "0 99 97 102 233 10"
  grep -q -F "latin1.txt: 1 documents (not valid UTF-8: kept byte for byte)" "$out" || { fail "--keep-bytes: no note"; show; }
fi
# A CRLF fortune file: its "%" lines still separate entries with --keep-bytes, each entry keeps its CRLF.
printf 'x\r\n%%\r\ny\r\n' >"$dir/crlf_fortunes"
if expect_ok "prepare --keep-bytes a CRLF fortune file" "$meshtrain" prepare --tokenizer bytes --keep-bytes \
     --input "$dir/crlf_fortunes" --output "$dir/f" --val-fraction 0; then
  expect_tokens "--keep-bytes: two entries with their CRLF" "$dir/f/f_train_000000.bin" "0 120 13 10 0 121 13 10"
fi

# --- one document cannot give a validation split: a warning, the train shard all the same.
printf 'one document\n' >"$dir/one.txt"
warning="meshtrain: warning: no validation split: --val-fraction 0.1 needs at least 2 documents and the input holds 1 (a file with \`%\` lines holds one per entry, any other file is one)"
if expect_ok "prepare one document" "$meshtrain" prepare --tokenizer bytes --input "$dir/one.txt" --output "$dir/one"; then
  [ "$(cat "$err")" = "$warning" ] && echo "ok   one document: the warning" || { fail "one document: stderr is not [$warning]"; show; }
  ls "$dir/one/one_train_000000.bin" >/dev/null || fail "one document: no train shard"
fi
printf 'one\n%%\ntwo\n' >"$dir/two"
expect_ok "prepare two documents" "$meshtrain" prepare --tokenizer bytes --input "$dir/two" --output "$dir/two_out" &&
  { [ ! -s "$err" ] || { fail "two documents: stderr not empty"; show; }; }
expect_ok "prepare one document, --val-fraction 0" "$meshtrain" prepare --tokenizer bytes --input "$dir/one.txt" \
  --output "$dir/one0" --val-fraction 0 && { [ ! -s "$err" ] || { fail "--val-fraction 0: stderr not empty"; show; }; }

# Under mpirun, rank 0 alone writes and reports; every rank ends with 0.
if expect_ok "prepare under mpirun -np 2" "$mpiexec" -np 2 --oversubscribe "$meshtrain" prepare --tokenizer bytes \
     --input "$dir/two" --output "$dir/two_np2"; then
  [ "$(grep -c '^prepared 2 document(s)' "$out")" -eq 1 ] || { fail "np 2: the summary line is not there once"; show; }
  cmp -s "$dir/two_out/two_out_train_000000.bin" "$dir/two_np2/two_np2_train_000000.bin" ||
    fail "np 2: the train shard differs from one process's"
fi

# --- user errors: one plain line, exit 2; under mpirun, from rank 0 only.
p=("$meshtrain" prepare --tokenizer bytes)
expect_line "missing input" "meshtrain: error: --input '$dir/none.txt' does not exist" \
  "${p[@]}" --input "$dir/none.txt" --output "$dir/o"
expect_line_np2 "missing input" "meshtrain: error: --input '$dir/none.txt' does not exist" \
  "${p[@]}" --input "$dir/none.txt" --output "$dir/o"
expect_line "--val-fraction 1.5" "meshtrain: error: validation fraction (--val-fraction) must be in [0, 1), got 1.5" \
  "${p[@]}" --input "$dir/one.txt" --output "$dir/o" --val-fraction 1.5
expect_line "--shard-tokens 0" "meshtrain: error: tokens per shard (--shard-tokens) must be in [1, 2^31-1], got 0" \
  "${p[@]}" --input "$dir/one.txt" --output "$dir/o" --shard-tokens 0
expect_line "empty --output" "meshtrain: error: no output directory given" "${p[@]}" --input "$dir/one.txt" --output ""
# A second corpus into a directory holding another's shards: training would read both sets and mix
# their token ids, so prepare refuses before it tokenizes, naming both.
expect_line "another corpus into the same --output" \
  "meshtrain: error: output directory \"$dir/two_out\" already holds the shards of \"two_out\": shards named \"other\" beside them would be trained together with them; give another --output (a directory per corpus), or --name two_out to replace them" \
  "${p[@]}" --input "$dir/one.txt" --output "$dir/two_out" --name other
ls "$dir"/two_out/other_* >/dev/null 2>&1 && fail "another corpus: shards of \"other\" were written"
printf ' \n%%\n\n' >"$dir/blank"
expect_line "empty corpus" \
  "meshtrain: error: empty corpus: the 1 input file(s), starting with \"$dir/blank\", hold no text" \
  "${p[@]}" --input "$dir/blank" --output "$dir/o"
expect_line_np2 "empty corpus" \
  "meshtrain: error: empty corpus: the 1 input file(s), starting with \"$dir/blank\", hold no text" \
  "${p[@]}" --input "$dir/blank" --output "$dir/o"
printf 'a\0b' >"$dir/binary"
expect_line "binary input" \
  "meshtrain: error: input file \"$dir/binary\" holds a NUL byte at offset 1: it is binary, not text" \
  "${p[@]}" --input "$dir/binary" --output "$dir/o"
mkdir -p "$dir/no_gpt2"
expect_line "gpt2 without its files" \
  "meshtrain: error: $dir/no_gpt2/encoder.json does not exist: run scripts/fetch_tokenizer.sh to fetch GPT-2's tokenizer files, or point MESHTRAIN_TOKENIZER_DIR at a directory holding them" \
  "$meshtrain" prepare --tokenizer gpt2 --tokenizer-dir "$dir/no_gpt2" --input "$dir/one.txt" --output "$dir/o"
printf 'x' >"$dir/a_file"
expect_line "output under a file" \
  "meshtrain: error: --output '$dir/a_file/sub' does not exist (a folder on its way is a file)" \
  "${p[@]}" --input "$dir/one.txt" --output "$dir/a_file/sub"
# A shard that cannot be written (a directory stands where it goes): the file system's message, plain.
mkdir -p "$dir/blocked/blocked_train_000000.bin"
run "${p[@]}" --input "$dir/one.txt" --output "$dir/blocked" --val-fraction 0
if [ "$rc" -eq 2 ] && [ "$(grep -c . "$err")" -eq 1 ] &&
   grep -q -E "^meshtrain: error: cannot rename .* to token shard \"$dir/blocked/blocked_train_000000.bin\": Is a directory\$" "$err"; then
  echo "ok   shard not writable: $(cat "$err")"
else
  fail "shard not writable: exit code $rc, expected 2 and one plain line"; show
fi

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
