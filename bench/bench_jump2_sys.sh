#!/usr/bin/env bash
# The per-step baselines' system time (docs/predict.md, "Jumps at the issue's scale": closing
# section): a short run of bench/bench_jump2.sh's flags (Moby-Dick seed 2, STEPS steps instead
# of 3,000) per NAME (full, adam, linear), counted three ways: /usr/bin/time -v (user and
# system time, minor faults) around perf stat (page faults), then again under strace -c -f (the
# mmap / munmap / madvise / brk calls; strace slows the calls, so its run's times are not used).
# The counts are what this measures, so it runs under nice -n 19 (the times are under load).
# Usage: bench/bench_jump2_sys.sh TAG [NAME...]   writes OUT/TAG_NAME.{time,perf,strace,jsonl}
# Env: BUILD (build), OUT (out/jump2_sys), STEPS (300), STRACE (1: also the strace run).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
out=${OUT:-out/jump2_sys}
steps=${STEPS:-300}
tag=${1:?usage: $0 TAG [NAME...]}
shift
names=("$@")
[ $# -gt 0 ] || names=(full adam linear)
export OMP_WAIT_POLICY=PASSIVE
# shellcheck source=bench/jump_data.sh
. bench/jump_data.sh
jump_data "$build" mobydick >/dev/null
mkdir -p "$out"
perstep=(--schedule hybrid --warmup-steps 100 --full-steps 20 --max-predict-steps 4
         --confidence 0.5 --correct-steps 2)
for name in "${names[@]}"; do
  flags=()
  [ "$name" = full ] || flags=("${perstep[@]}" --predictor "$name")
  cmd=("$build/hptrain" train --model "gpt2:L=6,C=384,NH=6,V=2048,T=32"
       --data "$data/train_*.bin" --val "$data/val_*.bin" --batch 4 --seq 32 --steps "$steps"
       --lr 1e-3 --warmup 100 --eval-every 100 --val-batches 16 --threads 1 --quiet --seed 2
       "${flags[@]}")
  p=$out/${tag}_$name
  nice -n 19 /usr/bin/time -v -o "$p.time" perf stat -x, -o "$p.perf" \
    -e page-faults,minor-faults,major-faults "${cmd[@]}" --log "$p.jsonl" 2>"$p.txt"
  if [ "${STRACE:-1}" = 1 ]; then
    nice -n 19 strace -c -f -o "$p.strace" "${cmd[@]}" --log "$p.strace.jsonl" 2>>"$p.txt"
  fi
  printf '%s %s: user %s s, system %s s, minor faults %s, page-faults (perf) %s\n' "$tag" "$name" \
    "$(sed -n 's/.*User time (seconds): //p' "$p.time")" \
    "$(sed -n 's/.*System time (seconds): //p' "$p.time")" \
    "$(sed -n 's/.*Minor (reclaiming a frame) page faults: //p' "$p.time")" \
    "$(grep ',page-faults' "$p.perf" | cut -d, -f1)"
  if [ "${STRACE:-1}" = 1 ]; then grep -E ' (mmap|munmap|madvise|brk|mremap)$' "$p.strace" || true; fi
done
