#!/bin/bash
# bench/bench_activations.sh: activation memory and step time of each recompute policy and
# attention kind (docs/activations.md).
#
#   1. Attention memory vs T (estimator, exact: test_recompute and test_estimate hold the
#      model's arena equal to it): GPT-2 124M with maxT 4096 at B=1, T = 1024, 2048, 4096, no
#      recomputation, flash vs plain; the arena per token shows flash's linear growth.
#   2. Measured: `hptrain train` for STEPS steps on random tokens, for each attention kind and
#      policy, on GPT-2 124M at B=4 T=1024 and on a small model (L=4, C=256, NH=4) at B=1
#      T=4096. Columns: the activation arena (what the model allocated; the log's accounted
#      device peak minus the rest is the same figure), the accounted device peak, the mean
#      step time of the steps after the first (the first allocates and warms up), and both as
#      ratios to no recomputation with the same attention kind.
# The machine's load (uptime) is printed before and after: step times on a shared 2-core
# machine are only comparable within one run.
#
# usage: bench/bench_activations.sh [--hptrain PATH] [--steps S] [--threads N] [--quick]
#   --quick  a tiny model and short sequences: checks the plumbing; figures mean nothing.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HPT="$ROOT/build/hptrain"
STEPS=3
THREADS=2
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
    --hptrain) HPT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "usage: $0 [--hptrain PATH] [--steps S] [--threads N] [--quick]" >&2; exit 2 ;;
    esac
done
[ -x "$HPT" ] || { echo "no $HPT: build first (cmake --build build)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=$THREADS

echo "== bench_activations: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $THREADS threads"
echo "load before: $(uptime)"

. "$ROOT/bench/random_shard.sh"
random_shard "$TMP" $((1 << 17))

gib() { python3 -c "print('%.3f' % ($1 / 1073741824))"; }
est_acts() { # model B T attention recompute -> activation bytes
    "$HPT" estimate --model "$1" --batch "$2" --seq "$3" --attention "$4" --recompute "$5" --json |
        python3 -c "import json,sys; print(json.load(sys.stdin)['activation_bytes'])"
}

if [ $QUICK = 1 ]; then
    LONG="gpt2:L=2,C=64,NH=4,V=50257,T=256"; TS="64 128 256"
    RUNS=("gpt2:L=2,C=64,NH=4,V=50257,T=256 2 128" "gpt2:L=2,C=64,NH=4,V=50257,T=256 1 256")
else
    LONG="gpt2:L=12,C=768,NH=12,V=50257,T=4096"; TS="1024 2048 4096"
    RUNS=("gpt2-124m 4 1024" "gpt2:L=4,C=256,NH=4,V=50257,T=4096 1 4096")
fi

echo
echo "-- 1. attention memory vs T: $LONG, B=1, recompute none (estimator = allocated arena)"
printf "%6s %14s %14s %14s %16s %16s\n" T "flash GiB" "plain GiB" "plain-flash" "flash B/token" "plain B/token"
for T in $TS; do
    f=$(est_acts "$LONG" 1 "$T" flash none)
    p=$(est_acts "$LONG" 1 "$T" plain none)
    printf "%6d %14s %14s %14s %16d %16d\n" "$T" "$(gib "$f")" "$(gib "$p")" "$(gib $((p - f)))" $((f / T)) $((p / T))
done

echo
if [ "$STEPS" -gt 1 ]; then what="mean of steps 2..$STEPS"; else what="the one step, its arena's first touch included"; fi
echo "-- 2. measured: $STEPS step(s) each (time: $what)"
printf "%-40s %5s %-6s %-10s %11s %8s %11s %9s %7s\n" model B,T attn recompute "arena GiB" "x none" "peak GiB" "step s" "x none"
for run in "${RUNS[@]}"; do
    set -- $run
    M=$1 B=$2 T=$3
    for attn in flash plain; do
        base_a="" base_t=""
        for rc in none selective every:4 full; do
            log="$TMP/log.jsonl"
            rm -f "$log"
            if ! "$HPT" train --model "$M" --data "$TMP/train_*.bin" --batch "$B" --seq "$T" \
                --steps "$STEPS" --warmup 1 --eval-every 0 --attention "$attn" --recompute "$rc" \
                --log "$log" --quiet > "$TMP/out.txt" 2>&1; then
                printf "%-40s %5s %-6s %-10s failed: %s\n" "$M" "$B,$T" "$attn" "$rc" "$(tail -1 "$TMP/out.txt")"
                continue
            fi
            a=$(est_acts "$M" "$B" "$T" "$attn" "$rc")
            read -r peak st < <(python3 -c "
import json, sys
rows = [json.loads(l) for l in open('$log')]
ts = [r['step_ms'] for r in rows[1:]] or [rows[0]['step_ms']]
print(rows[-1]['mem_peak_bytes'], sum(ts) / len(ts) / 1000)")
            [ -z "$base_a" ] && base_a=$a && base_t=$st
            printf "%-40s %5s %-6s %-10s %11s %8.2f %11s %9.2f %7.2f\n" "$M" "$B,$T" "$attn" "$rc" \
                "$(gib "$a")" "$(python3 -c "print($a / $base_a)")" "$(gib "$peak")" "$st" \
                "$(python3 -c "print($st / $base_t)")"
        done
    done
done
echo
echo "load after: $(uptime)"
