#!/usr/bin/env bash
# bench_offload_engine.sh: the offload engine (docs/offload.md).
#  (a) GPT-2 1.5B shape (L=48, C=1600, NH=25), whose fp32 AdamW training state (23.2 GiB) does
#      not fit this machine's memory, trained under --memory 4GB with the blocks' weights,
#      gradients and AdamW state on disk, fused update and exact mode: peak RSS, seconds per
#      step, disk bytes per step against the minimum, and the share of the worker's time hidden
#      behind compute;
#  (b) GPT-2 124M with the blocks' state on the host and on disk, exact and fused: tokens/s
#      against training in memory, in one run side by side.
# Usage: bench/bench_offload_engine.sh [--hptrain PATH] [--dir DIR] [--steps S] [--skip-big]
#        DIR: the disk tier's directory (default a fresh one under /var/tmp; not tmpfs: direct
#        I/O needs a real file system), removed at the end. Times: mean of steps 2..S.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HPT="$ROOT/build/hptrain"
STEPS=3 DIR="" SKIP_BIG=0
while [ $# -gt 0 ]; do
    case "$1" in
    --hptrain) HPT=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --skip-big) SKIP_BIG=1; shift ;;
    *) echo "usage: $0 [--hptrain PATH] [--dir DIR] [--steps S] [--skip-big]" >&2; exit 2 ;;
    esac
done
[ -x "$HPT" ] || { echo "no $HPT: build first (cmake --build build)" >&2; exit 1; }
[ -n "$DIR" ] || DIR=$(mktemp -d /var/tmp/hpt_offload_bench_XXXXXX)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP" "$DIR"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=PASSIVE
echo "== bench_offload_engine: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $OMP_NUM_THREADS threads"
echo "machine: $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}'), disk tier in $DIR ($(df -h "$DIR" | awk 'NR==2 {print $4 " free on " $1}'), $(stat -f -c %T "$DIR"))"
echo "load before: $(uptime)"
. "$ROOT/bench/random_shard.sh"
random_shard "$TMP" $((1 << 17))


# one 1.5B run: $1 label, $2.. extra flags; prints the figures
big_run() {
    local label=$1; shift
    echo
    echo "-- (a) GPT-2 1.5B shape, B=1 T=64, --memory 4GB, --offload disk --max-active-layers 2 --prefetch 1 $*"
    local cached0 cached1 rc
    cached0=$(awk '/^Cached:/ {print $2}' /proc/meminfo)
    /usr/bin/time -v "$HPT" train --model $SHAPE --data "$TMP/train_*.bin" --batch 1 --seq 64 \
        --steps "$STEPS" --memory 4GB --offload disk --offload-dir "$DIR" --max-active-layers 2 \
        --prefetch 1 "$@" --quiet --log "$TMP/big.jsonl" > "$TMP/big.out" 2>&1
    rc=$?
    cached1=$(awk '/^Cached:/ {print $2}' /proc/meminfo)
    grep -E "^done|process peak RSS|^offload:|error|Maximum resident|Elapsed \(wall" "$TMP/big.out"
    [ $rc = 0 ] && python3 - "$TMP/big.jsonl" "$TMP/big.out" "$cached0" "$cached1" "$label" <<'PY'
import json, re, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
out = open(sys.argv[2]).read()
L, C = 48, 1600
block = 12 * C * C + 13 * C
block_bytes = (block * 4 + 4095) // 4096 * 4096
m = re.search(r"disk in ([\d.]+) MiB out ([\d.]+) MiB", out)
din, dout = float(m.group(1)) * 2**20, float(m.group(2)) * 2**20
minimum = 6 * L * block_bytes  # read weights, m, v once; write them once
h = re.search(r"\((\d+)% of the worker's time hidden\)", out)
w = re.search(r"compute waited ([\d.]+) s", out)
ms = [s["step_ms"] for s in steps][1:] or [steps[0]["step_ms"]]
rss = max(s["rss_peak_bytes"] for s in steps)
print("RESULT 1.5B %s: peak RSS %.2f GiB (%.2f GB); %.1f s/step (steps 2..%d); disk %.1f GB/step "
      "(read %.1f, written %.1f) vs minimum %.1f GB (x%.2f); compute thread waited %s s/step, %s%% "
      "of the worker's time hidden; losses %s; page cache %+.1f GiB over the run" %
      (sys.argv[5], rss / 2**30, rss / 1e9, sum(ms) / len(ms) / 1e3, len(steps), (din + dout) / 1e9,
       din / 1e9, dout / 1e9, minimum / 1e9, (din + dout) / minimum, w.group(1) if w else "?",
       h.group(1) if h else "?", " ".join("%.4f" % s["loss"] for s in steps),
       (int(sys.argv[4]) - int(sys.argv[3])) / 2**20))
PY
    rm -rf "${DIR:?}"/* 2>/dev/null
}

if [ "$SKIP_BIG" = 0 ]; then
    SHAPE=gpt2:L=48,C=1600,NH=25
    echo
    echo "in memory the 1.5B shape would need on the device: $("$HPT" estimate --model $SHAPE --batch 1 --seq 64 | awk '/^  peak/ {print $2, $3}')"
    echo "with --offload disk --fused-update (estimate, device / host / disk):"
    "$HPT" estimate --model $SHAPE --batch 1 --seq 64 --offload disk --fused-update | grep -E "^  peak"
    big_run fused --fused-update
    big_run exact
fi

echo
echo "-- (b) GPT-2 124M, B=4 T=256, $STEPS steps each; tokens/s relative to training in memory,"
echo "   each configuration right after its own in-memory run (the pair shares the machine's load)"
printf "%-34s %10s %10s %10s %8s %12s %12s\n" flags "step ms" "mem ms" "tok/s" "x mem" "device peak" "peak RSS"
run124() { # $1 log, $2.. flags
    local log=$1; shift
    rm -f "$log"
    "$HPT" train --model gpt2-124m --data "$TMP/train_*.bin" --batch 4 --seq 256 --steps "$STEPS" \
        --offload-dir "$DIR" "$@" --quiet --log "$log" > "$TMP/s.out" 2>&1
}
for flags in "--offload host" "--offload host --fused-update" "--offload disk" \
             "--offload disk --fused-update" "--fused-update"; do
    if ! run124 "$TMP/m.jsonl"; then echo "in memory: failed: $(tail -1 "$TMP/s.out")"; continue; fi
    base=$(mean_ms "$TMP/m.jsonl")
    # shellcheck disable=SC2086
    if ! run124 "$TMP/l.jsonl" $flags; then echo "$flags: failed: $(tail -1 "$TMP/s.out")"; continue; fi
    ms=$(mean_ms "$TMP/l.jsonl")
    python3 - "$TMP/l.jsonl" "$ms" "$base" "$flags" "$TMP/m.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
m = [json.loads(l) for l in open(sys.argv[5])][-1]
ms, base = float(sys.argv[2]), float(sys.argv[3])
print("%-34s %10.1f %10.1f %10.1f %8.2f %8.0f MiB %8.0f MiB   (in memory: %.0f MiB, %.0f MiB)" %
      (sys.argv[4], ms, base, 1024 / (ms / 1e3), base / ms, s["mem_peak_bytes"] / 2**20,
       s["rss_peak_bytes"] / 2**20, m["mem_peak_bytes"] / 2**20, m["rss_peak_bytes"] / 2**20))
PY
    grep "^offload:" "$TMP/s.out" | sed 's/^/    /'
    echo "    load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
echo "PyTorch, 1.5B shape, fp32 AdamW (arithmetic): 1,557,686,400 parameters (wte padded to 50304"
echo "rows as here; 1,557,611,200 unpadded) x (4 weights + 4 gradients + 8 AdamW m, v) bytes ="
echo "24.92 GB = 23.21 GiB of training state before any activation, CUDA/CPU workspace or the"
echo "interpreter; this machine has $(free -g | awk '/Mem:/ {print $2}') GiB of RAM in all and no swap: it cannot hold it."
echo "load after: $(uptime)"
