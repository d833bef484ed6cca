#!/usr/bin/env bash
# test_verify_torch.sh HPTRAIN: `hptrain verify` on PyTorch references made now by
# tests/make_ref_state.py (Debian's python3-torch): the real GPT-2 vocabulary (V=50257,
# Vp=50304) with C and T not multiples of 8, and a second odd shape; and llama shapes by
# tests/make_ref_state_llama.py (see below). Exit 77 (ctest: skipped)
# when torch is not installed.
set -u
bin=$1
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "python3-torch is not installed: skipped"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
#        name       L  C  NH V     Vp    maxT B T  seed
for cfg in "realvocab 2 36 3 50257 50304 64 2 13 7" "odd 3 20 5 333 384 40 3 29 11"; do
  set -- $cfg
  name=$1
  shift
  if ! "$py" "$here/make_ref_state.py" "$tmp/$name" "$@" >"$tmp/gen.log" 2>&1; then
    echo "FAIL: generating $name: $(tail -3 "$tmp/gen.log")"
    fail=$((fail + 1))
    continue
  fi
  if "$bin" verify --model "$tmp/$name/model.bin" --state "$tmp/$name/state.bin" \
       --steps "$tmp/$name/steps.json" >"$tmp/$name.out" 2>&1 && grep -q PASSED "$tmp/$name.out"; then
    pass=$((pass + 1))
    head -2 "$tmp/$name.out"
  else
    fail=$((fail + 1))
    echo "FAIL: verify $name"
    cat "$tmp/$name.out"
  fi
done
# llama (tests/make_ref_state_llama.py, hand-written from Hugging Face's LlamaForCausalLM): the
# issue's odd shapes: NH/NKV = 3, C not a multiple of 64, T not a multiple of the attention
# tile, Llama 3 rope scaling on (orig 16: the rotary frequencies fall in all three bands),
# untied head; then a tied head with q/k/v/o and MLP biases, NKV = NH, no scaling; then
# Mistral's sliding window (window=W: each query sees its last W keys) with T below, at and
# above the window, a window of 1, and T = 150 over a window of 20 (the flash kernels' 64-key
# tiles skipped).
for cfg in "gqa llama:L=2,C=96,NH=6,NKV=2,FF=200,V=500,T=64,theta=10000,eps=1e-5,factor=8,low=1,high=4,orig=16,tied=0 2 37 7" \
           "bias llama:L=3,C=40,NH=5,FF=72,V=333,T=40,theta=500,eps=1e-6,tied=1,attn_bias=1,mlp_bias=1 3 29 11" \
           "winbelow llama:L=2,C=48,NH=6,NKV=2,FF=80,V=300,T=40,theta=10000,eps=1e-5,window=8 2 5 7" \
           "winat llama:L=2,C=48,NH=6,NKV=2,FF=80,V=300,T=40,theta=10000,eps=1e-5,window=8 2 8 7" \
           "winabove llama:L=2,C=42,NH=3,NKV=1,FF=70,V=300,T=40,theta=10000,eps=1e-5,window=8 2 29 5" \
           "win1 llama:L=2,C=48,NH=6,NKV=3,FF=80,V=300,T=40,theta=10000,eps=1e-5,window=1 3 13 9" \
           "wintile llama:L=2,C=32,NH=4,NKV=2,FF=48,V=200,T=160,theta=10000,eps=1e-5,window=20 1 150 3"; do
  set -- $cfg
  name=$1
  shape=$2
  if ! "$py" "$here/make_ref_state_llama.py" "$tmp/$name" "$shape" "$3" "$4" "$5" >"$tmp/gen.log" 2>&1; then
    echo "FAIL: generating $name: $(tail -3 "$tmp/gen.log")"
    fail=$((fail + 1))
    continue
  fi
  if "$bin" verify --model "$shape" --state "$tmp/$name/state.bin" \
       --steps "$tmp/$name/steps.json" >"$tmp/$name.out" 2>&1 && grep -q PASSED "$tmp/$name.out"; then
    pass=$((pass + 1))
    cat "$tmp/$name.out"
  else
    fail=$((fail + 1))
    echo "FAIL: verify $name"
    cat "$tmp/$name.out"
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
