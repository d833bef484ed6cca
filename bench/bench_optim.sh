#!/usr/bin/env bash
# Optimizer benchmark. 1) bench/bench_optim.c: training-state bytes per parameter of every
# optimizer and state width, measured from hpt_mem's accounted bytes (GPT-2 124M shape).
# 2) Final validation loss of each optimizer and state width on Moby-Dick (scripts/demo.sh's
# corpus) with a small GPT-2, same data, seed and schedule; per-optimizer learning rates below.
# Usage: bench/bench_optim.sh [steps] [configs...]   (BUILD=dir picks the build; OUT=dir the logs;
# THREADS=N the training threads; SKIP_BYTES=1 skips part 1, to run config lists side by side;
# MODEL=shape another model for part 2, e.g. MODEL=gpt2:L=4,C=128,NH=4,T=64)
# A config is NAME:OPTIMIZER:BITS[:emb]:LR[:WD], e.g. adamw8:adamw:8:2e-3; a NAME ending in
# -fused runs with --fused-update (each block updated in its backward; clipping by the previous
# step's norm), e.g. adamw8-fused:adamw:8:2e-3; a NAME ending in -fused-bf16-sr or
# -fused-bf16-kahan also keeps the blocks' weights in bf16 (--weights), e.g.
# adamw32-fused-bf16-sr:adamw:32:2e-3.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
out=${OUT:-out/bench_optim}
steps=${1:-2000}
shift || true
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF >/dev/null
cmake --build "$build" --target hptrain_cli hptrain -j2 >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude bench/bench_optim.c "$build/libhptrain.a" \
  -fopenmp -ldnnl -lpcre2-8 -lcjson -lmvec -lm -o "$build/bench_optim"
mkdir -p "$out"
[ -n "${SKIP_BYTES:-}" ] || "$build/bench_optim" gpt2-124m | tee "$out/bytes.md"

. bench/mobydick.sh
mobydick_data "$build"
model=${MODEL:-gpt2:L=2,C=64,NH=4,T=64}
configs=("$@")
if [ ${#configs[@]} -eq 0 ]; then
  configs=(adamw32:adamw:32:2e-3 adamw8:adamw:8:2e-3 lion32:lion:32:2e-4:1.0
           adamw8emb:adamw:8:emb:2e-3 lion8:lion:8:2e-4:1.0 adam-mini32:adam-mini:32:2e-3
           adam-mini8:adam-mini:8:2e-3 sgd32:sgd:32:0.1:0 sgd8:sgd:8:0.1:0
           adamw32-fused:adamw:32:2e-3 adamw8-fused:adamw:8:2e-3 adamw8emb-fused:adamw:8:emb:2e-3
           lion8-fused:lion:8:2e-4:1.0)
fi
echo
echo "validation loss after $steps steps: $model, batch 4, seq 32, warmup 100, cosine to lr/10,"
echo "clip 1.0, seed 1337, validation over 40 batches (5120 tokens), ${THREADS:-all} threads"
echo
echo "| run | optimizer | state | lr | weight decay | final val loss | vs fp32 AdamW | optim bytes | s/run |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
base=""
for c in "${configs[@]}"; do
  IFS=: read -r name opt bits a b c2 <<<"$c"
  emb=""
  if [ "$a" = emb ]; then emb=--state-32bit-embeddings; lr=$b; wd=${c2:-0.1}; else lr=$a; wd=${b:-0.1}; fi
  fused=""
  case "$name" in
    *-fused) fused=--fused-update ;;
    *-fused-bf16-sr) fused="--fused-update --weights bf16-sr" ;;
    *-fused-bf16-kahan) fused="--fused-update --weights bf16-kahan" ;;
  esac
  t0=$(date +%s)
  "$build/hptrain" train --model "$model" --data "$data/train_*.bin" --val "$data/val_*.bin" \
    --batch 4 --seq 32 --steps "$steps" --lr "$lr" --warmup 100 --weight-decay "$wd" \
    --eval-every 500 --val-batches 40 --optimizer "$opt" --state-bits "$bits" $emb $fused \
    ${THREADS:+--threads $THREADS} --quiet --log "$out/$name.jsonl" 2>"$out/$name.txt" || { echo "| $name | $opt | $bits | $lr | $wd | failed: $(tail -1 "$out/$name.txt") |"; continue; }
  t1=$(date +%s)
  vl=$(grep -o '"val_loss":[0-9.]*' "$out/$name.jsonl" | tail -1 | cut -d: -f2)
  ob=$(grep -o 'optim [ 0-9.]*MiB' "$out/$name.txt" | tail -1 | sed 's/optim *//')
  [ -z "$base" ] && [ "$name" = adamw32 ] && base=$vl
  rel=$([ -n "$base" ] && python3 -c "print('%+.2f%%' % (100*($vl-$base)/$base))" || echo -)
  echo "| $name | $opt | $bits-bit${emb:+ (wte, wpe 32-bit)}${fused:+, fused}${fused#--fused-update} | $lr | $wd | $vl | $rel | $ob | $((t1 - t0)) |"
done | tee -a "$out/losses.md"
