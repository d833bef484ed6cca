#!/usr/bin/env bash
# test_max_seq.sh HPTRAIN: `hptrain estimate --max-seq` (issue 38): the longest --seq that fits
# a budget, checked by estimating at max_seq (fits: status 0) and at max_seq + 1 (does not:
# status 1), in a given plan (GPT-2 up to its maxT; a llama past its maxT with --seq-limit, the
# model then given maxT = T; LoRA with an int8 base; --device cuda) and with --plan auto (the
# search at max_seq finds a plan, at max_seq + 1 none); the JSON agrees with the text; the
# refusals (GPT-2 past its wpe, no --memory, --seq-limit alone, nothing fits).
set -u
bin=$1
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
export HPT_CALIBRATION=$tmp/cal.json
cp "$(dirname "$0")/calibration_fake.json" "$HPT_CALIBRATION" # made-up rates: nothing is timed

# max_seq_of ARGS...: the N of the `max_seq N` line (empty on failure)
max_seq_of() { "$bin" estimate "$@" 2>"$tmp/ms.err" | sed -n 's/^max_seq \([0-9]*\)$/\1/p'; }
# fits_at SHAPE T ARGS...: estimate at --seq T; "0" when it fits, "1" when it does not
fits_at() {
  local shape=$1 t=$2; shift 2
  "$bin" estimate --model "$shape" --seq "$t" "$@" >/dev/null 2>&1
  echo $?
}
# check NAME SHAPE_AT_N SHAPE_AT_N1 N ARGS...: N fits, N + 1 does not
check() {
  local name=$1 s0=$2 s1=$3 n=$4; shift 4
  if [ -z "$n" ] || [ "$n" -lt 2 ]; then bad "$name: max_seq '$n': $(cat "$tmp/ms.err")"; return; fi
  [ "$(fits_at "$s0" "$n" "$@")" = 0 ] && ok || bad "$name: --seq $n does not fit"
  [ "$(fits_at "$s1" $((n + 1)) "$@")" = 1 ] && ok || bad "$name: --seq $((n + 1)) fits too"
}

g="gpt2:L=4,C=64,NH=4,V=64,T=1024"
n=$(max_seq_of --model "$g" --batch 2 --max-seq --memory 20MB)
check "gpt2" "$g" "$g" "$n" --batch 2 --memory 20MB
# the JSON's max_seq and T are the text's N, its peak within the budget
"$bin" estimate --model "$g" --batch 2 --max-seq --memory 20MB --json >"$tmp/g.json" 2>/dev/null || bad "json"
python3 - "$tmp/g.json" "$n" <<'PY' && ok || bad "gpt2 json disagrees with the text ($n)"
import json, sys
d = json.load(open(sys.argv[1])); n = int(sys.argv[2])
assert d['max_seq'] == n and d['T'] == n and d['fits'], d
assert d['max_seq_peak_bytes'] == d['peak_bytes'] <= d['budget_bytes'] < d['max_seq_search']['next_peak_bytes'], d
assert d['max_seq_search']['bound'] == 'budget' and d['max_seq_search']['plan'] == 'given', d
PY
# a large budget: GPT-2's maxT bounds it, and the text says why; no --seq-limit past the wpe
"$bin" estimate --model "$g" --batch 2 --max-seq --memory 1GB >"$tmp/big.txt" 2>&1
grep -q "^max_seq 1024$" "$tmp/big.txt" && grep -q "wpe" "$tmp/big.txt" && ok || bad "gpt2 at maxT: $(head -3 "$tmp/big.txt")"
expect_rc=2 expect_error "gpt2 past maxT" "wpe" "$bin" estimate --model "$g" --max-seq --memory 1GB --seq-limit 2000
expect_rc=2 expect_error "no budget" "needs --memory" "$bin" estimate --model "$g" --max-seq
expect_rc=2 expect_error "--seq-limit alone" "for --max-seq" "$bin" estimate --model "$g" --seq-limit 100
expect_rc=1 expect_error "nothing fits" "even --seq 1" "$bin" estimate --model "$g" --max-seq --memory 1MB
grep -q "^max_seq 0$" "$tmp/out" && ok || bad "nothing fits: no 'max_seq 0' line: $(cat "$tmp/out")"

# a llama past its maxT 64: the run's model has maxT = T (the rotary tables grow, counted)
l="llama:L=2,C=64,NH=4,NKV=2,FF=128,V=256"
n=$(max_seq_of --model "$l,T=64" --batch 1 --max-seq --memory 20MB --seq-limit 100000)
[ -n "$n" ] && [ "$n" -gt 64 ] && ok || bad "llama past maxT: '$n'"
check "llama past maxT" "$l,T=$n" "$l,T=$((n + 1))" "$n" --batch 1 --memory 20MB
n0=$(max_seq_of --model "$l,T=64" --batch 1 --max-seq --memory 20MB)
[ "$n0" = 64 ] && ok || bad "llama without --seq-limit: '$n0', not its maxT 64"
# LoRA over an int8 base fits a longer sequence than the full fine-tune
nl=$(max_seq_of --model "$l,T=64" --batch 1 --max-seq --memory 20MB --seq-limit 100000 --lora r=8 --base-weights int8)
check "lora int8" "$l,T=$nl" "$l,T=$((nl + 1))" "$nl" --batch 1 --memory 20MB --lora r=8 --base-weights int8
[ -n "$nl" ] && [ "$nl" -gt "$n" ] && ok || bad "lora int8 max_seq $nl not above the full fine-tune's $n"
# --device cuda (estimated here, no GPU needed)
nc=$(max_seq_of --model "$l,T=64" --batch 2 --max-seq --memory 20MB --seq-limit 100000 --device cuda)
check "cuda" "$l,T=$nc" "$l,T=$((nc + 1))" "$nc" --batch 2 --memory 20MB --device cuda

# --plan auto: the search at each T; at max_seq it finds a plan, at max_seq + 1 none; at least
# the given plan's answer
auto=(--plan auto --memory 20MB --host-memory 1GB)
na=$(max_seq_of --model "$l,T=64" --batch 1 --max-seq --seq-limit 100000 "${auto[@]}")
check "plan auto" "$l,T=$na" "$l,T=$((na + 1))" "$na" --batch 1 "${auto[@]}"
[ -n "$na" ] && [ "$na" -ge "$n" ] && ok || bad "plan auto max_seq $na below the given plan's $n"
"$bin" estimate --model "$l,T=64" --batch 1 --max-seq --seq-limit 100000 "${auto[@]}" --json >"$tmp/a.json" 2>/dev/null || bad "auto json"
python3 - "$tmp/a.json" "$na" <<'PY' && ok || bad "plan auto json disagrees with the text ($na)"
import json, sys
d = json.load(open(sys.argv[1])); n = int(sys.argv[2])
assert d['max_seq'] == d['T'] == d['model']['maxT'] == n and d['fits'], d
s = d['max_seq_search']
assert s['plan'] == 'auto' and s['bound'] == 'budget' and s['model_maxT'] == 64, s
PY
# GPT-2 with --plan auto and a budget its maxT binds first
"$bin" estimate --model "$g" --batch 1 --max-seq --plan auto --memory 1GB --host-memory 1GB >"$tmp/ga.txt" 2>&1
grep -q "^max_seq 1024$" "$tmp/ga.txt" && grep -q "wpe" "$tmp/ga.txt" && ok || bad "gpt2 auto at maxT: $(grep -A2 max_seq "$tmp/ga.txt")"
# --plan auto with a target --seq, as before: the plan at that T
"$bin" estimate --model "$l,T=4096" --batch 1 --seq 2048 "${auto[@]}" >"$tmp/t.txt" 2>&1 || bad "auto at --seq 2048: $(tail -2 "$tmp/t.txt")"
sed -n 2p "$tmp/t.txt" | grep -q -- "--seq 2048 " && ok || bad "auto at --seq 2048: $(sed -n 2p "$tmp/t.txt")"
finish test_max_seq
