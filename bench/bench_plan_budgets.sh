#!/usr/bin/env bash
# bench_plan_budgets.sh [HPTRAIN] [OUT_DIR]: the issue's benchmark (docs/planner.md): --plan auto
# at device budgets against the plans a person would write, gpt2-1558m B=1 T=128 by default.
# Calibrates in the same run (disk in OUT_DIR), then for each budget in BUDGETS (default
# "2GB 4GB 8GB") the auto plan (estimate --plan auto; --host-memory HOST, default 10GB; --allow
# lossy with LOSSY=1) and each plan of PLANS (a ;-separated list of flag sets, default none):
# its predicted step (estimate --json) and the measured one (train, STEPS steps, default 3,
# the fastest after the first), tokens/s from it. MODEL, T, STEPS, HOST, BUDGETS, PLANS, LOSSY,
# RECORD (train --record-rates with those flags first), REUSE=1 (OUT_DIR's calibration and
# recorded rates from an earlier part: no calibration, no record run).
# MODEL=llama3.2-1b: at 2 and 4 GB only lossy plans fit (LOSSY=1; its tied embedding); the
# person's plan and the slowest plan that fits go in PLANS (bench_plan_bar.sh, parts H).
# Each run of gpt2-1558m or llama3.2-1b takes 1-3 minutes and several GiB: run it alone, under
# the shared benchmark lock, in pieces (one or two budgets each).
set -u
bin=${1:-build/hptrain}
out=${2:-$(mktemp -d)}
mkdir -p "$out/disk"
MODEL=${MODEL:-gpt2-1558m}
T=${T:-128}
STEPS=${STEPS:-3}
HOST=${HOST:-10GB}
export HPT_CALIBRATION=$out/calibration.json
. "$(dirname "$0")/plan_lib.sh" # plan_data, plan_calibrate, plan_record
plan_data
echo "uptime before: $(uptime)"
if [ -n "${REUSE:-}" ] && [ -f "$out/calibration_standalone.json" ]; then
  # REUSE=1: OUT_DIR's calibration (and recorded engine rates) from an earlier part
  echo "reusing $HPT_CALIBRATION"; RECORD=
else
plan_calibrate || exit 1
fi
# RECORD="FLAGS[;FLAGS...]": a training run of MODEL with each first (train --record-rates),
# whose engine rates (per layout of the disk homes) the predictions then use
IFS=';' read -ra records <<<"${RECORD:-}"
for r in "${records[@]}"; do # one run per layout of the disk homes (;-separated flag sets)
  [ -n "$r" ] || continue
  plan_record "$MODEL" "$T" "$r" || exit 1
done
lossy=()
[ -n "${LOSSY:-}" ] && lossy=(--allow lossy)

# run LABEL FLAGS...: prints the label, the flags, predicted and measured s, tokens/s
run() {
  local label=$1; shift
  local pred meas pred0
  pred=$("$bin" estimate --model "$MODEL" --batch 1 --seq "$T" "$@" --json 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin).get('predicted_step_s', 'nan'))")
  pred0=$(HPT_CALIBRATION=$out/calibration_standalone.json "$bin" estimate --model "$MODEL" --batch 1 --seq "$T" "$@" --json 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin).get('predicted_step_s', 'nan'))")
  rm -f "$out/log.jsonl"
  if "$bin" train --model "$MODEL" --data "$out/train_*.bin" --batch 1 --seq "$T" --steps "$STEPS" \
      --quiet --log "$out/log.jsonl" "$@" >/dev/null 2>"$out/train.err"; then
    meas=$(python3 -c "
import json
ms = [json.loads(l)['step_ms'] for l in open('$out/log.jsonl')]
print(min(ms[1:] if len(ms) > 1 else ms) / 1000.0)")
  else
    meas=nan; tail -2 "$out/train.err" >&2
  fi
  grep -E "^offload: per step: disk read" "$out/train.err" | sed 's/^/    /'
  python3 -c "
p, m, q = $pred, float('$meas'), $pred0
print('%-16s predicted %7.2f s measured %7.2f s ratio %5.2f (standalone %7.2f s, %5.2f)  %5.1f tok/s  load %s  %s' % ('$label', p, m, p / m if m == m else float('nan'), q, q / m if m == m else float('nan'), $T / m if m == m else float('nan'), open('/proc/loadavg').read().split()[0], '''$*'''))"
}

for budget in ${BUDGETS:-2GB 4GB 8GB}; do
  if ! "$bin" estimate --model "$MODEL" --batch 1 --seq "$T" --plan auto --memory "$budget" \
      --host-memory "$HOST" --offload-dir "$out/disk" "${lossy[@]}" >"$out/auto.txt" 2>&1; then
    echo "budget $budget: no plan fits"; continue
  fi
  flags=$(sed -n 2p "$out/auto.txt" | sed -E 's/^ *--batch [0-9]+ --seq [0-9]+ ?//; s/(^| )--(memory|host-memory|disk-memory) [^ ]+//g; s/(^| )--offload-dir [^ ]+//; s/^ *//')
  # shellcheck disable=SC2086
  run "auto $budget${LOSSY:+ lossy}" $flags --offload-dir "$out/disk"
done
IFS=';' read -ra plans <<<"${PLANS:-}"
for p in "${plans[@]}"; do
  [ -n "$p" ] || continue
  # shellcheck disable=SC2086
  run "plan" $p --offload-dir "$out/disk"
done
echo "uptime after: $(uptime)"
