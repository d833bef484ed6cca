#!/bin/bash
# bench/bench_qlora.sh: a LoRA fine-tune of a large Llama shape over a frozen base stored in
# bf16, int8 or NF4 and homed on the device, the host or the disk, run on this machine
# (issue 35's benchmarks: the llama3.1-8b shape full / LoRA bf16 / QLoRA NF4 at the same B, T,
# and the llama3.1-70b shape with its NF4 base on the disk under --memory 8GB).
#
# 1. `hptrain estimate` of the plan: the table per tier, the FLOPs of a step.
# 2. This machine's fp32 GEMM peak (bench/gemm_peak.c, --quick, the same thread count): the
#    compute floor of a step is its FLOPs over that peak.
# 3. Refuses to start unless the disk and memory the estimate names are free (bench/measured.sh).
# 4. `hptrain train` for $STEPS steps on random tokens (bench/random_shard.sh), measured from
#    outside (bench/measured.sh: the stamped lines, time -v, /proc/PID/io each second), then the
#    offload directory is deleted. Initialisation (the random N(0, 0.02) base quantised as it
#    is made, its blocks written to their home) is the time before the plan line.
#
# usage: bench/bench_qlora.sh [--model M] [--base bf16|int8|nf4|f32] [--home device|host|disk]
#          [--batch B] [--seq T] [--steps S] [--memory BUDGET] [--rank R] [--offload-dir DIR]
#          [--out DIR] [--estimate-only]
# 70B: --model llama:L=80,C=8192,NH=64,NKV=8,FF=28672,V=128256,T=8192 --base nf4 --home disk
#      (about 33 GiB of disk, 4 GiB of host memory, 7 GiB of "device" memory)
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HPTRAIN="${HPTRAIN:-$ROOT/build/hptrain}"
. "$ROOT/bench/measured.sh"
. "$ROOT/bench/random_shard.sh"
MODEL=llama3.1-8b
BASE=nf4
HOME_=disk
B=1
SEQ=64
STEPS=3
MEM=8GB
RANK=16
ODIR=/tmp/qlora_offload
OUT=/tmp/bench_qlora
EST_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --base) BASE=$2; shift 2 ;;
    --home) HOME_=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --memory) MEM=$2; shift 2 ;;
    --rank) RANK=$2; shift 2 ;;
    --offload-dir) ODIR=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --estimate-only) EST_ONLY=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT" "$ODIR"
PLAN=(--model "$MODEL" --batch "$B" --seq "$SEQ" --memory "$MEM" --lora "r=$RANK,alpha=$((2 * RANK))"
      --base-weights "$BASE" --base-home "$HOME_" --recompute full)
[ "$HOME_" = disk ] && PLAN+=(--offload-dir "$ODIR")

echo "== estimate" | tee "$OUT/estimate.txt"
"$HPTRAIN" estimate "${PLAN[@]}" 2>&1 | tee -a "$OUT/estimate.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "the plan does not fit: not run" >&2; exit 1; }
[ "$EST_ONLY" = 1 ] && exit 0

GEMM_BIN="$ROOT/build/bench/gemm_peak"
mkdir -p "$(dirname "$GEMM_BIN")"
if [ ! -x "$GEMM_BIN" ] || [ "$ROOT/bench/gemm_peak.c" -nt "$GEMM_BIN" ]; then
    cc -O2 -std=c11 -fopenmp "$ROOT/bench/gemm_peak.c" -ldnnl -o "$GEMM_BIN"
fi
"$GEMM_BIN" --threads "${OMP_NUM_THREADS:-$(nproc)}" --quick > "$OUT/gemm_peak.json" 2>/dev/null
python3 - "$OUT" <<'PY' | tee "$OUT/floor.txt"
import json, re, sys
out = sys.argv[1]
peak = json.load(open(f"{out}/gemm_peak.json"))["peak_gflops"]
scale = {"": 1e-9, "K": 1e-6, "M": 1e-3, "G": 1, "T": 1e3, "P": 1e6}
gf = next(float(m.group(1)) * scale[m.group(2)] for l in open(f"{out}/estimate.txt")
          if (m := re.search(r"([0-9.]+) ([KMGTP]?)FLOP per optimizer step", l)))
print(f"GEMM peak {peak:.1f} GFLOP/s; {gf:.2f} GFLOP a step: compute floor {gf / peak:.2f} s a step")
PY

measured_fits "$OUT/estimate.txt" "$ODIR" | tee "$OUT/checks.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
mkdir -p "$OUT/data"
random_shard "$OUT/data" $((B * SEQ * (STEPS + 2) + 1))
measured_run "$OUT" "$HPTRAIN" train "${PLAN[@]}" --data "$OUT/data/train_000.bin" \
    --steps "$STEPS" --warmup 1 --lr 1e-4
rc=$?
rm -rf "$ODIR"
measured_summary "$OUT" | tee "$OUT/summary.txt"
cat "$OUT/floor.txt"
exit $rc
