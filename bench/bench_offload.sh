#!/usr/bin/env bash
# bench_offload.sh: step time and bytes per tier of saved-activation offload and int8
# compression (docs/activations.md), one model, each --act-offload / --act-compress choice.
# Usage: bench/bench_offload.sh [--hptrain PATH] [--steps S] [--threads N] [--model M]
#        [--batch B] [--seq T]. Times: mean of steps 2..S (S >= 2).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HPT="$ROOT/build/hptrain"
STEPS=3 THREADS=2 M=gpt2-124m B=4 T=1024
while [ $# -gt 0 ]; do
    case "$1" in
    --hptrain) HPT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --model) M=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    *) echo "usage: $0 [--hptrain PATH] [--steps S] [--threads N] [--model M] [--batch B] [--seq T]" >&2; exit 2 ;;
    esac
done
[ -x "$HPT" ] || { echo "no $HPT: build first (cmake --build build)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=$THREADS
echo "== bench_offload: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $THREADS threads, $M B=$B T=$T, $STEPS steps"
echo "load before: $(uptime)"
. "$ROOT/bench/random_shard.sh"
random_shard "$TMP" $((1 << 17))
printf "%-34s %14s %14s %14s %10s %8s %10s\n" flags "arena bytes" "host acts" "disk acts" "step s" "x none" "loss@S"
base=""
for flags in "" "--act-offload host" "--act-offload disk" "--act-compress int8" \
             "--act-offload host --act-compress int8" "--act-offload disk --act-compress int8"; do
    log="$TMP/log.jsonl"; rm -f "$log"
    if ! "$HPT" train --model "$M" --data "$TMP/train_*.bin" --batch "$B" --seq "$T" --steps "$STEPS" \
        --warmup 1 --eval-every 0 --offload-dir "$TMP/off" $flags --log "$log" --quiet > "$TMP/out.txt" 2>&1; then
        printf "%-34s failed: %s\n" "${flags:-(none)}" "$(tail -1 "$TMP/out.txt")"; continue
    fi
    read -r a h d < <("$HPT" estimate --model "$M" --batch "$B" --seq "$T" $flags --json | python3 -c "
import json,sys; e=json.load(sys.stdin); b=e['bytes']; print(b['device']['acts'], b['host']['acts'], b['disk']['acts'])")
    read -r st loss < <(python3 -c "
import json
rows = [json.loads(l) for l in open('$log')]
ts = [r['step_ms'] for r in rows[1:]] or [rows[0]['step_ms']]
print(sum(ts) / len(ts) / 1000, rows[-1]['loss'])")
    [ -z "$base" ] && base=$st
    printf "%-34s %14d %14d %14d %10.2f %8.2f %10.5f\n" "${flags:-(none)}" "$a" "$h" "$d" "$st" \
        "$(python3 -c "print($st / $base)")" "$loss"
done
echo "load after: $(uptime)"
