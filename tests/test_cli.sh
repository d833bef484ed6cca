#!/usr/bin/env bash
# test_cli.sh HPTRAIN REFDIR: the command line end to end. Every bad input must end in a
# one-line error on stderr and exit status 1 or 2 (never a crash: no status >= 128, no
# sanitizer report); good input must work: verify passes, training lowers the loss, a split
# run resumes bit-identically, sample and encode/decode work.
set -u
bin=$1
ref=$2
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish

model=$ref/gpt2_tiny_model.bin
state=$ref/gpt2_tiny_state.bin

# --- verify against PyTorch ---
if "$bin" verify --model "$model" --state "$state" --steps "$ref/gpt2_tiny_steps.json" >"$tmp/v" 2>&1 && grep -q PASSED "$tmp/v"; then ok; else bad "verify: $(cat "$tmp/v")"; fi
expect_error "verify truncated" "truncated" bash -c "head -c 5000 '$state' > '$tmp/s.bin'; exec '$bin' verify --model '$model' --state '$tmp/s.bin'"

# --- data for training ---
python3 - "$tmp" <<'PY'
import struct, sys, random
d = sys.argv[1]
random.seed(5)
def shard(path, toks, count=None, magic=20240520, version=1):
    h = [magic, version, len(toks) if count is None else count] + [0] * 253
    open(path, 'wb').write(struct.pack('<256i', *h) + struct.pack('<%dH' % len(toks), *toks))
pattern = [random.randrange(64) for _ in range(40)]
toks = [pattern[i % 40] if random.random() < 0.9 else random.randrange(64) for i in range(6000)]
shard(d + '/train_000000.bin', toks[:5000])
shard(d + '/val_000000.bin', toks[5000:])
shard(d + '/bigid.bin', [1, 2, 3, 60000] * 200)
shard(d + '/badmagic.bin', toks[:500], magic=1234)
shard(d + '/badversion.bin', toks[:500], version=9)
shard(d + '/short.bin', toks[:500], count=900)
PY
shape="gpt2:L=2,C=32,NH=4,V=64,T=32"
train() { "$bin" train --model "$shape" --data "$tmp/train_*.bin" --batch 4 --seq 16 --quiet "$@"; }
# the same without --quiet: the setup lines (plan, activations, optimizer) and progress lines
train_loud() { "$bin" train --model "$shape" --data "$tmp/train_*.bin" --batch 4 --seq 16 "$@"; }

# --- bad input: each a one-line error ---
expect_error "unknown flag" "unknown option" train --steps 2 --bogus
# whole option names only (getopt_long would take --step as --steps), with a suggestion
expect_error "prefix of an option" "unknown option '--step' .did you mean --steps" train --step 2
expect_error "misspelt option" "did you mean --memory" train --steps 2 --memroy 4GB
expect_error "misspelt option=value" "did you mean --batch" train --steps 2 --bach=2
# an unquoted glob the shell expanded: the second file is left over
expect_error "expanded glob" "quote it" "$bin" train --model "$shape" --data "$tmp/train_000000.bin" "$tmp/val_000000.bin" --batch 4 --seq 16 --steps 1
expect_error "missing value" "needs a value" train --steps
expect_error "batch 0" "batch" train --steps 2 --batch 0
expect_error "steps 0" "steps" train --steps 0
expect_error "seq > maxT" "maxT" train --steps 2 --seq 33
expect_error "missing model file" "cannot open" "$bin" train --model "$tmp/nope.bin" --data "$tmp/train_*.bin" --steps 1
expect_error "bad shape" "multiple of heads" "$bin" train --model "gpt2:L=2,C=30,NH=4" --data "$tmp/train_*.bin" --steps 1
expect_error "no data" "no data files" train --steps 1 --data "$tmp/none_*.bin"
expect_error "token id >= V" "vocabulary" train --steps 1 --data "$tmp/bigid.bin"
expect_error "shard magic" "magic" train --steps 1 --data "$tmp/badmagic.bin"
expect_error "shard version" "version" train --steps 1 --data "$tmp/badversion.bin"
expect_error "shard truncated" "truncated" train --steps 1 --data "$tmp/short.bin"
expect_error "bad recompute" "every:N" train --steps 1 --recompute every:0
expect_error "bad attention" "flash or plain" train --steps 1 --attention fast
expect_error "budget too small" "out of memory|budget" train --steps 1 --memory 100KB
expect_error "bad size" "size" train --steps 1 --memory 12XB
expect_error "checkpoint magic" "magic" "$bin" sample --model "$tmp/train_000000.bin"
head -c 2000 "$model" >"$tmp/trunc_model.bin"
expect_error "checkpoint truncated" "bytes" "$bin" sample --model "$tmp/trunc_model.bin"
python3 -c "
import sys; b = bytearray(open('$model','rb').read()); b[4] = 7; open('$tmp/v7.bin','wb').write(b)"
expect_error "checkpoint version" "version 7" "$bin" sample --model "$tmp/v7.bin"
expect_error "resume missing" "cannot open" train --steps 2 --resume "$tmp/nothing"
expect_error "unknown command" "unknown command" "$bin" frobnicate
for c in train sample verify encode decode tokenize; do
  if "$bin" $c --help | grep -q "usage: hptrain $c"; then ok; else bad "$c --help"; fi
done

# --- training lowers the loss; logs have the contract's fields ---
if train --steps 60 --lr 3e-3 --val "$tmp/val_*.bin" --eval-every 20 --log "$tmp/log.jsonl" --save "$tmp/run" 2>"$tmp/err"; then
  python3 - "$tmp/log.jsonl" <<'PY' && ok || bad "training log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 60, len(rows)
for k in ("step", "phase", "loss", "lr", "tokens_per_s", "step_ms", "mem_peak_bytes", "rss_peak_bytes"):
    assert k in rows[0], k
assert rows[-1]["val_loss"] < rows[19]["val_loss"] < rows[0]["loss"], (rows[0]["loss"], rows[19], rows[-1])
assert rows[-1]["loss"] < rows[0]["loss"] - 1.0, (rows[0]["loss"], rows[-1]["loss"])
PY
else
  bad "training: $(cat "$tmp/err")"
fi

expect_error "state/model mismatch" "not this model" "$bin" verify --model "$tmp/run/model.bin" --state "$state"

# --- a run split by --stop-at and --resume equals the uninterrupted run, bit for bit ---
train --steps 20 --lr 3e-3 --log "$tmp/full.jsonl" --save "$tmp/full" 2>/dev/null
train --steps 20 --lr 3e-3 --log "$tmp/part1.jsonl" --save "$tmp/split" --stop-at 8 2>/dev/null
"$bin" train --data "$tmp/train_*.bin" --batch 4 --seq 16 --quiet --steps 20 --lr 3e-3 \
  --log "$tmp/part2.jsonl" --resume "$tmp/split" --save "$tmp/split" 2>/dev/null
python3 - "$tmp" <<'PY' && ok || bad "resume is not bit-identical"
import json, sys
d = sys.argv[1]
full = [json.loads(l)["loss"] for l in open(d + "/full.jsonl")]
split = [json.loads(l)["loss"] for l in open(d + "/part1.jsonl")] + [json.loads(l)["loss"] for l in open(d + "/part2.jsonl")]
assert full == split, (full, split)
PY
if cmp -s "$tmp/full/model.bin" "$tmp/split/model.bin"; then ok; else bad "resumed weights differ"; fi

# --- optimizers: 8-bit Lion split by --stop-at resumes bit-identically; bad flags refused ---
train --steps 12 --lr 1e-3 --optimizer lion --state-bits 8 --save "$tmp/lfull" 2>/dev/null
train --steps 12 --lr 1e-3 --optimizer lion --state-bits 8 --save "$tmp/lsplit" --stop-at 5 2>/dev/null
"$bin" train --data "$tmp/train_*.bin" --batch 4 --seq 16 --steps 12 --lr 1e-3 \
  --resume "$tmp/lsplit" --save "$tmp/lsplit" 2>"$tmp/err"
if grep -q "optimizer lion, 8-bit state" "$tmp/err" && cmp -s "$tmp/lfull/state.bin" "$tmp/lsplit/state.bin"; then ok
else bad "8-bit Lion resume: $(cat "$tmp/err")"; fi
expect_error "bad optimizer" "unknown optimizer" train --steps 1 --optimizer adam
expect_error "bad state bits" "32 or 8" train --steps 1 --state-bits 4
expect_error "emb32 without 8 bits" "state-bits 8" train --steps 1 --state-32bit-embeddings
expect_error "bad weights" "bf16-sr" train --steps 1 --weights bf16
# bf16-kahan weights split by --stop-at resume bit-identically (the compensation is saved)
train --steps 8 --lr 1e-3 --weights bf16-kahan --fused-update --save "$tmp/kfull" 2>/dev/null
train --steps 8 --lr 1e-3 --weights bf16-kahan --fused-update --save "$tmp/ksplit" --stop-at 3 2>/dev/null
"$bin" train --data "$tmp/train_*.bin" --batch 4 --seq 16 --quiet --steps 8 --lr 1e-3 \
  --weights bf16-kahan --fused-update --resume "$tmp/ksplit" --save "$tmp/ksplit" 2>"$tmp/err"
if cmp -s "$tmp/kfull/state.bin" "$tmp/ksplit/state.bin"; then ok; else bad "bf16-kahan resume: $(cat "$tmp/err")"; fi
expect_error "bf16-kahan weights on disk" "device or the host" train --steps 1 --weights bf16-kahan --offload params=disk --offload-dir "$tmp"

# --- gradient accumulation: --accum 2 split by --stop-at resumes bit-identically; bad K refused ---
expect_error "accum 0" "accum expects" train --steps 1 --accum 0
expect_error "estimate accum 0" "accum expects" "$bin" estimate --model "$shape" --accum 0
train --steps 6 --lr 1e-3 --batch 2 --accum 2 --save "$tmp/afull" 2>/dev/null
train --steps 6 --lr 1e-3 --batch 2 --accum 2 --save "$tmp/asplit" --stop-at 3 2>/dev/null
"$bin" train --data "$tmp/train_*.bin" --batch 2 --seq 16 --accum 2 --quiet --steps 6 --lr 1e-3 \
  --resume "$tmp/asplit" --save "$tmp/asplit" 2>"$tmp/err"
if cmp -s "$tmp/afull/state.bin" "$tmp/asplit/state.bin"; then ok; else bad "accum 2 resume: $(cat "$tmp/err")"; fi
expect_error "resume with another accum" "accum 2" "$bin" train --data "$tmp/train_*.bin" --batch 2 \
  --seq 16 --quiet --steps 6 --accum 3 --resume "$tmp/asplit"
if "$bin" estimate --model "gpt2:L=2,C=32,NH=4,V=64,T=16" --batch 2 --seq 16 --accum 4 --json \
   | grep -q '"tokens_per_step":128,'; then ok; else bad "estimate --accum"; fi
if "$bin" estimate --model "gpt2:L=2,C=32,NH=4,V=64,T=16" --seq 16 --optimizer adam-mini --state-bits 8 --json \
   | grep -q '"optimizer":"adam-mini","state_bits":8'; then ok; else bad "estimate --optimizer"; fi
if "$bin" estimate --model "gpt2:L=2,C=32,NH=4,V=64,T=16" --seq 16 --attention plain --recompute every:2 --json \
   | grep -q '"attention":"plain","recompute":"every:2"'; then ok; else bad "estimate --recompute"; fi
if train_loud --steps 2 --attention plain --recompute full 2>&1 | grep -q "attention plain, recompute full"; then ok
else bad "train --recompute full"; fi

# --- sample, encode/decode ---
if "$bin" sample --model "$tmp/run" --tokens 20 >"$tmp/sample" 2>"$tmp/err" && [ -s "$tmp/sample" ]; then ok; else bad "sample: $(cat "$tmp/err")"; fi
if "$bin" sample --model "$tmp/run" --tokens 20 --weights int8 >"$tmp/sample8" 2>"$tmp/err" &&
   [ -s "$tmp/sample8" ] && grep -q "int8 weights" "$tmp/err"; then ok; else bad "sample int8: $(cat "$tmp/err")"; fi
expect_error "sample weights" "weight format" "$bin" sample --model "$tmp/run" --weights int4
expect_error "sample temperature" "temperature" "$bin" sample --model "$tmp/run" --temperature 0
text='Hello, world! Ünïcödé — “quotes” 12345   spaces'
if [ "$(printf '%s' "$text" | "$bin" encode | "$bin" decode)" = "$text" ]; then ok; else bad "encode/decode round trip"; fi
expect_error "decode bad id" "id|token" bash -c "echo '1 2 99999999' | '$bin' decode"
expect_error "decode not a number" "integer|number|invalid" bash -c "echo '1 x 3' | '$bin' decode"

# --- hybrid schedule: phases in the log, split inside a predict phase resumes bit-identically ---
hyb=(--steps 16 --lr 3e-3 --val "$tmp/val_*.bin" --eval-every 8 --schedule hybrid --warmup-steps 2
     --full-steps 2 --max-predict-steps 4 --confidence 0 --correct-steps 1 --predictor linear --check-every 2)
train "${hyb[@]}" --log "$tmp/hfull.jsonl" --save "$tmp/hfull" 2>"$tmp/err"
python3 - "$tmp" <<'PY' && ok || bad "hybrid log: $(cat "$tmp/err")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/hfull.jsonl")]
phases = [r["phase"] for r in rows]
assert phases[:4] == ["warmup", "warmup", "full", "full"] and phases[4] == "predict", phases
assert "correct" in phases and all("confidence" in r and "step_ms" in r for r in rows), rows
p = [r for r in rows if r["phase"] == "predict"]
assert all("pred_loss" in r for r in p) and any(r.get("checked") for r in p), p
assert all(("loss" in r) == bool(r.get("checked")) for r in p), p
PY
stop=$(python3 -c "
import json
rows = [json.loads(l) for l in open('$tmp/hfull.jsonl')]
print([r['step'] for r in rows if r['phase'] == 'predict'][1])")
train "${hyb[@]}" --save "$tmp/hsplit" --stop-at "$stop" 2>/dev/null
"$bin" train --data "$tmp/train_*.bin" --batch 4 --seq 16 --quiet "${hyb[@]}" --resume "$tmp/hsplit" \
  --save "$tmp/hsplit" 2>"$tmp/err"
if grep -q "schedule: " "$tmp/err" && cmp -s "$tmp/hfull/state.bin" "$tmp/hsplit/state.bin"; then ok
else bad "hybrid resume at step $stop: $(cat "$tmp/err")"; fi
expect_error "bad schedule" "full or hybrid" train --steps 1 --schedule half
expect_error "bad predictor" "unknown predictor" train --steps 1 --schedule hybrid --predictor oracle
expect_error "checks without val" "need validation" train --steps 1 --schedule hybrid --check-every 2
expect_error "adam predictor with 8-bit state" "32-bit moments" train --steps 1 --schedule hybrid --state-bits 8
if "$bin" estimate --model "$shape" --seq 16 --schedule hybrid --predictor linear --json \
   | grep -q '"predictor":"linear","checks":false,"check_weights":"fp32","predict_peak_bytes_by_tier":{"device":'; then ok; else bad "estimate --schedule"; fi
if "$bin" estimate --model "$shape" --seq 16 --schedule hybrid --check-every 2 --check-weights int8 --json \
   | grep -q '"checks":true,"check_weights":"int8"'; then ok; else bad "estimate --check-weights int8"; fi
expect_error "bad check weights" "fp32, int8" train --steps 1 --schedule hybrid --check-weights int4

# --- 16-bit gradient homes and loss scaling: refusals; a run's log and summary show the scale ---
expect_error "grad home without offload" "needs --offload" train --steps 1 --grad-home fp16
expect_error "bad grad home" "fp32, bf16 or fp16" train --steps 1 --offload host --grad-home fp8
expect_error "grad home fused" "never go to a home" train --steps 1 --offload host --grad-home bf16 --fused-update
expect_error "loss scale fused" "fused-update" train --steps 1 --offload host --loss-scale dynamic --fused-update
expect_error "loss scale not a power of two" "power of two" train --steps 1 --loss-scale 1000
expect_error "fp16 without a scale" "need a loss scale" train --steps 1 --offload host --grad-home fp16 --loss-scale off
train --steps 4 --lr 1e-3 --offload host --grad-home fp16 --loss-scale-init 1099511627776 \
  --log "$tmp/ls.jsonl" 2>"$tmp/err"
if grep -q '"loss_scale":1099511627776,"skipped":1' "$tmp/ls.jsonl" \
   && grep -q '"loss_scale":549755813888,"skipped":1' "$tmp/ls.jsonl" \
   && grep -qE "^loss scale: dynamic, [0-9.e+]+ at the end; [1-4] steps? skipped" "$tmp/err"; then ok
else bad "loss scale log: $(cat "$tmp/ls.jsonl" "$tmp/err")"; fi
if "$bin" estimate --model "$shape" --seq 16 --offload disk --grad-home bf16 --json \
   | grep -q '"grad_home":"bf16"'; then ok; else bad "estimate --grad-home"; fi

# --- chunked and bf16 embeddings: refusals; a run; the estimate names them ---
expect_error "embeddings not fused" "needs --fused-update" train --steps 1 --embeddings chunked
expect_error "bf16 embeddings, fp32 weights" "bf16-sr or bf16-kahan" train --steps 1 --fused-update --embeddings bf16
expect_error "bad embeddings" "full, chunked or bf16" train --steps 1 --fused-update --embeddings half
if train --steps 3 --lr 1e-3 --fused-update --weights bf16-kahan --embeddings bf16 --state-bits 8 \
   --log "$tmp/emb.jsonl" 2>"$tmp/err" && [ "$(grep -c '"loss"' "$tmp/emb.jsonl")" = 3 ]; then ok
else bad "bf16 embeddings run: $(cat "$tmp/err")"; fi
if "$bin" estimate --model "$shape" --seq 16 --fused-update --weights bf16-sr --embeddings bf16 --json \
   | grep -q '"embeddings":"bf16"'; then ok; else bad "estimate --embeddings"; fi

# --- one plan: train and estimate parse and check the same flags; budgets per tier ---
expect_error "fused with accum" "cannot accumulate" train --steps 1 --fused-update --accum 2
expect_error "estimate fused with accum" "cannot accumulate" "$bin" estimate --model "$shape" --fused-update --accum 2
expect_error "offload disk without dir" "offload-dir" train --steps 1 --offload disk
expect_error "estimate loss scale" "power of two" "$bin" estimate --model "$shape" --loss-scale 1000
expect_error "estimate bad host budget" "host-memory" "$bin" estimate --model "$shape" --host-memory 12XB
if train_loud --steps 1 --recompute selective --fused-update 2>&1 | grep -q "plan: --recompute selective --fused-update"; then ok
else bad "train prints its plan"; fi
if "$bin" estimate --model "$shape" --seq 16 --offload host --host-memory 10KB --disk-memory 1GB \
   | grep -qE "budget +host .*does NOT fit"; then ok; else bad "estimate --host-memory"; fi
if "$bin" estimate --model "$shape" --seq 16 --offload host --host-memory 1GB --json \
   | grep -q '"host_budget_bytes":1000000000,"host_fits":true'; then ok; else bad "estimate --host-memory json"; fi
# --device: a bad name is a usage error; cuda is a one-line error here (no CUDA build, no GPU, or
# a GPU the runner does not use yet: docs/cuda.md); an estimate for a GPU runs anywhere
expect_error "bad device" "cpu, cuda or cuda:N" train --steps 1 --device gpu
expect_error "device cuda" "cuda" train --steps 1 --device cuda
if "$bin" estimate --model "$shape" --seq 16 --device cuda:1 >/dev/null; then ok; else bad "estimate --device cuda"; fi

# --- a trace records the run's plan: profile estimates the run as it was (estimate = measured) ---
train --steps 2 --recompute selective --state-bits 8 --memory 64MiB --trace "$tmp/trace.json" 2>/dev/null
"$bin" profile "$tmp/trace.json" >"$tmp/prof" 2>&1
if grep -q "the run's plan: --recompute selective --state-bits 8 --memory 64MiB" "$tmp/prof" &&
   grep -qE "the estimator gives .* for this run as recorded \(measured .*, \+0\.00%\)" "$tmp/prof" &&
   grep -q "it fits the --memory budget" "$tmp/prof" && ! grep -q "assume the default" "$tmp/prof" &&
   grep -qE "^  --recompute full --act-offload host +peak .* on the host$" "$tmp/prof"
then ok; else bad "profile of a planned run: $(sed -n '/what would lower/,$p' "$tmp/prof" | head -5)"; fi

finish test_cli
