#!/usr/bin/env bash
# bench_base_prefetch.sh: a LoRA run whose frozen base lives on the disk (--base-home disk,
# docs/lora.md "The base off the device"), with and without --base-prefetch, side by side.
# llama:L=8,C=1024,NH=16,NKV=4,FF=2816,V=8192 (random weights), r=16 on every linear layer,
# B=1, T=256, --recompute full, the base's blocks in each --base-weights KIND on --offload-dir
# DIR, S steps per run; the pair (prefetch 0, then 1) runs R times back to back. Per run, from
# the --log file (steps 2..S; the first pays for warm-up): seconds per step, the seconds per
# step the compute thread waited for a block (eng_wait_s: its own reads without prefetch, the
# worker's unfinished ones with), the bytes and seconds of disk reads per step.
# Usage: bench/bench_base_prefetch.sh [--hptrain PATH] [--dir DIR] [--steps S] [--repeat R]
#                                     [--kinds "bf16 nf4"]
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
HPT="$ROOT/build/hptrain"
STEPS=4 REPEAT=2 KINDS="bf16 nf4" DIR=""
while [ $# -gt 0 ]; do
    case "$1" in
    --hptrain) HPT=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --kinds) KINDS=$2; shift 2 ;;
    *) echo "usage: $0 [--hptrain PATH] [--dir DIR] [--steps S] [--repeat R] [--kinds \"bf16 nf4\"]" >&2
       exit 2 ;;
    esac
done
[ -x "$HPT" ] || { echo "no $HPT: build first (cmake --build build)" >&2; exit 1; }
[ "$STEPS" -ge 2 ] || { echo "--steps must be at least 2" >&2; exit 2; }
[ -n "$DIR" ] || DIR=$(mktemp -d /tmp/hpt_base_prefetch_XXXXXX)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP" "$DIR"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=PASSIVE
SHAPE="llama:L=8,C=1024,NH=16,NKV=4,FF=2816,V=8192"
echo "== bench_base_prefetch: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $OMP_NUM_THREADS threads"
echo "disk: $DIR ($(df -P "$DIR" | awk 'NR == 2 {print $1}'))"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# tokens below the shape's V = 8192 (an llm.c shard, seed 1)
python3 - "$TMP" <<'PY'
import random, struct, sys
random.seed(1)
n = 1 << 16
hdr = [20240520, 1, n] + [0] * 253
toks = [random.randrange(8192) for _ in range(n)]
open(sys.argv[1] + "/train_000.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % n, *toks))
PY

# steps 2..S of a --log file: s/step, waited s/step, disk read MiB/step and s/step, the losses
summary() { python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
a, b = rows[0], rows[-1]
n = len(rows) - 1
step = sum(r["step_ms"] for r in rows[1:]) / n / 1e3
wait = (b["eng_wait_s"] - a["eng_wait_s"]) / n
mib = (b["eng_disk_read_bytes"] - a["eng_disk_read_bytes"]) / n / 2**20
rs = (b["eng_disk_read_s"] - a["eng_disk_read_s"]) / n
print("%.3f s/step, waited for blocks %.3f s/step, disk reads %.1f MiB/step in %.3f s/step; "
      "losses %s" % (step, wait, mib, rs, " ".join("%.6f" % r["loss"] for r in rows)))' "$1"; }

for kind in $KINDS; do
    flags=(--lora r=16,alpha=32 --base-weights "$kind" --base-home disk --offload-dir "$DIR"
           --recompute full)
    echo
    echo "-- $SHAPE, --base-weights $kind --base-home disk, B=1 T=256, --recompute full, $STEPS steps"
    for pf in 0 1; do
        dev=$("$HPT" estimate --model "$SHAPE" --batch 1 --seq 256 "${flags[@]}" --base-prefetch "$pf" \
              --json | python3 -c 'import json, sys; e = json.load(sys.stdin); print(e["bytes"]["device"]["params"])')
        echo "  estimate, --base-prefetch $pf: device params $dev bytes"
    done
    for r in $(seq 1 "$REPEAT"); do
        for pf in 0 1; do
            out="$TMP/$kind-$pf-$r"
            echo "  load: $(cut -d' ' -f1-3 /proc/loadavg)"
            "$HPT" train --model "$SHAPE" --data "$TMP/train_*.bin" --batch 1 --seq 256 \
                --steps "$STEPS" "${flags[@]}" --base-prefetch "$pf" --quiet --log "$out.jsonl" \
                > "$out.out" 2>&1 || { cat "$out.out"; exit 1; }
            echo "  [run $r, --base-prefetch $pf] $(summary "$out.jsonl")"
        done
    done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
