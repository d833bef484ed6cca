# tests/hf_family.sh: what the Hugging Face family tests share (test_hf_qwen.sh, test_hf_gemma.sh;
# source it after lib.sh, with $bin the hptrain binary and $here tests/; it sets $py, Debian's
# python3 with torch, and exits 77, ctest's skip, without torch):
#   hf_verify SCRIPT "NAME SHAPE B T SEED"...   SCRIPT's reference state of each shape through
#       `hptrain verify` (logits, loss, every gradient, 10 AdamW steps within 1e-4)
#   hf_eval FAMILY "TAG|SHAPE|B|T|OPTIONS"...   tests/hf_write.py FAMILY's directory $tmp/TAG/hf
#       through `hptrain eval`: PyTorch's loss within 1e-5
#   hf_train DIR V ARCH MODEL_TYPE KEY=JSON...  3 steps from DIR on tokens below V, --save $tmp/s1
#       and the same losses with disk homes; the saved directory holds DIR's names and shapes in
#       fp32 (hf_write.py saved: ARCH, MODEL_TYPE and each config.json KEY) and evaluates
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then echo "python3-torch is not installed: skipped"; exit 77; fi
evloss() { "$bin" eval --quiet --model "$1" --data "$2" --batch "$3" --seq "$4" --batches 1 2>"$tmp/err" | awk '/^loss/ {print $2}'; }
close() { "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > $3 * abs(b))" "$1" "$2"; }

hf_verify() {
  local script=$1 cfg name shape worst
  shift
  for cfg in "$@"; do
    set -- $cfg
    name=$1 shape=$2
    if ! "$py" "$here/$script" "$tmp/$name" "$shape" "$3" "$4" "$5" >"$tmp/gen.log" 2>&1; then
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
}

hf_eval() {
  local fam=$1 cfg tag shape B T opts out want got
  shift
  for cfg in "$@"; do
    IFS='|' read -r tag shape B T opts <<<"$cfg"
    # shellcheck disable=SC2086 # opts: several options
    out=$("$py" "$here/hf_write.py" "$fam" "$tmp/$tag" "$shape" "$B" "$T" 5 --stream $opts)
    want=$(echo "$out" | awk '/^pytorch loss/ {print $3}')
    got=$(evloss "$tmp/$tag/hf" "$tmp/$tag/tokens.bin" "$B" "$T")
    echo "$tag: eval loss $got, PyTorch's $want"
    [ -n "$got" ] && [ -n "$want" ] && close "$got" "$want" 1e-5 && ok ||
      bad "$tag: eval loss '$got', PyTorch's '$want' ($(cat "$tmp/err"))"
  done
}

hf_train() {
  local dir=$1 V=$2 la lb got
  shift 2
  "$py" - "$tmp" "$V" <<'PY'
import struct, sys, random
random.seed(5)
toks = [random.randrange(int(sys.argv[2])) for _ in range(2000)]
open(sys.argv[1] + '/tr.bin', 'wb').write(struct.pack('<256i', *([20240520, 1, len(toks)] + [0] * 253)) + struct.pack('<%dH' % len(toks), *toks))
PY
  trn() { "$bin" train --model "$dir/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 3 --quiet "$@" >/dev/null 2>"$tmp/err"; }
  trn --log "$tmp/a.jsonl" --save "$tmp/s1" || bad "train: $(cat "$tmp/err")"
  trn --log "$tmp/b.jsonl" --offload disk --offload-dir "$tmp" || bad "train disk: $(cat "$tmp/err")"
  la=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/a.jsonl"); lb=$(grep -o '"loss": *[0-9.e+-]*' "$tmp/b.jsonl")
  echo "$1 training losses: $(echo $la)"
  [ -n "$la" ] && [ "$la" = "$lb" ] && ok || bad "losses differ: $la / $lb"
  "$py" "$here/hf_write.py" saved "$dir/hf" "$tmp/s1" "$@" && ok || bad "saved directory differs"
  # the saved directory reads back: its eval loss is the trained model's
  got=$(evloss "$tmp/s1" "$dir/tokens.bin" 3 9)
  [ -n "$got" ] && ok || bad "eval of the saved directory: $(cat "$tmp/err")"
}
