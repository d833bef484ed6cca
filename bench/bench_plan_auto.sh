#!/usr/bin/env bash
# bench_plan_auto.sh [HPTRAIN] [OUT_DIR]: the planner's cost model against measured step times,
# and --plan auto's choice against the fastest plan of a small hand grid (docs/planner.md).
#
# 1. Calibrates (hptrain calibrate, disk in OUT_DIR) in the same run.
# 2. For each configuration (shapes from gpt2-124m to gpt2-1558m and llama shapes; tiers
#    device, host, disk; B=1), the predicted step time (estimate --json: predicted_step_s) and
#    the measured one (train, STEPS steps, the fastest step after the first: the calibration
#    takes each rate's best, the machine's quiet moments, and a shared machine's step time
#    varies up to 10x with the neighbours' load; shapes up to gpt2-350m and llama: shapes run
#    twice and the faster counts);
#    prints a table with predicted / measured.
# 3. For 4 device budgets of gpt2-124m, the plans of the hand grid that fit (estimate --memory),
#    each measured twice (the faster run counts), and the plan --plan auto chooses (measured): auto's step time against
#    the grid's fastest.
# Environment: STEPS (default 4), T (default 64), CONFIGS (a regex over the config names; default
# all), RECORD="MODEL|FLAGS[;...]" (training runs with disk homes first, train --record-rates: the
# predictions then use the engine's own disk rates; each row also shows the ratio with
# calibrate's standalone rates), RECORD_T, REUSE=1 (OUT_DIR's calibration and recorded rates
# from an earlier part: no calibration, no record run; bench_plan_bar.sh runs a whole series
# so), SKIP_GRID=1, STRACE=1: the disk-homed runs under strace -T (pread64/pwrite64 only), and
# the engine's own disk rates after the first step printed beside the calibration's. The machine is shared: the load average is printed before and after. Run it
# as the machine's only benchmark, in pieces (CONFIGS) of a few minutes, each calibrating again;
# on a machine with the kernel's autogroup scheduling (/proc/sys/kernel/sched_autogroup_enabled)
# other sessions' processes share the cores whatever their nice, so on the shared development
# machine it ran as: flock /work/bench.lock setsid -w sh -c 'echo -20 >/proc/self/autogroup;
# exec bench/bench_plan_auto.sh ...' (its own session, the session's group at the top weight).
set -u
bin=${1:-build/hptrain}
out=${2:-$(mktemp -d)}
mkdir -p "$out/disk"
STEPS=${STEPS:-4}
T=${T:-64}
export HPT_CALIBRATION=$out/calibration.json
. "$(dirname "$0")/plan_lib.sh" # plan_data, plan_calibrate, plan_record
plan_data
echo "uptime before: $(uptime)"
if [ -n "${REUSE:-}" ] && [ -f "$out/calibration_standalone.json" ]; then
  # REUSE=1: OUT_DIR's calibration and recorded engine rates from an earlier part (one
  # calibration for a whole series of parts)
  echo "reusing $HPT_CALIBRATION"; RECORD=
else
  plan_calibrate || exit 1
fi
# RECORD="MODEL|FLAGS[;MODEL|FLAGS...]" (RECORD_T, default T): a training run with disk homes
# (one per layout of the homes on disk) whose engine
# counters go into the calibration (train --record-rates): the engine's own disk rates and the
# compute's loss beside them, which the predictions below then use ("standalone": calibrate's)
IFS=';' read -ra records <<<"${RECORD:-}"
for r in "${records[@]}"; do # one run per layout of the disk homes (;-separated)
  [ -n "$r" ] || continue
  IFS='|' read -r rmodel rflags <<<"$r"
  plan_record "$rmodel" "${RECORD_T:-$T}" "$rflags" || exit 1
done

# measure2 MODEL FLAGS...: measure twice, the faster run counts
measure2() {
  local p1 m1 p2 m2
  read -r p1 m1 q1 <<<"$(measure "$@")"
  read -r p2 m2 q2 <<<"$(measure "$@")"
  echo "$p1 $(python3 -c "print(min($m1, $m2))") $q1"
}

# measure MODEL FLAGS...: prints "predicted measured predicted-standalone" (the environment's
# HPT_ENGINE_WORKER, when set, reaches both the prediction and the run)
measure() {
  local model=$1; shift
  local pred pred0
  pred=$("$bin" estimate --model "$model" --batch 1 --seq "$T" "$@" --json 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin).get('predicted_step_s', 'nan'))")
  pred0=$(HPT_CALIBRATION=$out/calibration_standalone.json "$bin" estimate --model "$model" --batch 1 --seq "$T" "$@" --json 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin).get('predicted_step_s', 'nan'))")
  rm -f "$out/log.jsonl"
  local pre=()
  [[ -n "${STRACE:-}" && " $* " == *" --offload-dir "* ]] && pre=(strace -f -T -tt -e trace=pread64,pwrite64 -o "$out/strace.txt")
  "${pre[@]}" "$bin" train --model "$model" --data "$out/train_*.bin" --batch 1 --seq "$T" --steps "$STEPS" \
    --quiet --log "$out/log.jsonl" "$@" >/dev/null 2>"$out/train.err" || { echo "$pred nan"; return; }
  local meas
  meas=$(python3 - "$out/log.jsonl" <<'PY'
import json, sys
ms = [json.loads(l)['step_ms'] for l in open(sys.argv[1])]
ms = ms[1:] if len(ms) > 1 else ms
print(min(ms) / 1000.0)
PY
)
  [ ${#pre[@]} -gt 0 ] && python3 "$(dirname "$0")/strace_disk.py" "$out/strace.txt" "$out/log.jsonl" >&2
  grep -E "^offload: per step: disk read" "$out/train.err" | sed 's/^/    /' >&2
  echo "$pred $meas $pred0"
}

# NAME|MODEL|FLAGS[|ENV=VALUE]: the environment reaches the prediction and the run (e.g.
# HPT_ENGINE_WORKER=thread: the engine's worker thread where it would run its jobs inline)
configs=(
  "124m-device|gpt2-124m|"
  "124m-recompute|gpt2-124m|--recompute full"
  "124m-actoff|gpt2-124m|--recompute selective --act-offload host"
  "124m-host-fused|gpt2-124m|--offload host --fused-update"
  "124m-host|gpt2-124m|--offload host"
  "124m-disk-fused|gpt2-124m|--offload disk --fused-update --offload-dir $out/disk"
  "124m-disk-exact|gpt2-124m|--offload disk --offload-dir $out/disk"
  "124m-disk-fused-recompute|gpt2-124m|--offload disk --fused-update --recompute full --offload-dir $out/disk"
  "124m-host-homes-optim-disk|gpt2-124m|--offload params=host,grads=host,optim=disk --fused-update --offload-dir $out/disk"
  "124m-8bit-fused|gpt2-124m|--state-bits 8 --fused-update"
  "124m-host-fused-thread|gpt2-124m|--offload host --fused-update|HPT_ENGINE_WORKER=thread"
  "124m-bf16-host-fused|gpt2-124m|--offload host --fused-update --weights bf16-sr --state-bits 8"
  "350m-device|gpt2-350m|"
  "350m-recompute|gpt2-350m|--recompute full"
  "350m-host-fused|gpt2-350m|--offload host --fused-update"
  "350m-disk-fused|gpt2-350m|--offload disk --fused-update --offload-dir $out/disk"
  "350m-host|gpt2-350m|--offload host"
  "774m-disk-fused|gpt2-774m|--offload disk --fused-update --offload-dir $out/disk"
  "774m-host-fused|gpt2-774m|--offload host --fused-update"
  "774m-host-homes-optim-disk|gpt2-774m|--offload params=host,grads=host,optim=disk --fused-update --offload-dir $out/disk"
  "1558m-disk-fused|gpt2-1558m|--offload disk --fused-update --offload-dir $out/disk"
  "1558m-host-homes-optim-disk|gpt2-1558m|--offload params=host,grads=host,optim=disk --fused-update --offload-dir $out/disk"
  "1558m-disk-recompute|gpt2-1558m|--offload disk --recompute full --fused-update --offload-dir $out/disk"
  "1558m-lossy-host|gpt2-1558m|--attention plain --state-bits 8 --offload params=host,grads=host,optim=host --fused-update --weights bf16-sr"
  "1558m-host-plan|gpt2-1558m|--offload host --fused-update --weights bf16-sr --state-bits 8 --embeddings bf16"
  "llama-small|llama:L=8,C=512,NH=8,NKV=2,FF=1536,V=32000,T=256|"
  "llama-small-host|llama:L=8,C=512,NH=8,NKV=2,FF=1536,V=32000,T=256|--offload host --fused-update"
  "llama-small-recompute|llama:L=8,C=512,NH=8,NKV=2,FF=1536,V=32000,T=256|--recompute full"
  "llama-small-actoff|llama:L=8,C=512,NH=8,NKV=2,FF=1536,V=32000,T=256|--recompute selective --act-offload host"
  "llama-mid|llama:L=4,C=2048,NH=32,NKV=8,FF=8192,V=32000,T=256|"
  "llama-mid-host-fused|llama:L=4,C=2048,NH=32,NKV=8,FF=8192,V=32000,T=256|--offload host --fused-update"
  "llama3.2-1b-disk|llama3.2-1b|--offload disk --fused-update --offload-dir $out/disk"
  "llama3.2-1b-host-lossy|llama3.2-1b|--offload host --fused-update --weights bf16-sr --state-bits 8 --embeddings bf16"
)
printf "%-26s %10s %10s %8s %12s %6s\n" config predicted measured ratio standalone load
for c in "${configs[@]}"; do
  IFS='|' read -r name model flags envs <<<"$c"
  [[ -n "${CONFIGS:-}" && ! "$name" =~ ${CONFIGS} ]] && continue
  # shellcheck disable=SC2086
  read -r p m q <<<"$([ -n "$envs" ] && export $envs; measure "$model" $flags)"
  if [[ "$model" =~ ^gpt2-(124m|350m)$|^llama:L=8,C=512 ]]; then # the small ones again: the faster run counts
    # shellcheck disable=SC2086
    read -r p2 m2 q2 <<<"$([ -n "$envs" ] && export $envs; measure "$model" $flags)"
    m=$(python3 -c "print(min($m, $m2))")
  fi
  # ratio: predicted / measured; standalone: the same with calibrate's disk rates only
  printf "%-26s %10.3f %10.3f %8.2f %12.2f %6s\n" "$name${envs:+ ($envs)}" "$p" "$m" "$(python3 -c "print($p/$m if $m==$m and $m>0 else float('nan'))")" \
    "$(python3 -c "print($q/$m if $m==$m and $m>0 else float('nan'))")" "$(cut -d' ' -f1 /proc/loadavg)"
done

if [ -z "${SKIP_GRID:-}" ]; then
  echo
  echo "hand grid vs --plan auto, gpt2-124m B=1 T=$T (measured s/step)"
  grid=("" "--recompute full" "--fused-update" "--recompute full --fused-update"
        "--offload host --fused-update" "--offload host" "--recompute selective --act-offload host")
  declare -A meas
  for g in "${grid[@]}"; do
    # shellcheck disable=SC2086
    read -r p m _ <<<"$(measure2 gpt2-124m $g)"
    meas["k${g}"]=$m
    printf "  %-45s predicted %8.3f measured %8.3f\n" "${g:-(defaults)}" "$p" "$m"
  done
  for budget in 800MB 1GB 1500MB 3GB; do
    best=""; bestm=1e30
    for g in "${grid[@]}"; do
      # shellcheck disable=SC2086
      fits=$("$bin" estimate --model gpt2-124m --batch 1 --seq "$T" $g --memory $budget --json |
        python3 -c "import json,sys; print(int(json.load(sys.stdin)['fits']))")
      [ "$fits" = 1 ] || continue
      if python3 -c "import sys; sys.exit(0 if ${meas[k$g]} < $bestm else 1)"; then best=${g:-(defaults)}; bestm=${meas[k$g]}; fi
    done
    if ! "$bin" estimate --model gpt2-124m --batch 1 --seq "$T" --plan auto --memory $budget --host-memory 8GB >"$out/auto.txt" 2>&1; then
      echo "budget $budget: --plan auto finds no plan that fits"; continue
    fi
    flags=$(sed -n 2p "$out/auto.txt" | sed -E 's/^ *--batch [0-9]+ --seq [0-9]+ ?//; s/(^| )--memory [0-9.]+[A-Za-z]*//; s/(^| )--host-memory [0-9.]+[A-Za-z]*//; s/^ *//')
    # shellcheck disable=SC2086
    read -r p m _ <<<"$(measure2 gpt2-124m $flags)"
    printf "budget %-7s auto: %-55s %8.3f s (predicted %.3f); grid's fastest: %-40s %8.3f s; auto/grid %.2f\n" \
      "$budget" "${flags:-(defaults)}" "$m" "$p" "${best:-(none fits)}" "$bestm" \
      "$(python3 -c "print($m/$bestm)")"
  done
fi
echo "uptime after: $(uptime)"
