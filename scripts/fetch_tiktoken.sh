#!/usr/bin/env bash
# Fetches OpenAI's cl100k_base and o200k_base BPE ranks into <repo>/assets/cl100k and assets/o200k
# (git-ignored), from the npm package tiktoken@1.0.22, and keeps that package's JavaScript/WASM
# build of tiktoken (OpenAI's Rust core, the reference the C++ tokenizer is tested against) in
# assets/tiktoken-js. The package ships each encoding as JSON ({pat_str, special_tokens,
# bpe_ranks}, the ranks in a compact "! OFFSET token token ..." form); node rewrites the ranks as
# tiktoken's own file format, one "base64-token rank" line per token, and the result must have the
# sha256 OpenAI publishes for cl100k_base.tiktoken and o200k_base.tiktoken. The JSON stays beside
# it: the tests compare its pattern and special tokens with the C++ ones.
# Idempotent: does nothing when the files are already there. Needs npm, node and sha256sum.
# Usage: bash scripts/fetch_tiktoken.sh   (from any directory)
set -euo pipefail

PACKAGE="tiktoken@1.0.22"
declare -A JSON_SHA256=(
  [cl100k_base]=49a4e05dea02c8fafbd50cc4725c4aab8f39386c0afedef118e0dfebc2fe523a
  [o200k_base]=df53e1a5f146e33a1b144d12ad9d685ee1b54dbc8b0950791ed45c933b119dc1)
# OpenAI's own files (tiktoken_ext/openai_public.py checks the same sums).
declare -A RANKS_SHA256=(
  [cl100k_base]=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
  [o200k_base]=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d)
WASM_SHA256="870fa4e0d8fe30a02b4703b2c4e24e7a8d99dcf6a1e8416c14b239f52a2eed55"
declare -A FOLDER=([cl100k_base]=cl100k [o200k_base]=o200k)
JS_FILES=(lite/tiktoken.cjs lite/tiktoken_bg.cjs lite/tiktoken_bg.wasm package.json)

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
assets="$repo_root/assets"

fail() {
  echo "fetch_tiktoken: $*" >&2
  exit 1
}

check_sum() {
  local file=$1 expected=$2 actual
  actual=$(sha256sum "$file" | cut -d' ' -f1)
  [ "$actual" = "$expected" ] || fail "$(basename "$file") from $PACKAGE: sha256 $actual, expected $expected (corrupt or a different version of $PACKAGE)"
}

# Complete when each folder holds its ranks and the JavaScript reference is there (written last).
complete() {
  for enc in "${!FOLDER[@]}"; do
    [ -f "$assets/${FOLDER[$enc]}/$enc.tiktoken" ] && [ -f "$assets/${FOLDER[$enc]}/$enc.json" ] || return 1
  done
  [ -f "$assets/tiktoken-js/lite/tiktoken.cjs" ]
}

if complete; then
  echo "fetch_tiktoken: $assets/{cl100k,o200k,tiktoken-js} already hold the ranks and the JavaScript reference"
  exit 0
fi

command -v npm >/dev/null || fail "npm is not installed (needed to fetch $PACKAGE from the npm registry)"
command -v node >/dev/null || fail "node is not installed (needed to convert the package's ranks)"
command -v sha256sum >/dev/null || fail "sha256sum is not installed"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "fetch_tiktoken: npm pack $PACKAGE"
(cd "$tmp" && npm pack --silent "$PACKAGE" >npm-pack.log 2>&1) ||
  fail "npm pack $PACKAGE failed: $(tail -n 5 "$tmp/npm-pack.log")"
tarball=$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -n 1)
[ -n "$tarball" ] || fail "npm pack $PACKAGE produced no tarball"
tar -xzf "$tarball" -C "$tmp" || fail "cannot extract $tarball"
pkg="$tmp/package"

for f in "${JS_FILES[@]}"; do
  [ -f "$pkg/$f" ] || fail "$PACKAGE has no $f"
done
check_sum "$pkg/lite/tiktoken_bg.wasm" "$WASM_SHA256"

# Everything is converted and checked in $tmp before anything lands in assets/.
for enc in "${!FOLDER[@]}"; do
  json="$pkg/encoders/$enc.json"
  [ -f "$json" ] || fail "$PACKAGE has no encoders/$enc.json"
  check_sum "$json" "${JSON_SHA256[$enc]}"
  node -e '
    const fs = require("fs");
    const [json, out] = process.argv.slice(1);
    // bpe_ranks: "! OFFSET" starts a run of consecutive ranks; each other word is a base64 token.
    const words = JSON.parse(fs.readFileSync(json, "utf8")).bpe_ranks.split(/\s+/).filter(w => w);
    const lines = [];
    let rank = NaN;
    for (let i = 0; i < words.length; i++) {
      if (words[i] === "!") rank = Number(words[++i]);
      else lines.push(words[i] + " " + rank++);
    }
    if (lines.length === 0 || lines.some(l => l.endsWith("NaN"))) throw new Error(json + ": unexpected bpe_ranks form");
    fs.writeFileSync(out, lines.join("\n") + "\n");
  ' "$json" "$tmp/$enc.tiktoken" || fail "cannot convert $enc's ranks with node"
  check_sum "$tmp/$enc.tiktoken" "${RANKS_SHA256[$enc]}"
done

for enc in "${!FOLDER[@]}"; do
  dest="$assets/${FOLDER[$enc]}"
  mkdir -p "$dest"
  cp "$pkg/encoders/$enc.json" "$dest/$enc.json.partial"
  cp "$tmp/$enc.tiktoken" "$dest/$enc.tiktoken.partial"
  mv "$dest/$enc.json.partial" "$dest/$enc.json"
  mv "$dest/$enc.tiktoken.partial" "$dest/$enc.tiktoken"
done
# The JavaScript reference last: lite/tiktoken.cjs marks a complete fetch.
js="$assets/tiktoken-js"
mkdir -p "$js/lite"
for f in "${JS_FILES[@]}"; do
  [ "$f" = lite/tiktoken.cjs ] || cp "$pkg/$f" "$js/$f"
done
cp "$pkg/lite/tiktoken.cjs" "$js/lite/tiktoken.cjs.partial"
mv "$js/lite/tiktoken.cjs.partial" "$js/lite/tiktoken.cjs"
echo "fetch_tiktoken: wrote cl100k_base and o200k_base ranks to $assets/cl100k and $assets/o200k," \
  "the JavaScript reference to $js"
