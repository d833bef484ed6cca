#!/usr/bin/env bash
# test_zero_engine8.sh HPTRAIN: ZeRO stages 1-3 in the offload engine with the optimizer states
# the engine's homes do not hold (docs/zero_engine.md, "Every optimizer and width"): 8-bit AdamW,
# Lion, SGD with momentum and Adam-mini, 32- and 8-bit, their state (8-bit codes and per-block
# scales, Adam-mini's per-row second moment) cut at the shards, whose boundaries fall on 8-bit
# blocks and Adam-mini rows as well as on the norm's chunks. Each run writes the state.bin and
# model.bin of its one-process twin (--accum N --zero 0, the same flags) byte for byte:
#  1. 8-bit AdamW at stages 1 (host homes), 2 (weights and gradients on disk), 3 (host), fused at
#     stage 3 (no clipping: the twin's bits up to the header's previous-step norm); a stage-3
#     checkpoint (the cut state gathered into one process's file: the twin's state.bin, so it
#     loads anywhere one process's does) resumes at stage 3 with the uninterrupted run's bits;
#  2. Lion 8-bit with bf16-kahan weights (N = 3, stage 2), SGD 32-bit (stage 1), Adam-mini 8-bit
#     (stage 3) and 32-bit (N = 3, stage 3, weights and gradients on disk: its rows never cross
#     an owner);
#  3. bf16-kahan weights (the compensation of each rank's range) at stage 1 and at stage 3 saved
#     and resumed at stage 3 (the compensation gathered whole into the checkpoint, kept by range
#     on load);
#  4. every rank's bytes per tier (device, host, disk) = `hptrain estimate --procs N --rank r`.
# Skips (exit 77 as SKIP) where mpirun is not installed or the build has no MPI.
set -u
bin=$1
. "$(dirname "$0")/zero_engine_lib.sh" # lib.sh, mpi_lib.sh, zero_lib.sh; one, np, check_mem; the tokens, $tmp/disk, $TMPDIR
shape="gpt2:L=4,C=64,NH=4,V=64,T=32"
args=(--model "$shape" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --warmup 2 --quiet)
host=(--offload host)
dpg=(--offload params=disk,grads=disk,optim=host --offload-dir "$tmp/disk") # 8-bit etc.: optim in memory

# ---- 1. 8-bit AdamW ---------------------------------------------------------------------------
one o8 --steps 4 --batch 2 --accum 2 --zero 0 --state-bits 8 "${host[@]}"
np 2 z1q8 --steps 4 --batch 2 --zero 1 --state-bits 8 "${host[@]}"
same_run "$tmp/o8" "$tmp/z1q8" "zero 1 8-bit np 2 host vs accum 2"
np 2 z2q8 --steps 4 --batch 2 --zero 2 --state-bits 8 "${dpg[@]}"
same_run "$tmp/o8" "$tmp/z2q8" "zero 2 8-bit np 2 (weights, gradients on disk) vs accum 2"
np 2 z3q8s --steps 2 --batch 2 --zero 3 --state-bits 8 "${host[@]}"
np 2 z3q8r --steps 4 --batch 2 --zero 3 --state-bits 8 "${host[@]}" --resume "$tmp/z3q8s"
same_run "$tmp/o8" "$tmp/z3q8r" "zero 3 8-bit np 2 saved at step 2, resumed at zero 3 vs accum 2"
one o8c0 --steps 4 --batch 2 --accum 2 --zero 0 --state-bits 8 --grad-clip 0 "${host[@]}"
np 2 z3q8f --steps 4 --batch 2 --zero 3 --state-bits 8 --grad-clip 0 "${host[@]}" --fused-update
same_but_norm "$tmp/o8c0" "$tmp/z3q8f" "zero 3 8-bit fused np 2 (no clipping) vs accum 2"
ls "$TMPDIR" | grep -q "hpt-zero3-rank" && bad "a rank's scratch checkpoint was left behind"

# ---- 2. Lion, SGD, Adam-mini --------------------------------------------------------------------
one lion8 --steps 3 --batch 1 --accum 3 --zero 0 --optimizer lion --state-bits 8 --weights bf16-kahan "${host[@]}"
np 3 z2lion8 --steps 3 --batch 1 --zero 2 --optimizer lion --state-bits 8 --weights bf16-kahan "${host[@]}"
same_run "$tmp/lion8" "$tmp/z2lion8" "zero 2 Lion 8-bit bf16-kahan np 3 vs accum 3"
one sgd --steps 4 --batch 2 --accum 2 --zero 0 --optimizer sgd "${host[@]}"
np 2 z1sgd --steps 4 --batch 2 --zero 1 --optimizer sgd "${host[@]}"
same_run "$tmp/sgd" "$tmp/z1sgd" "zero 1 SGD np 2 vs accum 2"
one mini8 --steps 4 --batch 2 --accum 2 --zero 0 --optimizer adam-mini --state-bits 8 "${host[@]}"
np 2 z3mini8 --steps 4 --batch 2 --zero 3 --optimizer adam-mini --state-bits 8 "${host[@]}"
same_run "$tmp/mini8" "$tmp/z3mini8" "zero 3 Adam-mini 8-bit np 2 vs accum 2"
one mini --steps 3 --batch 1 --accum 3 --zero 0 --optimizer adam-mini "${host[@]}"
np 3 z3mini --steps 3 --batch 1 --zero 3 --optimizer adam-mini "${dpg[@]}"
same_run "$tmp/mini" "$tmp/z3mini" "zero 3 Adam-mini np 3 (weights, gradients on disk) vs accum 3"

# ---- 3. bf16-kahan weights: the compensation of each rank's range (stage 3 with the weights'
# shard, stages 1-2 with the owner's state), gathered whole into a checkpoint ------------------
one kh --steps 4 --batch 2 --accum 2 --zero 0 --weights bf16-kahan "${host[@]}"
np 2 z1kh --steps 4 --batch 2 --zero 1 --weights bf16-kahan "${host[@]}"
same_run "$tmp/kh" "$tmp/z1kh" "zero 1 bf16-kahan np 2 vs accum 2"
np 2 z3khs --steps 2 --batch 2 --zero 3 --weights bf16-kahan "${host[@]}"
np 2 z3khr --steps 4 --batch 2 --zero 3 --weights bf16-kahan "${host[@]}" --resume "$tmp/z3khs"
same_run "$tmp/kh" "$tmp/z3khr" "zero 3 bf16-kahan np 2 saved at step 2, resumed at zero 3 vs accum 2"

# ---- 4. bytes per tier per rank: measured = estimated -----------------------------------------
check_mem z2q8 2 "zero 2 8-bit np 2" --model "$shape" --seq 32 --batch 2 --zero 2 --state-bits 8 "${dpg[@]}"
check_mem z3mini8 2 "zero 3 Adam-mini 8-bit np 2" --model "$shape" --seq 32 --batch 2 --zero 3 --optimizer adam-mini --state-bits 8 "${host[@]}"
check_mem z3mini 3 "zero 3 Adam-mini np 3" --model "$shape" --seq 32 --batch 1 --zero 3 --optimizer adam-mini "${dpg[@]}"
check_mem z2lion8 3 "zero 2 Lion 8-bit bf16-kahan np 3" --model "$shape" --seq 32 --batch 1 --zero 2 --optimizer lion --state-bits 8 --weights bf16-kahan "${host[@]}"
check_mem z1kh 2 "zero 1 bf16-kahan np 2" --model "$shape" --seq 32 --batch 2 --zero 1 --weights bf16-kahan "${host[@]}"
# the cut state: each rank holds less of it than one process (the blocks' part divided)
python3 - "$tmp/o8.jsonl" "$tmp/z3q8r.0.jsonl" <<'PY' || bad "zero 3 8-bit: the state is not cut"
import json, sys
a, b = (json.loads(open(p).readlines()[-1]) for p in sys.argv[1:3])
print("8-bit AdamW: host bytes one process %d, zero 3 np 2 rank 0 %d" % (a["host_peak_bytes"], b["host_peak_bytes"]))
sys.exit(0 if b["host_peak_bytes"] < 0.6 * a["host_peak_bytes"] else 1)
PY

[ $fail = 0 ] && echo "test_zero_engine8: all passed"
exit $((fail > 0))
