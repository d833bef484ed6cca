#!/usr/bin/env bash
# bench_grad_home.sh: 16-bit gradient homes and loss scaling (docs/offload.md).
#  (a) GPT-2 124M, B=4 T=64, --offload host and --offload disk, exact mode: fp32 against fp16
#      gradient homes side by side (each pair run back to back): the gradients' home bytes
#      (hptrain estimate, which equals the measured bytes: tests/test_estimate.c), the engine's
#      bytes moved per step and the mean step time of steps 2..S;
#  (b) the small Moby-Dick model of docs/optimizers.md for N steps with fp16 homes on the host
#      from the default scale (2^16, window 2000): steps skipped, the scale at the end, and the
#      final losses next to fp32 homes.
# Usage: bench/bench_grad_home.sh [--hptrain PATH] [--dir DIR] [--steps S] [--small-steps N]
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
HPT="$ROOT/build/hptrain"
STEPS=4 SMALL=300 DIR=""
while [ $# -gt 0 ]; do
    case "$1" in
    --hptrain) HPT=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --small-steps) SMALL=$2; shift 2 ;;
    *) echo "usage: $0 [--hptrain PATH] [--dir DIR] [--steps S] [--small-steps N]" >&2; exit 2 ;;
    esac
done
[ -x "$HPT" ] || { echo "no $HPT: build first (cmake --build build)" >&2; exit 1; }
[ -n "$DIR" ] || DIR=$(mktemp -d /var/tmp/hpt_grad_home_XXXXXX)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP" "$DIR"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=PASSIVE
echo "== bench_grad_home: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $OMP_NUM_THREADS threads"
echo "load before: $(uptime)"
. "$ROOT/bench/random_shard.sh"
random_shard "$TMP" $((1 << 16))


# the gradients' bytes by tier from hptrain estimate --json
grad_bytes() { "$HPT" estimate --model gpt2-124m --batch 4 --seq 64 "$@" --json | python3 -c '
import json, sys
e = json.load(sys.stdin)
print(json.dumps({t: e["bytes"][t]["grads"] for t in e["bytes"] if e["bytes"][t].get("grads")}))' 2>/dev/null \
    || "$HPT" estimate --model gpt2-124m --batch 4 --seq 64 "$@" | grep -i grads; }

echo
echo "-- (a) gpt2-124m, B=4 T=64, $STEPS steps, exact mode (times: mean of steps 2..$STEPS)"
for off in host disk; do
    for gh in fp32 fp16; do
        flags=(--offload "$off" --offload-dir "$DIR" --grad-home "$gh")
        echo "[$off, grad home $gh] grads bytes: $(grad_bytes "${flags[@]}")"
        echo "  load: $(cut -d' ' -f1-3 /proc/loadavg)"
        "$HPT" train --model gpt2-124m --data "$TMP/train_*.bin" --batch 4 --seq 64 --steps "$STEPS" \
            "${flags[@]}" --quiet --log "$TMP/$off-$gh.jsonl" > "$TMP/$off-$gh.out" 2>&1 \
            || { cat "$TMP/$off-$gh.out"; exit 1; }
        echo "  step $(mean_ms "$TMP/$off-$gh.jsonl") ms; $(grep '^offload:' "$TMP/$off-$gh.out")"
        grep '^loss scale' "$TMP/$off-$gh.out" | sed 's/^/  /'
        echo "  losses: $(python3 -c 'import json,sys; print(" ".join("%.4f" % json.loads(l)["loss"] for l in open(sys.argv[1])))' "$TMP/$off-$gh.jsonl")"
    done
done

echo
echo "-- (b) gpt2:L=2,C=64,NH=4,T=64 on Moby-Dick, B=4 T=32, $SMALL steps, --offload host"
source bench/mobydick.sh
mobydick_data "$(dirname "$HPT")"
for gh in fp32 fp16; do
    echo "  load: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$HPT" train --model gpt2:L=2,C=64,NH=4,T=64 --data "$data/train_*.bin" --val "$data/val_*.bin" \
        --batch 4 --seq 32 --steps "$SMALL" --lr 2e-3 --warmup 100 --eval-every "$SMALL" \
        --val-batches 40 --offload host --grad-home "$gh" --quiet --log "$TMP/small-$gh.jsonl" \
        > "$TMP/small-$gh.out" 2>&1 || { cat "$TMP/small-$gh.out"; exit 1; }
    echo "  [grad home $gh] $(grep '^done:' "$TMP/small-$gh.out")"
    grep '^loss scale' "$TMP/small-$gh.out" | sed 's/^/    /'
done
echo "load after: $(uptime)"
