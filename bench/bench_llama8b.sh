#!/bin/bash
# bench/bench_llama8b.sh: the llama3.1-8b shape (8.03B parameters, untied 128256 x 4096 wte and
# lm_head) trained under --memory 8GB on a machine with 24 GB of RAM and a disk.
#
# 1. `hptrain estimate` for the shape at B=1 T=$SEQ with the plan below and its neighbours
#    (embeddings full / chunked / bf16; AdamW or Adam-mini 8-bit), the table per tier.
# 2. Checks the free disk (the params' disk home, $DISK_NEED_GB) and the available memory
#    (the plan's device + host peaks + 2 GiB) and refuses to start otherwise.
# 3. `hptrain train` for $STEPS steps on the Llama 3 token shards under /usr/bin/time -v, its
#    stderr lines stamped with the time, the process's /proc/PID/io (read_bytes,
#    write_bytes: what reached the disk, page cache misses only) sampled every second.
#    Initialisation (8B random normals, the bf16 blocks written to disk) is the time before
#    the first line; a step's time is the gap between two step lines.
# 4. Deletes the offload directory.
# The plan: bf16-sr block weights on disk (2 bytes per weight), one block's fp32 gradients on
# the device (fused update), 8-bit optimizer state on the host, full recomputation, flash
# attention, bf16 wte and lm_head (--embeddings bf16: their gradients one vocabulary chunk at
# a time). PyTorch's arithmetic for the same shape is printed beside (bytes per parameter).
#
# usage: bench/bench_llama8b.sh [--out DIR] [--optimizer adamw|adam-mini] [--seq T] [--model M]
#                               [--steps S] [--offload-dir DIR] [--estimate-only]
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HPTRAIN="$ROOT/build/hptrain"
OUT=/tmp/bench_llama8b
OPT=adamw
MODEL=llama3.1-8b # --model: another shape checks the plumbing in seconds
SEQ=64
STEPS=3
ODIR=/tmp/llama8b_offload
EST_ONLY=0
DATA="/work/bench_data/moby_llama3/train_*.bin"
DISK_NEED_GB=20 # 13.0 GiB of bf16 blocks, and room to spare
while [ $# -gt 0 ]; do
    case "$1" in
    --out) OUT=$2; shift 2 ;;
    --optimizer) OPT=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --offload-dir) ODIR=$2; shift 2 ;;
    --estimate-only) EST_ONLY=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT" "$ODIR"
PLAN=(--model "$MODEL" --batch 1 --seq "$SEQ" --memory 8GB
      --offload params=disk,grads=device,optim=host --offload-dir "$ODIR" --fused-update
      --weights bf16-sr --state-bits 8 --recompute full)

echo "== estimate (the plan, --embeddings bf16)" | tee "$OUT/estimate.txt"
"$HPTRAIN" estimate "${PLAN[@]}" --optimizer "$OPT" --embeddings bf16 2>&1 |
    tee -a "$OUT/estimate.txt"
for e in full chunked; do
    echo "== estimate, --embeddings $e" | tee -a "$OUT/estimate.txt"
    "$HPTRAIN" estimate "${PLAN[@]}" --optimizer "$OPT" --embeddings $e 2>&1 | sed -n '3,11p;/budget/p' |
        tee -a "$OUT/estimate.txt"
done
for o in adamw adam-mini; do
    [ "$o" = "$OPT" ] && continue
    echo "== estimate, --optimizer $o" | tee -a "$OUT/estimate.txt"
    "$HPTRAIN" estimate "${PLAN[@]}" --embeddings bf16 --optimizer $o 2>&1 | sed -n '3,11p;/budget/p' | tee -a "$OUT/estimate.txt"
done
python3 - <<'EOF' | tee -a "$OUT/estimate.txt"
n = 8030261248  # hptrain's count (wte and lm_head included; V = 128256 needs no padding)
for what, b in [("fp32 AdamW (weights, grads, m, v: 4 x 4 bytes)", 16),
                ("bf16 weights and grads + 8-bit m, v (+ scales)", 4.4)]:
    print(f"PyTorch arithmetic, {what}: {b} bytes/param = {n * b / 2**30:.1f} GiB")
EOF
[ "$EST_ONLY" = 1 ] && exit 0

# what the plan needs of memory (GiB: the estimate's device and host peaks) and of the disk
read -r DEV HOST < <(python3 - "$OUT/estimate.txt" <<'EOF'
import re, sys
u = {"B": 2**-30, "KiB": 2**-20, "MiB": 2**-10, "GiB": 1, "TiB": 2**10}
for l in open(sys.argv[1]):
    if l.startswith("  peak"):
        v = re.findall(r"([0-9.]+)(?: (B|KiB|MiB|GiB|TiB))?", l[6:])
        g = [float(x) * u[k or "B"] for x, k in v]
        print(f"{g[0]:.2f} {g[1]:.2f}")
        break
EOF
)
FREE_GB=$(df -BG --output=avail "$ODIR" | tail -1 | tr -dc 0-9)
AVAIL_GB=$(awk '/MemAvailable/ {printf "%d", $2 / 1048576}' /proc/meminfo)
echo "disk: ${FREE_GB} GB free (need ${DISK_NEED_GB}); memory: ${AVAIL_GB} GiB available, plan" \
     "${DEV} GiB device + ${HOST} GiB host" | tee "$OUT/checks.txt"
if [ "$FREE_GB" -lt "$DISK_NEED_GB" ]; then echo "not enough disk" >&2; exit 1; fi
if ! awk -v a="$AVAIL_GB" -v d="$DEV" -v h="$HOST" 'BEGIN {exit !(a >= d + h + 2)}'; then
    echo "not enough available memory" >&2; exit 1
fi

START=$(date +%s.%N)
echo "start $START" > "$OUT/train.log"
/usr/bin/time -v -o "$OUT/time.txt" "$HPTRAIN" train "${PLAN[@]}" --optimizer "$OPT" \
    --embeddings bf16 --data "$DATA" --steps "$STEPS" --warmup 1 --lr 1e-5 \
    2> >(while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >> "$OUT/train.log") \
    > "$OUT/stdout.txt" &
SUB=$!
PID=""
for _ in $(seq 50); do
    PID=$(pgrep -P "$SUB" -x hptrain | head -1 || true)
    [ -n "$PID" ] && break
    sleep 0.2
done
echo "pid ${PID:-?}" > "$OUT/pid.txt"
: > "$OUT/io.log"
while kill -0 "$SUB" 2>/dev/null; do
    if [ -n "$PID" ] && [ -r "/proc/$PID/io" ]; then
        echo "$(date +%s.%N) $(awk '/^(read_bytes|write_bytes)/ {printf "%s ", $2}' /proc/$PID/io)" \
            "$(awk '/VmRSS/ {print $2}' /proc/$PID/status 2>/dev/null)" >> "$OUT/io.log"
    fi
    sleep 1
done
wait $SUB
rm -rf "$ODIR"

# the figures: init (start to the first line), each step (gap between step lines), the disk
# bytes between the first and the last step line (io.log samples nearest each line)
python3 - "$OUT" "$STEPS" <<'EOF' | tee "$OUT/summary.txt"
import sys, bisect
out, steps = sys.argv[1], int(sys.argv[2])
lines = [l.rstrip("\n") for l in open(f"{out}/train.log")]
start = float(lines[0].split()[1])
stamped = [(float(l.split(" ", 1)[0]), l.split(" ", 1)[1]) for l in lines[1:]
           if l[:1].isdigit() and " " in l]
first = stamped[0][0] if stamped else start
step_t = [t for t, l in stamped if l.startswith("step ")]
io = [tuple(map(float, l.split()[:3])) for l in open(f"{out}/io.log") if len(l.split()) >= 3]
def io_at(t):
    i = min(bisect.bisect_left([s[0] for s in io], t), len(io) - 1)
    return io[i][1], io[i][2]
print(f"init (allocation, 8B random normals, blocks written): {first - start:.1f} s")
prev = [t for t, l in stamped if l.startswith("hptrain: plan")]
marks = (prev[-1:] or [first]) + step_t
for k in range(1, len(marks)):
    print(f"step {k}: {marks[k] - marks[k - 1]:.1f} s")
if len(step_t) >= 2 and io:
    r0, w0 = io_at(step_t[0]); r1, w1 = io_at(step_t[-1])
    n = len(step_t) - 1
    print(f"disk per step (steps 2..{len(step_t)}, /proc/PID/io): read {(r1 - r0) / n / 2**20:.1f} MiB, "
          f"written {(w1 - w0) / n / 2**20:.1f} MiB")
    ri, wi = io_at(first)
    print(f"disk during init: read {ri / 2**20:.1f} MiB, written {wi / 2**20:.1f} MiB")
    print(f"peak sampled VmRSS {max(s for *_, s in [tuple(map(float, l.split()[:4])) for l in open(f'{out}/io.log') if len(l.split()) >= 4]) / 2**20:.2f} GiB")
for t, l in stamped:
    if l.startswith(("offload:", "done:", "step ")) or "peak RSS" in l:
        print(l.strip())
for l in open(f"{out}/time.txt"):
    if "Maximum resident" in l or "Elapsed" in l or "File system" in l:
        print(l.strip())
EOF
