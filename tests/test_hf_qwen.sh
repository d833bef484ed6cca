#!/usr/bin/env bash
# test_hf_qwen.sh HPTRAIN: the Qwen families against tests/make_ref_state_qwen.py's PyTorch model
# (written from Hugging Face's modeling_qwen2.py and modeling_qwen3.py), in fp32:
#  - `hptrain verify` on a reference state of odd shapes: logits, loss, every gradient and the
#    losses of 10 AdamW steps within 1e-4 (Qwen2 with GQA and NH/NKV = 7, untied and tied;
#    Qwen3 with head_dim above and below C/NH, so NH*hd != C, untied, tied with
#    attention_bias, and the published models' head_dim 128 (wider than the flash kernel's
#    compact tiles) at C 64);
#  - Hugging Face directories written by tests/hf_write.py (Qwen2ForCausalLM in fp32;
#    Qwen3ForCausalLM in bf16 shards with transformers 5's rope_parameters and a tied head kept
#    in the files, as the hub's Qwen3-0.6B's) through `hptrain eval`: PyTorch's loss;
#  - training from the Qwen3 directory, the same losses with disk homes, and --save writing the
#    names and shapes torch wrote (fp32 values), with head_dim and model_type in config.json.
# Exit 77 (ctest: skipped) without python3-torch.
set -u
bin=$1
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then echo "python3-torch is not installed: skipped"; exit 77; fi
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, finish

#        name  shape                                                                        B T  seed
for cfg in "q2gqa qwen2:L=2,C=56,NH=7,NKV=1,FF=90,V=333,T=40,theta=1000000,eps=1e-6 2 19 7" \
           "q2tied qwen2:L=3,C=40,NH=4,NKV=2,FF=72,V=260,T=32,theta=10000,tied=1 3 13 3" \
           "q3wide qwen3:L=2,C=48,NH=6,NKV=2,hd=10,FF=80,V=300,T=40,theta=1000000,eps=1e-6 3 17 11" \
           "q3bias qwen3:L=3,C=40,NH=4,hd=6,FF=72,V=260,T=32,theta=10000,tied=1,attn_bias=1 2 23 5" \
           "q3hd128 qwen3:L=2,C=64,NH=2,NKV=1,hd=128,FF=96,V=200,T=40,theta=1000000 2 37 13"; do
  set -- $cfg
  name=$1 shape=$2
  if ! "$py" "$here/make_ref_state_qwen.py" "$tmp/$name" "$shape" "$3" "$4" "$5" >"$tmp/gen.log" 2>&1; then
    bad "generating $name: $(tail -3 "$tmp/gen.log")"
    continue
  fi
  if "$bin" verify --model "$shape" --state "$tmp/$name/state.bin" --steps "$tmp/$name/steps.json" \
       >"$tmp/$name.out" 2>&1 && grep -q PASSED "$tmp/$name.out"; then
    echo "$name: $(grep -E '^(logits|loss|steps max)' "$tmp/$name.out" | tr -s ' ' | paste -sd ';')"
    ok
  else
    bad "verify $name: $(cat "$tmp/$name.out")"
  fi
done

evloss() { "$bin" eval --quiet --model "$1" --data "$2" --batch "$3" --seq "$4" --batches 1 2>"$tmp/err" | awk '/^loss/ {print $2}'; }
close() { "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > $3 * abs(b))" "$1" "$2"; }
#        tag   shape                                                                        B T  options
for cfg in "q2|qwen2:L=2,C=48,NH=6,NKV=2,FF=80,V=300,T=64,theta=1000000|2|13|" \
           "q3|qwen3:L=2,C=40,NH=4,NKV=2,hd=14,FF=72,V=260,T=32,theta=1000000,tied=1|3|9|--rope-parameters --dtype bf16 --shard 20000 --lm-head"; do
  IFS='|' read -r tag shape B T opts <<<"$cfg"
  out=$("$py" "$here/hf_write.py" qwen "$tmp/$tag" "$shape" "$B" "$T" 5 --stream $opts)
  want=$(echo "$out" | awk '/^pytorch loss/ {print $3}')
  got=$(evloss "$tmp/$tag/hf" "$tmp/$tag/tokens.bin" "$B" "$T")
  echo "$tag: eval loss $got, PyTorch's $want"
  [ -n "$got" ] && [ -n "$want" ] && close "$got" "$want" 1e-5 && ok ||
    bad "$tag: eval loss '$got', PyTorch's '$want' ($(cat "$tmp/err"))"
done

# training from the Qwen3 directory: the same losses with disk homes; --save writes torch's names
if [ -f "$tmp/q3/hf/config.json" ]; then
  "$py" - "$tmp" <<'PY'
import struct, sys, random
random.seed(5)
toks = [random.randrange(260) for _ in range(2000)]
open(sys.argv[1] + '/tr.bin', 'wb').write(struct.pack('<256i', *([20240520, 1, len(toks)] + [0] * 253)) + struct.pack('<%dH' % len(toks), *toks))
PY
  trn() { "$bin" train --model "$tmp/q3/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 3 --quiet "$@" >/dev/null 2>"$tmp/err"; }
  trn --log "$tmp/a.jsonl" --save "$tmp/s1" || bad "train: $(cat "$tmp/err")"
  trn --log "$tmp/b.jsonl" --offload disk --offload-dir "$tmp" || bad "train disk: $(cat "$tmp/err")"
  la=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/a.jsonl"); lb=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/b.jsonl")
  echo "qwen3 training losses: $(echo $la)"
  [ -n "$la" ] && [ "$la" = "$lb" ] && ok || bad "losses differ: $la / $lb"
  "$py" - "$here" "$tmp/q3/hf" "$tmp/s1" <<'PY' && ok || bad "saved directory differs"
import sys
sys.path.insert(0, sys.argv[1])
import hf_write
a, b = hf_write.load_dir(sys.argv[2]), hf_write.load_dir(sys.argv[3])
a.pop("lm_head.weight")  # the tied head's copy in the source's files: hptrain writes wte once
assert set(a) == set(b), sorted(set(a) ^ set(b))
import torch
for k in a:  # bf16 files in, bf16 out (the default --save-dtype: the input's)
    assert a[k].dtype == b[k].dtype == torch.bfloat16 and a[k].shape == b[k].shape, k
assert not all(bool((a[k] == b[k]).all()) for k in a)  # trained: the weights moved
import json, os
c = json.load(open(os.path.join(sys.argv[3], "config.json")))
assert c["architectures"] == ["Qwen3ForCausalLM"] and c["model_type"] == "qwen3", c
assert c["head_dim"] == 14 and c["num_attention_heads"] == 4 and c["hidden_size"] == 40, c
assert c["tie_word_embeddings"] is True and c["eos_token_id"] == [2, 3], c
PY
  # the saved directory reads back: its eval loss is the trained model's
  got=$(evloss "$tmp/s1" "$tmp/q3/tokens.bin" 3 9)
  [ -n "$got" ] && ok || bad "eval of the saved directory: $(cat "$tmp/err")"
fi
finish test_hf_qwen || exit 1
