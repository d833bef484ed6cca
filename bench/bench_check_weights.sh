#!/usr/bin/env bash
# The hybrid schedule's predict-phase checks with fp32 and int8 weights (docs/predict.md):
# bench/bench_check_weights.c on bench/bench_predict.sh's model (gpt2:L=2,C=64,NH=4,T=64, check
# batch 8 x 64) after 200 steps of training on Moby-Dick, then on GPT-2 124M (random weights,
# the same check batch, and a batch of 2 x 1024). Prints check time, the bytes a check adds, the check losses and the
# estimator's predict-phase peak with each.
# Usage: bench/bench_check_weights.sh   (BUILD=dir, THREADS=N (default 2), R=checks (default 5))
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
threads=${THREADS:-2}
reps=${R:-5}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF >/dev/null
cmake --build "$build" --target hptrain_cli hptrain -j2 >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude bench/bench_check_weights.c \
  "$build/libhptrain.a" -fopenmp -ldnnl -lpcre2-8 -lcjson -lmvec -lm -o "$build/bench_check_weights"
. bench/mobydick.sh
mobydick_data "$build"
export OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/hptrain" train --model "gpt2:L=2,C=64,NH=4,T=64" --data "$data/train_*.bin" --batch 8 \
  --seq 64 --steps 200 --lr 2e-3 --warmup 50 --threads "$threads" --quiet --save "$tmp/run" 2>/dev/null
"$build/bench_check_weights" "$tmp/run/model.bin" "$data/val_*.bin" 8 64 "$reps"
echo
"$build/bench_check_weights" gpt2-124m "$data/val_*.bin" 8 64 "$reps"
echo
"$build/bench_check_weights" gpt2-124m "$data/val_*.bin" 2 1024 3
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
