#!/usr/bin/env bash
# Precision benchmark (docs/optimizers.md, "Precision"): what bf16 storage costs and saves.
#   1. Step time and device peak of GPT-2 124M (B=4, T=256, AdamW fp32, random tokens) with
#      saved activations in fp32, bf16 and int8 (--act-compress), and with the fused update on
#      fp32, bf16-sr and bf16-kahan block weights (--weights); runs interleaved (every config
#      once, then again) so that load on a shared machine hits each alike; the mean of steps
#      2..STEPS of both runs.
#   2. Final validation loss after 2000 steps on Moby-Dick (bench_optim.sh's small model and
#      flags) with fp32 and bf16 saved activations.
# Usage: bench/bench_precision.sh [steps]   (BUILD=dir, THREADS=N (default 2), SKIP_QUALITY=1)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
steps=${1:-4}
threads=${THREADS:-2}
export OMP_WAIT_POLICY=PASSIVE
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF >/dev/null
cmake --build "$build" --target hptrain_cli -j2 >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load before: $(uptime)"
printf 'It was the best of times, it was the worst of times. %.0s' $(seq 400) > "$tmp/text.txt"
"$build/hptrain" tokenize --output "$tmp/data" --val-fraction 0.1 "$tmp/text.txt" >/dev/null 2>&1
names=(fp32 act-bf16 act-int8 fused fused-bf16-sr fused-bf16-kahan)
flags=("" "--act-compress bf16" "--act-compress int8" "--fused-update"
       "--fused-update --weights bf16-sr" "--fused-update --weights bf16-kahan")
for rep in 1 2; do
  for i in "${!names[@]}"; do
    # shellcheck disable=SC2086
    "$build/hptrain" train --model gpt2-124m --data "$tmp/data/train_*.bin" --batch 4 --seq 256 \
      --steps "$steps" ${flags[$i]} --threads "$threads" --quiet \
      --log "$tmp/${names[$i]}.$rep.jsonl" 2>/dev/null
  done
done
echo "load after: $(uptime)"
echo
echo "GPT-2 124M, B=4 T=256, AdamW fp32, $threads threads, steps 2..$steps of 2 runs each"
echo
echo "| config | step ms | vs fp32 | device peak |"
echo "|---|---:|---:|---:|"
/usr/bin/python3 - "$tmp" "${names[@]}" <<'PY'
import json, sys
d, cfgs = sys.argv[1], sys.argv[2:]
base = None
for c in cfgs:
    ms, peak = [], 0
    for rep in (1, 2):
        rows = [json.loads(l) for l in open(f"{d}/{c}.{rep}.jsonl")]
        ms += [r["step_ms"] for r in rows[1:]]
        peak = max(peak, max(r["mem_peak_bytes"] for r in rows))
    m = sum(ms) / len(ms)
    base = base or m
    print(f"| {c} | {m:.0f} | {m / base:.2f} | {peak / 2**30:.2f} GiB |")
PY
[ -n "${SKIP_QUALITY:-}" ] && exit 0
. bench/mobydick.sh
mobydick_data "$build"
echo
echo "| saved activations | final val loss (2000 steps, Moby-Dick) | vs fp32 |"
echo "|---|---:|---:|"
base=""
for c in none bf16; do
  "$build/hptrain" train --model "gpt2:L=2,C=64,NH=4,T=64" --data "$data/train_*.bin" \
    --val "$data/val_*.bin" --batch 4 --seq 32 --steps 2000 --lr 2e-3 --warmup 100 \
    --weight-decay 0.1 --eval-every 500 --val-batches 40 --act-compress "$c" \
    --threads "$threads" --quiet --log "$tmp/q_$c.jsonl" 2>/dev/null
  vl=$(grep -o '"val_loss":[0-9.]*' "$tmp/q_$c.jsonl" | tail -1 | cut -d: -f2)
  [ -z "$base" ] && base=$vl
  echo "| $([ "$c" = none ] && echo fp32 || echo "$c") | $vl | $(/usr/bin/python3 -c "print('%+.2f%%' % (100*($vl-$base)/$base))") |"
done
