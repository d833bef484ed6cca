#!/usr/bin/env bash
# test_verify_torch.sh HPTRAIN: `hptrain verify` on PyTorch references made now by
# tests/make_ref_state.py (Debian's python3-torch): the real GPT-2 vocabulary (V=50257,
# Vp=50304) with C and T not multiples of 8, and a second odd shape. Exit 77 (ctest: skipped)
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
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
