#!/bin/bash
# bench/bench_llama.sh: hptrain vs PyTorch on llama training steps (CPU, fp32, AdamW), side by
# side in one run: `hptrain train` on a random-token shard, then bench/torch_llama.py (the
# reference's model code, tests/make_ref_state_llama.py), each under /usr/bin/time -v so both
# sides' peak RSS is measured the same way; tokens/s over the timed steps (after the warm-up).
#
# usage: bench/bench_llama.sh [--shape SHAPE] [--batch B] [--seq T] [--warmup W] [--steps S]
#                             [--threads N] [--hptrain PATH] [--hpt-flags "FLAGS"] [--quick]
#   defaults: llama3.2-1b, B=4, T=256, 1 warm-up step, 3 timed steps, 2 threads. llama3.2-1b
#   in fp32 with AdamW needs ~20 GB per side (1.24B parameters x 16 bytes): run it on a
#   machine with that much free memory. --quick: a small llama (L=2, C=256, NH=8, NKV=2,
#   FF=688, V=50257), to check the plumbing and compare on a small model. --hpt-flags: hptrain's
#   plan (lossless choices keep the comparison fp32 AdamW), e.g. "--recompute full --head-chunk
#   256", which brings llama3.2-1b's peak from 21.3 to 18.8 GiB (hptrain estimate).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
SHAPE=llama3.2-1b B=4 T=256 WARMUP=1 STEPS=3 THREADS=2 HPTRAIN="$ROOT/build/hptrain" HPT_FLAGS=""
while [ $# -gt 0 ]; do
    case "$1" in
    --shape) SHAPE=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --hptrain) HPTRAIN=$2; shift 2 ;;
    --hpt-flags) HPT_FLAGS=$2; shift 2 ;;
    --quick) SHAPE="llama:L=2,C=256,NH=8,NKV=2,FF=688,V=50257,T=256"; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_llama.sh: unknown option '$1'" >&2; exit 1 ;;
    esac
done
# the reference script parses "llama:..." only: a named shape is spelt out for it
case "$SHAPE" in
llama3.2-1b) PSHAPE="llama:L=16,C=2048,NH=32,NKV=8,FF=8192,V=128256,T=131072,theta=500000,eps=1e-5,factor=32,low=1,high=4,orig=8192,tied=1" ;;
llama3.2-3b) PSHAPE="llama:L=28,C=3072,NH=24,NKV=8,FF=8192,V=128256,T=131072,theta=500000,eps=1e-5,factor=32,low=1,high=4,orig=8192,tied=1" ;;
llama:*) PSHAPE=$SHAPE ;;
*) echo "bench_llama.sh: $SHAPE: use llama3.2-1b, llama3.2-3b or llama:..." >&2; exit 1 ;;
esac
. "$ROOT/bench/random_shard.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
random_shard "$tmp" $(( (WARMUP + STEPS + 2) * B * T + 1 ))
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE
echo "shape $SHAPE, B=$B T=$T, $WARMUP warm-up + $STEPS timed steps, $THREADS threads${HPT_FLAGS:+, hptrain $HPT_FLAGS}"
/usr/bin/time -v "$HPTRAIN" train --model "$SHAPE" --data "$tmp/train_000.bin" --batch $B --seq $T \
    --steps $((WARMUP + STEPS)) --threads $THREADS $HPT_FLAGS --log "$tmp/hpt.jsonl" >"$tmp/hpt.out" 2>"$tmp/hpt.err" ||
    { echo "hptrain failed:"; grep -v "^\s" "$tmp/hpt.err" | tail -5; }
hpt_tps=$(python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
ms = sum(r["step_ms"] for r in rows)
print("%.1f" % (len(rows) * int(sys.argv[3]) * 1000.0 / ms) if ms else "nan")' "$tmp/hpt.jsonl" $WARMUP $((B * T)) 2>/dev/null || echo nan)
hpt_rss=$(awk '/Maximum resident set size/ {printf "%.1f", $NF / 1024}' "$tmp/hpt.err")
/usr/bin/time -v "$PY" "$ROOT/bench/torch_llama.py" "$PSHAPE" $B $T $WARMUP $STEPS $THREADS \
    >"$tmp/pt.out" 2>"$tmp/pt.err" || { echo "pytorch failed:"; tail -5 "$tmp/pt.err"; }
pt_tps=$(python3 -c 'import json,sys; print("%.1f" % json.loads(open(sys.argv[1]).read())["tokens_per_s"])' "$tmp/pt.out" 2>/dev/null || echo nan)
pt_rss=$(awk '/Maximum resident set size/ {printf "%.1f", $NF / 1024}' "$tmp/pt.err")
printf "%-8s %12s %14s\n" side tokens/s "peak RSS MiB"
printf "%-8s %12s %14s\n" hptrain "$hpt_tps" "${hpt_rss:-nan}"
printf "%-8s %12s %14s\n" pytorch "$pt_tps" "${pt_rss:-nan}"
python3 -c 'import sys; a, b = sys.argv[1:3]; print("hptrain / pytorch tokens/s: %.2fx" % (float(a) / float(b)))' "$hpt_tps" "$pt_tps" 2>/dev/null || true
