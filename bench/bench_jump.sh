#!/usr/bin/env bash
# The jump predictor's evaluation (docs/predict.md, "Jumps: the evaluation"). FULL-only against
# the hybrid schedule with the jump predictor, the same seeds, data and learning-rate schedule;
# the rule that picks the jump settings on the tuning seed and the evaluation seeds are fixed in
# docs/predict.md before any evaluation seed ran. Long: run it in the background under nice
# (the wall-clock figures come from the runs' own per-step times, not from the total).
# Usage: bench/bench_jump.sh tune|eval|states|baseline [steps]
#   tune      seed 1: FULL-only and the grid below
#   eval      seeds $SEEDS (default "2 3 4"): FULL-only and the chosen setting ($CHOSEN, a grid
#             name, read from $OUT/chosen.txt when unset)
#   states    seed 1: the chosen setting with --jump-state reset and zero-m
#   evalall   seeds $SEEDS: every grid setting (the jumps only)
#   fullonly  seeds $SEEDS: FULL-only alone (eval with SKIP_FULL=1 then runs the jumps only)
#   baseline  seeds $SEEDS: the per-step adam predictor (the first attempt's chosen setting)
# Env: BUILD (build), OUT (out/bench_jump), THREADS (1), DATA (data/mobydick), MODEL, B, T, LR.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
out=${OUT:-out/bench_jump}
what=${1:-tune}
steps=${2:-500}
threads=${THREADS:-1}
seeds=${SEEDS:-2 3 4}
export OMP_WAIT_POLICY=PASSIVE
[ -x "$build/hptrain" ] || { echo "build $build first" >&2; exit 1; }
if [ -z "${DATA:-}" ]; then
  . bench/mobydick.sh
  mobydick_data "$build"
else
  data=$DATA
fi
mkdir -p "$out"
model=${MODEL:-gpt2:L=2,C=64,NH=4,T=64}
common=(--model "$model" --data "$data/train_*.bin" --val "$data/val_*.bin" --batch "${B:-8}"
        --seq "${T:-64}" --steps "$steps" --lr "${LR:-2e-3}" --warmup 50 --eval-every 25
        --val-batches 20 --threads "$threads" --quiet)
jump=(--schedule hybrid --predictor jump --warmup-steps 100 --correct-steps 2
      --jump-search-batches 2 --jump-min-gain 2)
# the grid (tuning seed 1): name -> flags
declare -A grid=(
  [lin_s20_h80]="--full-steps 81 --jump-stride 20 --jump-snapshots 5 --jump-horizon 80 --jump-fit linear"
  [quad_s20_h80]="--full-steps 81 --jump-stride 20 --jump-snapshots 5 --jump-horizon 80 --jump-fit quadratic"
  [lin_s10_h40]="--full-steps 41 --jump-stride 10 --jump-snapshots 5 --jump-horizon 40 --jump-fit linear"
)

run() { # NAME SEED ARGS...: one training run, its log and its stderr
  local name=$1 seed=$2
  shift 2
  echo "$(date -u +%T) start $name (load $(cut -d' ' -f1 /proc/loadavg))" >>"$out/progress.txt"
  "$build/hptrain" train "${common[@]}" --seed "$seed" --log "$out/$name.jsonl" "$@" 2>"$out/$name.txt" \
    || { echo "$name failed: $(tail -1 "$out/$name.txt")" >&2; return 1; }
  echo "$(date -u +%T) done $name (load $(cut -d' ' -f1 /proc/loadavg))" >>"$out/progress.txt"
}

case "$what" in
tune)
  run full_s1 1 &
  for g in "${!grid[@]}"; do
    # shellcheck disable=SC2086
    run "jump_${g}_s1" 1 "${jump[@]}" ${grid[$g]} &
  done
  wait
  ;;
eval|states)
  chosen=${CHOSEN:-$(cat "$out/chosen.txt")}
  [ -n "${grid[$chosen]:-}" ] || { echo "unknown setting '$chosen'" >&2; exit 1; }
  if [ "$what" = states ]; then
    for st in reset zero-m; do
      # shellcheck disable=SC2086
      run "jump_${chosen}_${st}_s1" 1 "${jump[@]}" ${grid[$chosen]} --jump-state "$st" &
    done
  else
    for s in $seeds; do
      [ -n "${SKIP_FULL:-}" ] || run "full_s$s" "$s" &
      # shellcheck disable=SC2086
      run "jump_${chosen}_s$s" "$s" "${jump[@]}" ${grid[$chosen]} &
    done
  fi
  wait
  ;;
evalall) # every grid setting on the evaluation seeds (docs/predict.md: the amendment)
  for s in $seeds; do
    for g in "${!grid[@]}"; do
      # shellcheck disable=SC2086
      run "jump_${g}_s$s" "$s" "${jump[@]}" ${grid[$g]} &
    done
  done
  wait
  ;;
fullonly) # the evaluation seeds' FULL-only runs alone (they do not depend on the choice)
  for s in $seeds; do run "full_s$s" "$s" & done
  wait
  ;;
baseline)
  for s in $seeds; do
    run "adam_s$s" "$s" --schedule hybrid --warmup-steps 100 --full-steps 20 --max-predict-steps 4 \
      --confidence 0.5 --correct-steps 2 --predictor adam &
  done
  wait
  ;;
*) echo "usage: $0 tune|eval|evalall|states|fullonly|baseline [steps]" >&2; exit 2 ;;
esac
