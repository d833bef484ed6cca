#!/usr/bin/env bash
# test_hf_llama.sh HPTRAIN: Hugging Face directories through `hptrain eval`: a llama directory
# written by tests/hf_write.py (torch, from the safetensors specification) of the PyTorch model
# of tests/make_ref_state_llama.py gives PyTorch's loss on the same tokens (odd GQA shape with
# Llama 3 rope scaling and an untied head; a tied one with biases in bf16 shards; a
# MistralForCausalLM with sliding_window 5 at T 13, flash and plain attention), and a GPT-2
# directory gives the llm.c file's loss; the Mistral directory trained and saved keeps its
# window (config.json, and through --resume the losses of the run not stopped), and
# recomputation with plain attention gives its losses bit for bit. Exit 77 (ctest: skipped) without python3-torch, the
# reference model, the eval command or the llama architecture.
set -u
bin=$1
ref=$2
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then echo "python3-torch is not installed: skipped"; exit 77; fi
if ! "$bin" eval --help >/dev/null 2>&1; then echo "no eval command: skipped"; exit 77; fi
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
skipped=0
evloss() { "$bin" eval --quiet --model "$1" --data "$2" --batch "$3" --seq "$4" --batches 1 "${@:5}" 2>"$tmp/err" | awk '/^loss/ {print $2}'; }
close() { "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > $3 * abs(b))" "$1" "$2"; }

# GPT-2: the directory and the llm.c file, same loss to the bit
"$py" "$here/hf_write.py" gpt2 "$ref/gpt2_tiny_model.bin" "$tmp/g" >/dev/null
"$py" - "$tmp" <<'PY'
import struct, sys, random
random.seed(9)
toks = [random.randrange(1000) for _ in range(2 * 16 + 1)]
open(sys.argv[1] + '/g.bin', 'wb').write(struct.pack('<256i', *([20240520, 1, len(toks)] + [0] * 253)) + struct.pack('<%dH' % len(toks), *toks))
PY
a=$(evloss "$ref/gpt2_tiny_model.bin" "$tmp/g.bin" 2 16)
b=$(evloss "$tmp/g" "$tmp/g.bin" 2 16)
echo "gpt2: eval loss $a (llm.c file), $b (directory)"
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "gpt2 eval: llm.c $a, directory $b ($(cat "$tmp/err"))"

#        tag   shape                                                                       B T  options
for cfg in "odd|llama:L=2,C=48,NH=6,NKV=3,FF=80,V=300,T=64,theta=10000,eps=1e-5,factor=8,low=1,high=4,orig=16|2|13|" \
           "tied|llama:L=3,C=40,NH=4,NKV=2,FF=72,V=260,T=32,theta=500000,eps=1e-6,tied=1,attn_bias=1,mlp_bias=1|3|9|--rope-parameters --dtype bf16 --shard 20000" \
           "mistral|llama:L=2,C=48,NH=6,NKV=2,FF=80,V=300,T=64,theta=10000,eps=1e-5,window=5|2|13|"; do
  IFS='|' read -r tag shape B T opts <<<"$cfg"
  out=$("$py" "$here/hf_write.py" llama "$tmp/$tag" "$shape" "$B" "$T" 5 --stream $opts)
  rc=$?
  if [ $rc -eq 77 ]; then echo "$tag: no llama reference model: skipped"; skipped=1; continue; fi
  want=$(echo "$out" | awk '/^pytorch loss/ {print $3}')
  got=$(evloss "$tmp/$tag/hf" "$tmp/$tag/tokens.bin" "$B" "$T")
  if [ -z "$got" ] && grep -q "no llama architecture" "$tmp/err"; then
    echo "$tag: this build has no llama architecture: skipped"; skipped=1; continue
  fi
  echo "$tag: eval loss $got, PyTorch's $want"
  [ -n "$got" ] && [ -n "$want" ] && close "$got" "$want" 1e-5 && ok ||
    bad "$tag: eval loss '$got', PyTorch's '$want' ($(cat "$tmp/err"))"
  [ "$tag" = mistral ] || continue
  got=$(evloss "$tmp/$tag/hf" "$tmp/$tag/tokens.bin" "$B" "$T" --attention plain)
  echo "$tag: eval loss $got with plain attention"
  [ -n "$got" ] && close "$got" "$want" 1e-5 && ok || bad "$tag plain: eval loss '$got' ($(cat "$tmp/err"))"
done
# the Mistral directory: trained with plain attention, recomputed or not (the same bits), saved
# with its sliding_window; the saved directory reads back
if [ -f "$tmp/mistral/hf/config.json" ]; then
  mtr() { "$bin" train --model "$tmp/mistral/hf" --data "$tmp/mistral/tokens.bin" --batch 1 --seq 13 --steps 2 --quiet --attention plain "$@" >/dev/null 2>"$tmp/err"; }
  mtr --log "$tmp/m1.jsonl" --save "$tmp/ms" || bad "mistral train: $(cat "$tmp/err")"
  mtr --log "$tmp/m2.jsonl" --recompute full || bad "mistral train recompute: $(cat "$tmp/err")"
  la=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/m1.jsonl"); lb=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/m2.jsonl")
  [ -n "$la" ] && [ "$la" = "$lb" ] && ok || bad "mistral losses differ with recomputation: $la / $lb"
  "$py" -c "import json, sys; c = json.load(open(sys.argv[1])); sys.exit(not (c['sliding_window'] == 5 and c['architectures'] == ['MistralForCausalLM']))" \
    "$tmp/ms/config.json" && ok || bad "mistral saved config: $(cat "$tmp/ms/config.json")"
  [ -n "$(evloss "$tmp/ms" "$tmp/mistral/tokens.bin" 2 13)" ] && ok || bad "eval of the saved mistral: $(cat "$tmp/err")"
  # resumed from the 2 steps saved, 2 more: the 4 steps' losses (the window kept)
  mtr --log "$tmp/m4.jsonl" --steps 4 || bad "mistral train 4: $(cat "$tmp/err")"
  "$bin" train --resume "$tmp/ms" --data "$tmp/mistral/tokens.bin" --batch 1 --seq 13 --steps 4 --quiet \
    --attention plain --log "$tmp/m3.jsonl" >/dev/null 2>"$tmp/err" || bad "mistral resume: $(cat "$tmp/err")"
  la=$(cat "$tmp/m1.jsonl" "$tmp/m3.jsonl" | grep -o '"loss": *[0-9.e+-]*'); lb=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/m4.jsonl")
  [ -n "$lb" ] && [ "$la" = "$lb" ] && ok || bad "mistral resumed losses: $la / $lb"
fi
# training from a llama directory: the same losses with disk homes; --save writes a directory with
# the names, shapes and dtypes torch wrote; llm.c's format is refused with a clear line
if [ -f "$tmp/odd/hf/config.json" ] && [ $skipped -eq 0 ]; then
  "$py" - "$tmp" <<'PY'
import struct, sys, random
random.seed(5)
toks = [random.randrange(300) for _ in range(2000)]
open(sys.argv[1] + '/tr.bin', 'wb').write(struct.pack('<256i', *([20240520, 1, len(toks)] + [0] * 253)) + struct.pack('<%dH' % len(toks), *toks))
PY
  trn() { "$bin" train --model "$tmp/odd/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 3 --quiet "$@" >/dev/null 2>"$tmp/err"; }
  trn --log "$tmp/a.jsonl" --save "$tmp/s1" || bad "train: $(cat "$tmp/err")"
  trn --log "$tmp/b.jsonl" --offload disk --offload-dir "$tmp" || bad "train disk: $(cat "$tmp/err")"
  la=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/a.jsonl"); lb=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/b.jsonl")
  [ -n "$la" ] && [ "$la" = "$lb" ] && ok || bad "losses differ: $la / $lb"
  "$py" - "$here" "$tmp/odd/hf" "$tmp/s1" <<'PY' && ok || bad "saved directory's names differ"
import sys
sys.path.insert(0, sys.argv[1])
import hf_write
a, b = hf_write.load_dir(sys.argv[2]), hf_write.load_dir(sys.argv[3])
assert set(a) == set(b), sorted(set(a) ^ set(b))
for k in a:
    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
assert not all(bool((a[k] == b[k]).all()) for k in a)  # trained: the weights moved
import json, os
c = json.load(open(os.path.join(sys.argv[3], "config.json")))
assert c["eos_token_id"] == [2, 3] and c["bos_token_id"] == 1, c  # the source's token ids
assert c["num_key_value_heads"] == 3 and c["rope_scaling"]["rope_type"] == "llama3", c
PY
  "$bin" convert "$tmp/odd/hf" "$tmp/x.bin" 2>"$tmp/err"
  [ $? -eq 1 ] && grep -q "GPT-2 only" "$tmp/err" && ok || bad "convert llama to llm.c: $(cat "$tmp/err")"
fi
finish test_hf_llama || exit 1
[ $skipped -eq 0 ] || exit 77
