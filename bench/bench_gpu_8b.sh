#!/usr/bin/env bash
# bench/bench_gpu_8b.sh: issue 15's benchmarks on one GPU machine (docs/cuda.md): llama3.1-8b
# trained inside --memory 24GB, beside PyTorch capped to 24 GB, and the largest llama shape one
# GPU machine trains.
# WRITTEN, NEVER RUN: the session that wrote it had no GPU. Run it on an H100 or H200 with a
# CUDA build of hptrain (build/: configure where nvcc is found) and PyTorch 2.x.
#
# In one run, each figure measured, none assumed:
#   1. the GPU's bf16 GEMM peak through cuBLAS (bench_cuda peak): the MFU denominator;
#   2. `hptrain estimate` of the 8B plan (device, pinned host and disk tiers);
#   3. `hptrain train --device cuda --memory 24GB` with the 8B plan for $STEPS steps: tokens/s
#      (the step lines of --log), MFU (the estimator's FLOPs per token x tokens/s over the peak),
#      the device tier's accounted peak (the --log's mem_peak_bytes) and the GPU's used memory
#      (nvidia-smi sampled every 0.2 s: its maximum, which also counts the CUDA context) beside
#      the estimate's device peak, host memory (the --log's rss_peak_bytes, pinned buffers
#      included), the PCIe bytes per step (the offload report's host in + out) beside the
#      minimum (the blocks' bf16 weights in once per pass and their gradients out once) and the
#      share of transfer time hidden behind compute (the offload report's "hidden");
#   4. PyTorch capped to 24 GB (torch.cuda.set_per_process_memory_fraction, bench/torch_gpu_8b.py):
#      the 8B shape with bf16 autocast and fused AdamW (expected: out of memory, recorded as
#      such), then with FSDP's CPU offload on one GPU; tokens/s, MFU, max_memory_allocated;
#   5. the largest llama shape (32 layers at C=4096, more layers until the estimate no longer
#      fits the machine: the GPU's memory, its RAM and its disk) that hptrain trains for 2 steps.
# The tokens are random (an llm.c uint32 shard written into $OUT/data) unless DATA names a glob
# of shards. A refusal of hptrain's is recorded (its one line) instead of figures.
#
# usage: bench/bench_gpu_8b.sh [--steps S] [--seq T] [--model M] [--out DIR] [--offload-dir DIR]
#                              [--quick] [--no-torch] [--estimate-only]
#   --quick          the 8B plan for 3 steps at T = 1024, PyTorch's plain mode only, no
#                    largest-shape search (part 5): scripts/gpu_check.sh's form, a few minutes
#   --no-torch       no part 4
#   --estimate-only  part 2 and the minimum PCIe bytes only: needs no GPU
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
HPT="$BUILD/hptrain"
STEPS=5
SEQ=2048
OUT=/tmp/bench_gpu_8b
ODIR=/tmp/bench_gpu_8b_offload
MODEL=llama3.1-8b
PY=${PYTHON:-python3}
DATA=${DATA:-}
QUICK=0
TORCH=1
EST_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --offload-dir) ODIR=$2; shift 2 ;;
    --quick) QUICK=1; STEPS=3; SEQ=1024; shift ;;
    --no-torch) TORCH=0; shift ;;
    --estimate-only) EST_ONLY=1; shift ;;
    *) echo "usage: $0 [--steps S] [--seq T] [--model M] [--out DIR] [--offload-dir DIR] [--quick] [--no-torch] [--estimate-only]" >&2
       exit 2 ;;
    esac
done
mkdir -p "$OUT"
[ -x "$HPT" ] || { echo "bench_gpu_8b: build hptrain first ($HPT)" >&2; exit 1; }
PEAK=0
if [ $EST_ONLY = 0 ]; then
    mkdir -p "$ODIR"
    [ -d "$BUILD/CMakeFiles/hptrain_cuda.dir" ] ||
        { echo "bench_gpu_8b: $BUILD has no CUDA backend (nvcc not found at configure time)" >&2; exit 1; }
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
    # 1. the bf16 GEMM peak (bench_cuda.c: the CMake target bench_cuda of a CUDA build), or
    # PEAK_JSON's: bench_cuda peak's line measured earlier on this GPU
    if [ -s "${PEAK_JSON:-}" ]; then
        cp "$PEAK_JSON" "$OUT/peak.json"
    else
        cmake --build "$BUILD" --target bench_cuda >/dev/null || exit 1
        "$BUILD/bench_cuda" peak | tee "$OUT/peak.json"
    fi
    PEAK=$($PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["bf16_peak_tflops"])' "$OUT/peak.json" ||
           echo 0)
fi

# The plan: blocks' bf16 weights with fp32 masters and 8-bit AdamW state on pinned host memory,
# K=2 device slots with one block prefetched, the fused update on CPU threads as each block's
# gradients arrive, full recomputation, the chunked head, bf16 embeddings.
PLAN=(--model "$MODEL" --batch 1 --seq "$SEQ" --device cuda --memory 24GB
      --offload params=host,grads=device,optim=host --fused-update --weights bf16-sr
      --state-bits 8 --recompute full --head-chunk 1024 --embeddings bf16)

# 2. the estimate
"$HPT" estimate "${PLAN[@]}" 2>&1 | tee "$OUT/estimate.txt"
# FLOPs per token: the estimator's count (3 x forward: matmuls, the head and causal attention;
# recomputation is not counted, as MFU's convention wants)
FLOPS_TOK=$($PY -c '
import re, sys
m = re.search(r"FLOPs/token ([0-9.]+) ([KMGT]?)FLOP", open(sys.argv[1]).read())
print(float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)] if m else 0)' "$OUT/estimate.txt")

# The plan's own minimum of the two transfers the engine counts ("offload: per step: host in X
# out Y"), in steady state: in, each block's bf16 weights for the forward and again for the
# backward (full recomputation uses the same acquisition), less the A blocks still on the
# device at each of a step's two turns (forward to backward, and backward to the next forward:
# A = the plan's device slots, "N blocks' params on the device" in the estimate); out, each
# block's updated bf16 home written back once by the fused update. The update kernel's reads
# of the homes and of the 8-bit AdamW state over PCIe are not in the engine's count and not here.
# (The first GPU run measured in 25,238 and out 13,313 MiB a step: docs/cuda.md.)
pcie_min() {
    $PY -c '
import json, re, sys
shapes = {"llama3.1-8b": (32, 4096, 32, 8, 14336), "llama3.2-1b": (16, 2048, 32, 8, 8192)}
L, C, NH, NKV, FF = shapes[sys.argv[1]]
hd = C // NH
blk = C * (C + 2 * NKV * hd) + C * C + 3 * C * FF + 2 * C
m = re.search(r"(\d+) blocks. params on the device", open(sys.argv[2]).read())
A = int(m.group(1)) if m else 0
bf16_mib = blk * 2 / 2**20
print(json.dumps({"pcie_in_min_mib_per_step": (2 * L - 2 * A) * bf16_mib,
                  "pcie_out_min_mib_per_step": L * bf16_mib, "device_slots": A,
                  "note": "bf16 weights in for forward and backward less the slots kept at two turns; bf16 homes out once"}))' "$MODEL" "$OUT/estimate.txt"
}
if [ $EST_ONLY = 1 ]; then
    pcie_min | tee "$OUT/hptrain.json"
    exit 0
fi

# 3. hptrain's run, nvidia-smi sampled beside it
if [ -z "$DATA" ]; then
    mkdir -p "$OUT/data"
    $PY -c '
import random, struct, sys
n = int(sys.argv[2])
rnd = random.Random(1)
with open(sys.argv[1], "wb") as f:  # an llm.c large-vocabulary shard: version 7, uint32 tokens
    f.write(struct.pack("<256i", *([20240801, 7, n] + [0] * 253)))
    f.write(struct.pack("<%dI" % n, *(rnd.randrange(128256) for _ in range(n))))' \
        "$OUT/data/train_000.bin" $(((STEPS + 2) * SEQ + 1))
    DATA="$OUT/data/train_*.bin"
fi
smi_log="$OUT/smi.csv"
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$smi_log" &
SMI=$!
"$HPT" train "${PLAN[@]}" --data "$DATA" --steps "$STEPS" --offload-dir "$ODIR" \
    --log "$OUT/steps.jsonl" > "$OUT/train.out" 2> "$OUT/train.err"
RC=$?
kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null
tail -n 30 "$OUT/train.err"
$PY - "$OUT" "$PEAK" "$FLOPS_TOK" "$SEQ" "$RC" <<'EOF' | tee "$OUT/hptrain.json"
import json, os, re, sys
out, peak, fpt, T, rc = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
err = open(f"{out}/train.err").read()
r = {"system": "hptrain", "rc": rc}
m = re.search(r"^\s*peak\s.*?(\d+)\s*$", open(f"{out}/estimate.txt").read(), re.M)
if m: r["estimate_device_bytes"] = int(m.group(1))
if rc != 0:
    r["refused"] = err.strip().splitlines()[-1] if err.strip() else "no output"
else:
    steps = [json.loads(l) for l in open(f"{out}/steps.jsonl") if l.strip()]
    timed = steps[1:] or steps  # the first step warms up
    tps = sum(s["tokens_per_s"] for s in timed) / len(timed)
    r.update(tokens_per_s=tps, mfu=tps * fpt / (peak * 1e12) if peak else None,
             step_ms=sum(s["step_ms"] for s in timed) / len(timed))
    r["device_peak_accounted_bytes"] = max(s.get("mem_peak_bytes", 0) for s in steps)
    r["host_rss_peak_bytes"] = max(s.get("rss_peak_bytes", 0) for s in steps)
    m = re.search(r"offload: per step: host in ([0-9.]+) MiB out ([0-9.]+) MiB.*\((\d+)% of the worker's time hidden\)", err)
    if m:
        r["pcie_mib_per_step"] = float(m.group(1)) + float(m.group(2))
        r["pcie_in_mib_per_step"], r["pcie_out_mib_per_step"] = float(m.group(1)), float(m.group(2))
        r["hidden_transfer_pct"] = int(m.group(3))
if os.path.exists(f"{out}/smi.csv"):
    smi = [int(x) for x in open(f"{out}/smi.csv").read().split() if x.isdigit()]
    if smi: r["gpu_used_max_mib"] = max(smi)
print(json.dumps(r))
EOF
pcie_min | tee -a "$OUT/hptrain.json"

# 4. PyTorch under a 24 GB cap (--quick: the plain mode only)
modes="plain fsdp-offload"
[ $QUICK = 1 ] && modes=plain
[ $TORCH = 1 ] || modes=""
for mode in $modes; do
    $PY bench/torch_gpu_8b.py --model "$MODEL" --T "$SEQ" --steps "$STEPS" --cap-gb 24 \
        --mode "$mode" --peak-tflops "$PEAK" | tee -a "$OUT/torch.jsonl"
done
if [ $QUICK = 1 ]; then
    rm -rf "$ODIR"
    exit "$RC"
fi

# 5. the largest llama shape: 8B's width with more layers while the estimate fits this machine
ram_gib=$(awk '/MemTotal/ {printf "%d", $2 / 1048576}' /proc/meminfo)
gpu_gb=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%d", $1 / 1024}')
best=""
for L in 32 48 64 80 96 112 128; do
    shape="llama:L=$L,C=4096,NH=32,NKV=8,FF=14336,V=128256,T=$SEQ"
    BIG=(--model "$shape" --batch 1 --seq "$SEQ" --device cuda --memory "${gpu_gb}GB"
         --host-memory "$((ram_gib - 8))GB" --offload params=host,grads=device,optim=host
         --fused-update --weights bf16-sr --state-bits 8 --recompute full
         --head-chunk 1024 --embeddings bf16)
    "$HPT" estimate "${BIG[@]}" > "$OUT/largest_L$L.txt" 2>&1 || break
    if "$HPT" train "${BIG[@]}" --data "$DATA" --steps 2 --offload-dir "$ODIR" \
        > /dev/null 2> "$OUT/largest_L$L.err"; then
        best=$L
    else
        tail -n 1 "$OUT/largest_L$L.err"
        break
    fi
done
echo "{\"largest_llama_layers_at_C4096\": \"${best:-none}\", \"gpu_gb\": $gpu_gb, \"ram_gib\": $ram_gib}" |
    tee "$OUT/largest.json"
rm -rf "$ODIR"
