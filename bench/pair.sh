#!/bin/bash
# bench/pair.sh: two hptrain binaries side by side on GPT-2 124M training steps, for a change
# that must not cost speed. For each (B, T) the two binaries run in turns, A B A B ... (ROUNDS
# pairs), on the same random-token shard with the same flags; each run's tokens/s is the mean of
# its steps after the first (bench/random_shard.sh's mean_ms). Prints each pair and the median
# ratio B/A per configuration: turns cancel slow drifts of a shared machine, the median its spikes.
#
# usage: bench/pair.sh A_BINARY B_BINARY [--configs "4x64 4x256"] [--steps S] [--rounds R]
#                      [--threads N] [-- EXTRA TRAIN FLAGS]
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/bench/random_shard.sh"
[ $# -ge 2 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
A=$1 B=$2; shift 2
CONFIGS="4x64 4x256" STEPS=6 ROUNDS=3 THREADS=2 EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
    --configs) CONFIGS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "bench/pair.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
random_shard "$DIR" 400000
run() { # binary B T log -> tokens/s
    "$1" train --model gpt2-124m --data "$DIR/train_000.bin" --batch "$2" --seq "$3" \
        --steps "$STEPS" --threads "$THREADS" --log "$4" "${EXTRA[@]}" >/dev/null 2>&1 || { echo nan; return; }
    python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][1:]
print("%.2f" % (sum(x["tokens_per_s"] for x in r) / len(r)) if r else "nan")' "$4"
}
for cfg in $CONFIGS; do
    b=${cfg%x*} t=${cfg#*x}
    ratios=()
    for r in $(seq 1 "$ROUNDS"); do
        ta=$(run "$A" "$b" "$t" "$DIR/a.jsonl"); tb=$(run "$B" "$b" "$t" "$DIR/b.jsonl")
        ratio=$(python3 -c "print('%.4f' % ($tb / $ta))" 2>/dev/null || echo nan)
        ratios+=("$ratio")
        echo "B=$b T=$t round $r: A $ta tok/s, B $tb tok/s, B/A $ratio"
    done
    med=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "B=$b T=$t: median B/A = $med over $ROUNDS pairs (load $(cut -d' ' -f1 /proc/loadavg))"
done
