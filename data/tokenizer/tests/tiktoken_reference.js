// The JavaScript side of the tiktoken agreement tests (tiktoken_reference_test.cpp).
//
//   node tiktoken_reference.js encode TIKTOKEN_JS ENCODING_JSON IN.json OUT.json
//     TIKTOKEN_JS: the npm package tiktoken (assets/tiktoken-js: OpenAI's Rust tiktoken built to
//     WASM); ENCODING_JSON: its encoders/<name>.json ({pat_str, special_tokens, bpe_ranks}).
//     IN.json: an array of base64 byte strings. Each is read as UTF-8 the way Buffer.toString('utf8')
//     reads it (U+FFFD per maximal subpart of invalid UTF-8) and encoded with encode_ordinary.
//     OUT.json: an array of arrays of token ids, in the same order.
//
//   node tiktoken_reference.js spec ENCODING_JSON OUT.json
//     OUT.json: {"pattern": pat_str, "special_tokens": {...}, "ranks": the number of ranks}.
'use strict';
const fs = require('fs');
const path = require('path');

function encodeMode(tiktokenJs, encodingJson, inPath, outPath) {
  const { Tiktoken } = require(path.resolve(tiktokenJs, 'lite', 'tiktoken.cjs'));
  const encoding = JSON.parse(fs.readFileSync(encodingJson, 'utf8'));
  const tokenizer = new Tiktoken(encoding.bpe_ranks, encoding.special_tokens, encoding.pat_str);
  const inputs = JSON.parse(fs.readFileSync(inPath, 'utf8'));
  const outputs = inputs.map(b64 => Array.from(tokenizer.encode_ordinary(Buffer.from(b64, 'base64').toString('utf8'))));
  tokenizer.free();
  fs.writeFileSync(outPath, JSON.stringify(outputs));
}

function specMode(encodingJson, outPath) {
  const encoding = JSON.parse(fs.readFileSync(encodingJson, 'utf8'));
  const ranks = encoding.bpe_ranks.split(/\s+/).filter(w => w).length -
                2 * (encoding.bpe_ranks.match(/(^|\s)!(\s|$)/g) || []).length;
  fs.writeFileSync(outPath, JSON.stringify({ pattern: encoding.pat_str, special_tokens: encoding.special_tokens, ranks }));
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'encode' && args.length === 4) {
  encodeMode(...args);
} else if (mode === 'spec' && args.length === 2) {
  specMode(...args);
} else {
  console.error('usage: node tiktoken_reference.js encode TIKTOKEN_JS ENCODING_JSON IN.json OUT.json\n' +
                '       node tiktoken_reference.js spec ENCODING_JSON OUT.json');
  process.exit(2);
}
