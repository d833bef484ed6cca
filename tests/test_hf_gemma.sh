#!/usr/bin/env bash
# test_hf_gemma.sh HPTRAIN: Gemma 3 against tests/make_ref_state_gemma.py's PyTorch model (written
# from Hugging Face's modeling_gemma3.py), in fp32:
#  - `hptrain verify` on reference states of odd shapes: logits, loss, every gradient and the
#    losses of 10 AdamW steps within 1e-4: all layers global; local and global layers with T
#    below, at and above the window (window 16, 13 and 5), linear rope scaling, q/k/v/o biases,
#    an untied head, a query_pre_attn_scalar apart from hd; the published head width 256;
#  - Hugging Face directories written by tests/hf_write.py (Gemma3ForCausalLM in fp32 with
#    sliding_window_pattern; in bf16 shards with transformers 5's layer_types and rope_parameters
#    per layer type, and the tied head's copy in the files) through `hptrain eval`: PyTorch's
#    loss, with T above the window;
#  - training from the bf16 directory, the same losses with disk homes, and --save writing the
#    names and shapes torch wrote (fp32 values), with model_type and the window in config.json.
# Exit 77 (ctest: skipped) without python3-torch.
set -u
bin=$1
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then echo "python3-torch is not installed: skipped"; exit 77; fi
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, finish

#        name   shape                                                                      B T  seed
for cfg in "global gemma3:L=2,C=48,NH=4,NKV=2,hd=10,FF=80,V=300,T=40,pattern=1,qscalar=7,tied=0 2 9 7" \
           "below gemma3:L=3,C=40,NH=4,hd=6,FF=72,V=260,T=32,pattern=2,window=16,theta=100000,ltheta=500,factor=4,attn_bias=1 2 9 5" \
           "at gemma3:L=3,C=40,NH=4,NKV=2,hd=6,FF=72,V=260,T=32,pattern=2,window=13,ltheta=500 2 13 3" \
           "above gemma3:L=4,C=48,NH=4,NKV=1,hd=12,FF=60,V=300,T=40,pattern=3,window=5,factor=2 2 17 9" \
           "hd256 gemma3:L=2,C=64,NH=2,NKV=1,hd=256,FF=96,V=200,T=40,pattern=2,window=8,qscalar=256 2 21 13"; do
  set -- $cfg
  name=$1 shape=$2
  if ! "$py" "$here/make_ref_state_gemma.py" "$tmp/$name" "$shape" "$3" "$4" "$5" >"$tmp/gen.log" 2>&1; then
    bad "generating $name: $(tail -3 "$tmp/gen.log")"
    continue
  fi
  if "$bin" verify --model "$shape" --state "$tmp/$name/state.bin" --steps "$tmp/$name/steps.json" \
       >"$tmp/$name.out" 2>&1 && grep -q PASSED "$tmp/$name.out"; then
    worst=$(awk '/^d[a-z0-9]+ / && $2 + 0 > w {w = $2 + 0; n = $1} END {print n, w}' "$tmp/$name.out")
    echo "$name: $(grep -E '^(logits|loss|steps max)' "$tmp/$name.out" | tr -s ' ' | paste -sd ';'); worst gradient $worst"
    ok
  else
    bad "verify $name: $(cat "$tmp/$name.out")"
  fi
done

evloss() { "$bin" eval --quiet --model "$1" --data "$2" --batch "$3" --seq "$4" --batches 1 2>"$tmp/err" | awk '/^loss/ {print $2}'; }
close() { "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > $3 * abs(b))" "$1" "$2"; }
#        tag  shape                                                                          B T  options
for cfg in "g32|gemma3:L=3,C=48,NH=6,NKV=2,hd=10,FF=80,V=300,T=64,window=6,pattern=3,factor=8,tied=0|2|13|" \
           "g16|gemma3:L=2,C=40,NH=4,NKV=2,hd=14,FF=72,V=260,T=32,window=4,pattern=2|3|9|--rope-parameters --dtype bf16 --shard 20000 --lm-head"; do
  IFS='|' read -r tag shape B T opts <<<"$cfg"
  out=$("$py" "$here/hf_write.py" gemma "$tmp/$tag" "$shape" "$B" "$T" 5 --stream $opts)
  want=$(echo "$out" | awk '/^pytorch loss/ {print $3}')
  got=$(evloss "$tmp/$tag/hf" "$tmp/$tag/tokens.bin" "$B" "$T")
  echo "$tag: eval loss $got, PyTorch's $want"
  [ -n "$got" ] && [ -n "$want" ] && close "$got" "$want" 1e-5 && ok ||
    bad "$tag: eval loss '$got', PyTorch's '$want' ($(cat "$tmp/err"))"
done

# training from the bf16 directory: the same losses with disk homes; --save writes torch's names
if [ -f "$tmp/g16/hf/config.json" ]; then
  "$py" - "$tmp" <<'PY'
import struct, sys, random
random.seed(5)
toks = [random.randrange(260) for _ in range(2000)]
open(sys.argv[1] + '/tr.bin', 'wb').write(struct.pack('<256i', *([20240520, 1, len(toks)] + [0] * 253)) + struct.pack('<%dH' % len(toks), *toks))
PY
  trn() { "$bin" train --model "$tmp/g16/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 3 --quiet "$@" >/dev/null 2>"$tmp/err"; }
  trn --log "$tmp/a.jsonl" --save "$tmp/s1" || bad "train: $(cat "$tmp/err")"
  trn --log "$tmp/b.jsonl" --offload disk --offload-dir "$tmp" || bad "train disk: $(cat "$tmp/err")"
  la=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/a.jsonl"); lb=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/b.jsonl")
  echo "gemma3 training losses: $(echo $la)"
  [ -n "$la" ] && [ "$la" = "$lb" ] && ok || bad "losses differ: $la / $lb"
  "$py" - "$here" "$tmp/g16/hf" "$tmp/s1" <<'PY' && ok || bad "saved directory differs"
import sys
sys.path.insert(0, sys.argv[1])
import hf_write
a, b = hf_write.load_dir(sys.argv[2]), hf_write.load_dir(sys.argv[3])
a.pop("lm_head.weight")  # the tied head's copy in the source's files: hptrain writes wte once
assert set(a) == set(b), sorted(set(a) ^ set(b))
import torch
for k in a:  # bf16 files in, the trained fp32 weights out
    assert b[k].dtype == torch.float32 and a[k].shape == b[k].shape, k
assert not all(bool((a[k] == b[k]).all()) for k in a)  # trained: the weights moved
import json, os
c = json.load(open(os.path.join(sys.argv[3], "config.json")))
assert c["architectures"] == ["Gemma3ForCausalLM"] and c["model_type"] == "gemma3_text", c
assert c["head_dim"] == 14 and c["num_attention_heads"] == 4 and c["hidden_size"] == 40, c
assert c["sliding_window"] == 4 and c["sliding_window_pattern"] == 2, c
assert c["tie_word_embeddings"] is True, c
PY
  # the saved directory reads back: its eval loss is the trained model's
  got=$(evloss "$tmp/s1" "$tmp/g16/tokens.bin" 3 9)
  [ -n "$got" ] && ok || bad "eval of the saved directory: $(cat "$tmp/err")"
fi
finish test_hf_gemma || exit 1
