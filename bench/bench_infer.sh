#!/usr/bin/env bash
# Inference benchmark: bench/bench_infer.c (generation tokens/s: the training forward per
# token vs the key/value cache on fp32 and int8 weights, GPT-2 124M), then `hptrain sample`'s
# peak RSS with fp32 and int8 weights on a saved 124M checkpoint (separate processes).
# Usage: bench/bench_infer.sh   (BUILD=dir picks the build; THREADS=N, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
threads=${THREADS:-2}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF >/dev/null
cmake --build "$build" --target hptrain_cli hptrain -j2 >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude bench/bench_infer.c "$build/libhptrain.a" \
  -fopenmp -ldnnl -lpcre2-8 -lcjson -lmvec -lm -o "$build/bench_infer"
export OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
"$build/bench_infer" gpt2-124m 64 64
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a 124M checkpoint: one training step from random weights on a few tokens
printf 'It was the best of times, it was the worst of times. %.0s' $(seq 200) > "$tmp/text.txt"
"$build/hptrain" tokenize --output "$tmp/data" --val-fraction 0.1 "$tmp/text.txt" >/dev/null
"$build/hptrain" train --model gpt2-124m --data "$tmp/data/train_*.bin" --steps 1 --batch 1 \
  --seq 64 --save "$tmp/run" --threads "$threads" >/dev/null 2>&1
echo
echo "| sample --weights | peak RSS | accounted peak | tokens/s |"
echo "|---|---|---|---|"
for w in fp32 int8; do
  line=$("$build/hptrain" sample --model "$tmp/run" --tokens 64 --weights "$w" \
         --threads "$threads" 2>&1 >/dev/null | grep "tokens/s")
  rss=$(sed -E 's/.*RSS peak ([0-9.]+ MiB).*/\1/' <<<"$line")
  acc=$(sed -E 's/.*peak ([0-9.]+ MiB) accounted.*/\1/' <<<"$line")
  tps=$(sed -E 's/.* ([0-9.]+) tokens\/s.*/\1/' <<<"$line")
  echo "| $w | $rss | $acc | $tps |"
done
