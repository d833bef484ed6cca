#!/bin/bash
# bench/bench_llama8b.sh: the llama3.1-8b shape (8.03B parameters, untied 128256 x 4096 wte and
# lm_head) trained under --memory 8GB on a machine with 24 GB of RAM and a disk.
#
# 1. `hptrain estimate` for the shape at B=1 T=$SEQ with the plan below and its neighbours
#    (embeddings full / chunked / bf16; AdamW or Adam-mini 8-bit), the table per tier.
# 2. Checks the free disk (the plan's disk peak + 4 GiB) and the available memory (the plan's
#    device + host peaks + 2 GiB) and refuses to start otherwise (bench/measured.sh).
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
#                               [--steps S] [--offload-dir DIR] [--data GLOB] [--estimate-only]
# --data: token shards (default the Llama 3 tokenised Moby-Dick below; random tokens when absent)
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HPTRAIN="${HPTRAIN:-$ROOT/build/hptrain}"
. "$ROOT/bench/measured.sh"
OUT=/tmp/bench_llama8b
OPT=adamw
MODEL=llama3.1-8b # --model: another shape checks the plumbing in seconds
SEQ=64
STEPS=3
ODIR=/tmp/llama8b_offload
EST_ONLY=0
DATA="/work/bench_data/moby_llama3/train_*.bin"
while [ $# -gt 0 ]; do
    case "$1" in
    --out) OUT=$2; shift 2 ;;
    --optimizer) OPT=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
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

measured_fits "$OUT/estimate.txt" "$ODIR" | tee "$OUT/checks.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

if ! compgen -G "$DATA" >/dev/null; then # no Llama 3 shards here: random tokens
    . "$ROOT/bench/random_shard.sh"
    mkdir -p "$OUT/data"
    random_shard "$OUT/data" $((SEQ * (STEPS + 2) + 1))
    echo "data: $OUT/data/train_000.bin (random tokens: no $DATA found)" | tee -a "$OUT/checks.txt"
    DATA="$OUT/data/train_000.bin"
fi
measured_run "$OUT" "$HPTRAIN" train "${PLAN[@]}" --optimizer "$OPT" \
    --embeddings bf16 --data "$DATA" --steps "$STEPS" --warmup 1 --lr 1e-5
rm -rf "$ODIR"
measured_summary "$OUT" | tee "$OUT/summary.txt"
