#!/bin/bash
# bench/bench_matmul.sh: --matmul fp32 against --matmul bf16 on the CPU (docs/design.md, "Matmul
# precision": bf16 covers the linear layers' GEMMs and flash attention's products): `hptrain
# train` for STEPS steps on random tokens, a GPT-2 124M-shaped model and a
# Llama-shaped one, each with both settings back to back; the mean step time of the steps after
# the first (the first pays for warm-up and oneDNN's primitive creation), and bf16's ratio to
# fp32. Which bf16 path ran (oneDNN's bf16 matmul, or the reference: rounded fp32 panels and
# sgemm) is printed: HPT_GEMM_BF16=ref forces the reference.
# Beside each measured step, the cost model's prediction for the same run (`hptrain estimate`
# with the same flags: the cached calibration, $HPT_CALIBRATION or ~/.cache/hptrain/
# calibration.json; "-" without one), and the measured over the predicted time; a calibration
# without --matmul bf16's rates predicts bf16 at the fp32 rates (the estimate says so).
# The machine's load (uptime) is printed before and after: on a shared 2-core machine step times
# are only comparable within one run.
#
# usage: bench/bench_matmul.sh [--hptrain PATH] [--steps S] [--threads N] [--quick]
#   --quick  tiny models: checks the plumbing; the figures mean nothing.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HPT="$ROOT/build/hptrain"
STEPS=4
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
source "$ROOT/bench/random_shard.sh"

if [ $QUICK = 1 ]; then
    MODELS=("gpt2:L=2,C=64,NH=4,V=50257,T=64" "llama:L=2,C=64,NH=4,NKV=2,FF=96,V=50257,T=64")
    B=2 T=64
else
    # GPT-2 124M itself; a Llama-shaped model (grouped-query, SwiGLU, untied head) of similar size
    MODELS=("gpt2-124m" "llama:L=4,C=768,NH=12,NKV=4,FF=2048,V=50257,T=1024")
    B=1 T=256
fi
random_shard "$TMP" $((B * T * (STEPS + 2) + 1))

echo "== bench_matmul: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $THREADS threads, B=$B T=$T, $STEPS steps"
grep -o -m1 'avx512_bf16' /proc/cpuinfo >/dev/null && echo "CPU: avx512_bf16 (oneDNN's bf16 matmul unless HPT_GEMM_BF16=ref${HPT_GEMM_BF16:+; HPT_GEMM_BF16=$HPT_GEMM_BF16 is set})" \
    || echo "CPU: no avx512_bf16 (the reference bf16 path: rounded fp32 panels and sgemm)"
echo "load before: $(uptime)"
printf "%-52s %12s %12s %8s %12s %12s %12s %9s %9s\n" model "fp32 s/step" "bf16 s/step" ratio \
    "bf16 loss-fp32" "fp32 pred" "bf16 pred" "fp32 m/p" "bf16 m/p"
for m in "${MODELS[@]}"; do
    declare -A ms loss pred
    for mm in fp32 bf16; do
        # the prediction first (estimate runs no step): predicted_step_s of --json, or "-"
        pred[$mm]=$("$HPT" estimate --model "$m" --batch $B --seq $T --matmul $mm --threads $THREADS --json 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin).get("predicted_step_s", "-"))' 2>/dev/null || echo -)
        log="$TMP/$mm.jsonl"
        rm -f "$log"
        "$HPT" train --model "$m" --data "$TMP/train_000.bin" --batch $B --seq $T --steps $STEPS \
            --matmul $mm --log "$log" --quiet >/dev/null 2>"$TMP/err" \
            || { echo "$m --matmul $mm failed: $(tail -1 "$TMP/err")"; continue 2; }
        ms[$mm]=$(mean_ms "$log")
        loss[$mm]=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["loss"])' "$log")
    done
    python3 - "$m" "${ms[fp32]}" "${ms[bf16]}" "${loss[fp32]}" "${loss[bf16]}" "${pred[fp32]}" "${pred[bf16]}" <<'PY'
import sys
m, a, b, la, lb = sys.argv[1], *map(float, sys.argv[2:6])
def num(x):
    try: return float(x)
    except ValueError: return None
pa, pb = num(sys.argv[6]), num(sys.argv[7])
f = lambda x: "%12.3f" % x if x is not None else "%12s" % "-"
r = lambda x, p: "%9.2f" % (x / 1e3 / p) if p else "%9s" % "-"
print("%-52s %12.3f %12.3f %8.2f %12.2e %s %s %s %s" % (m, a / 1e3, b / 1e3, b / a, lb - la, f(pa), f(pb),
                                                       r(a, pa), r(b, pb)))
PY
done
echo "load after: $(uptime)"
