#!/usr/bin/env bash
# The jump predictor's evaluation at the issue's scale (docs/predict.md, "Jumps at the issue's
# scale"): GPT-2 L=6, C=384, NH=6 on Moby-Dick and on the State of the Union corpus in a
# 2048-token BPE (bench/jump_data.sh), 3,000 steps, batch 4 x 32, one thread per run. FULL-only,
# the jump settings of the tuning grid, and the per-step predictors (adam, linear) as baselines.
# Long: runs under nice -n 19, JOBS (2) at a time; each run's process CPU time is recorded by
# /usr/bin/time next to its log (the cost measure: wall-clock is noisy under shared load).
# Usage: bench/bench_jump2.sh run CORPUS NAME SEED   one run: NAME is full, adam, linear,
#                                                    jump_<grid setting>, jump_chosen or
#                                                    jump_x_<exploratory setting>
#        bench/bench_jump2.sh queue FILE             lines "CORPUS NAME SEED"; jump_chosen
#                                                    waits for the tuning runs and the rule
# Env: BUILD (build), OUT (out/bench_jump2), STEPS (3000), JOBS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
out=${OUT:-out/bench_jump2}
steps=${STEPS:-3000}
export OMP_WAIT_POLICY=PASSIVE
[ -x "$build/hptrain" ] || { echo "build $build first" >&2; exit 1; }
# shellcheck source=bench/jump_data.sh
. bench/jump_data.sh # jump_data: sets $data
mkdir -p "$out"

# the grid (tuning: Moby-Dick, seed 1): name -> flags. lin_s100_h400 (--full-steps 401
# --jump-stride 100, H 400), lin_s50_h50 (H 50) and exp_s50_h200 (--jump-fit exp) were in it
# and were dropped before they started: no compute (docs/predict.md, the amendments)
declare -A grid=(
  [lin_s50_h200]="--full-steps 201 --jump-stride 50 --jump-snapshots 5 --jump-horizon 200 --jump-fit linear"
)
# the dropped settings, as they were registered: an exploratory, post-hoc check on the tuning
# seed after the registered result (fourth session; they cannot change it, and the rule does
# not see them: `choose` reads grid only). Run as jump_x_<name>, e.g. "mobydick jump_x_lin_s50_h50 1"
declare -A explore=(
  [lin_s100_h400]="--full-steps 401 --jump-stride 100 --jump-snapshots 5 --jump-horizon 400 --jump-fit linear"
  [exp_s50_h200]="--full-steps 201 --jump-stride 50 --jump-snapshots 5 --jump-horizon 200 --jump-fit exp"
  [lin_s50_h50]="--full-steps 201 --jump-stride 50 --jump-snapshots 5 --jump-horizon 50 --jump-fit linear"
)
jump=(--schedule hybrid --predictor jump --warmup-steps 200 --correct-steps 2
      --jump-search-batches 2 --jump-min-gain 2)
# the first attempt's per-step setting (docs/predict.md), with adam or linear
perstep=(--schedule hybrid --warmup-steps 100 --full-steps 20 --max-predict-steps 4
         --confidence 0.5 --correct-steps 2)

run() { # CORPUS NAME SEED
  local corpus=$1 name=$2 seed=$3 flags=() g
  jump_data "$build" "$corpus" >/dev/null
  case "$name" in
    full) ;;
    adam|linear) flags=("${perstep[@]}" --predictor "$name") ;;
    jump_x_*)
      g=${name#jump_x_}
      [ -n "${explore[$g]:-}" ] || { echo "unknown exploratory setting '$g'" >&2; return 1; }
      # shellcheck disable=SC2206
      flags=("${jump[@]}" ${explore[$g]}) ;;
    jump_*)
      g=${name#jump_}
      if [ "$g" = chosen ]; then
        flock "$out/choose.lock" "$0" choose
        g=$(cat "$out/chosen.txt")
      fi
      [ -n "${grid[$g]:-}" ] || { echo "unknown setting '$g'" >&2; return 1; }
      # shellcheck disable=SC2206
      flags=("${jump[@]}" ${grid[$g]}) ;;
    *) echo "unknown run '$name'" >&2; return 1 ;;
  esac
  local dir=$out/$corpus
  mkdir -p "$dir"
  echo "$(date -u +%T) start $corpus $name $seed (load $(cut -d' ' -f1 /proc/loadavg))" >>"$out/progress.txt"
  nice -n 19 /usr/bin/time -f "%U %S %e" -o "$dir/${name}_s$seed.time" \
    "$build/hptrain" train --model "gpt2:L=6,C=384,NH=6,V=2048,T=32" \
    --data "$data/train_*.bin" --val "$data/val_*.bin" --batch 4 --seq 32 --steps "$steps" \
    --lr 1e-3 --warmup 100 --eval-every 100 --val-batches 16 --threads 1 --quiet --seed "$seed" \
    --log "$dir/${name}_s$seed.jsonl" "${flags[@]}" 2>"$dir/${name}_s$seed.txt" \
    || { echo "$corpus $name $seed failed: $(tail -1 "$dir/${name}_s$seed.txt")" >>"$out/progress.txt"; return 1; }
  echo "$(date -u +%T) done $corpus $name $seed (cpu $(cat "$dir/${name}_s$seed.time"))" >>"$out/progress.txt"
}

case "${1:-}" in
run) run "$2" "$3" "$4" ;;
queue)
  grep -v '^#' "$2" | xargs -P "${JOBS:-2}" -L 1 "$0" one ;;
one) # a queue line; "after PID": wait for that process (a queue restarted beside running runs)
  if [ "$2" = after ]; then
    while kill -0 "$3" 2>/dev/null; do sleep 10; done
  else
    run "$2" "$3" "$4"
  fi ;;
choose) # (under a lock) wait for the tuning runs, then apply the rule: bench_jump.py --tune
  [ -f "$out/chosen.txt" ] && exit 0
  for g in full "${!grid[@]}"; do
    n=jump_$g; [ "$g" = full ] && n=full
    while [ ! -s "$out/mobydick/${n}_s1.time" ]; do sleep 20; done
  done
  python3 bench/bench_jump.py --tune "$out/mobydick" >"$out/tune.md"
  cp "$out/mobydick/chosen.txt" "$out/chosen.txt"
  echo "$(date -u +%T) chose $(cat "$out/chosen.txt")" >>"$out/progress.txt" ;;
*) echo "usage: $0 run CORPUS NAME SEED | queue FILE" >&2; exit 2 ;;
esac
