#!/usr/bin/env bash
# test_zero_ckpt_engine.sh HPTRAIN: the offload engine's ZeRO checkpoints (stages 1-3) are
# per-rank shards with one manifest, the in-memory trainer's format (docs/zero.md,
# "Checkpoints"), and load into any number of processes at any stage, in the engine or in memory.
# 8-bit AdamW throughout (the optimizer's own cut state: codes and per-block scales):
#  1. 2 processes at stage 3 (host homes) save at step 2: their shards put together
#     (tests/zero_state.py) are one process's state.bin at step 2 (--accum 2 --zero 0), byte for
#     byte; resumed in one process in memory they end with the uninterrupted one-process run's
#     state.bin and model.bin (4 steps);
#  2. a shard with one byte changed is refused by name; new shards without their manifest (a
#     crash before it) leave the previous checkpoint loadable, with the same bits;
#  3. N = 2 -> 3 processes (--accum 3 -> 2: the same 6 micro-batches a step): 2 processes at
#     stage 3 (engine) write at step 2 the shards of 2 processes at in-memory stage 2 (the same
#     bits: docs/zero_engine.md); resumed by 3 processes at engine stage 1, and the in-memory
#     stage-2 shards resumed by 3 processes at engine stage 3 (weights and gradients on disk), both
#     end with the bits of the in-memory trainer's own 2 -> 3 resume (in-memory stage 2, 3
#     processes; its re-cut is checked against uninterrupted runs by test_zero.sh). No
#     uninterrupted run has these bits: 3 x 2 micro-batches are summed in another order than 2 x 3;
#  4. the other optimizers and widths, each against its uninterrupted one-process twin: Adam-mini
#     8-bit (stage 3, 2 processes -> one process in memory), Lion 8-bit with bf16-kahan weights
#     (stage 2, 3 processes -> stage 3, the compensation carried by the pieces), SGD (stage 1 ->
#     stage 3 with weights and gradients on disk), AdamW fp32 with bf16-kahan (its m and v from
#     the engine's homes; stage 3 -> one process in the engine);
#  5. memory: every rank's accounted peak per tier (its checkpoint saves included: one at every
#     step) = `hptrain estimate --procs N --rank r`.
# Skips (exit 77 as SKIP) where mpirun is not installed or the build has no MPI.
set -u
bin=$1
. "$(dirname "$0")/zero_engine_lib.sh" # lib.sh, mpi_lib.sh, zero_lib.sh; one, np, check_mem; the tokens, $tmp/disk, $TMPDIR
shape="gpt2:L=4,C=64,NH=4,V=64,T=32"
base=(--model "$shape" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --warmup 2 --quiet --steps 4)
args=("${base[@]}" --state-bits 8)
host=(--offload host)
dpg=(--offload params=disk,grads=disk,optim=host --offload-dir "$tmp/disk")

# ---- 1. stage 3, 2 processes -> one process in memory ---------------------------------------
one o --batch 2 --accum 2 --zero 0
one o2 --batch 2 --accum 2 --zero 0 --stop-at 2
np 2 e --batch 2 --zero 3 "${host[@]}" --stop-at 2 --save-every 1
[ -f "$tmp/e/zero.manifest" ] && ls "$tmp/e" | grep -q "zero-2-1of2.bin" || bad "stage 3 np 2 wrote no shards"
[ -f "$tmp/e/state.bin" ] && bad "stage 3 np 2 wrote a state.bin beside its shards"
ls "$tmp/e" | grep -q "zero-1-" && bad "the shards of step 1 were left beside step 2's manifest"
cmp -s "$(state_of "$tmp/e")" "$tmp/o2/state.bin" || bad "stage 3 np 2: the shards are not one process's state.bin at step 2"
cmp -s "$tmp/e/model.bin" "$tmp/o2/model.bin" || bad "stage 3 np 2: model.bin at step 2 differs"
one eo --batch 2 --accum 2 --zero 0 --resume "$tmp/e"
same_run "$tmp/o" "$tmp/eo" "stage 3 np 2 saved at step 2, resumed in one process in memory"

# ---- 2. a damaged shard, a crash before the manifest --------------------------------------------
cp -r "$tmp/e" "$tmp/ex"
python3 - "$tmp/ex/zero-2-1of2.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[len(b) // 2] ^= 0x10; open(sys.argv[1], "wb").write(b)
PY
out=$("$bin" train "${args[@]}" --batch 2 --accum 2 --zero 0 --resume "$tmp/ex" 2>&1) && bad "a shard with a byte changed should be refused"
grep -q "zero-2-1of2.bin: checksum mismatch" <<<"$out" || bad "the damaged shard is not named: $out"
cp -r "$tmp/e" "$tmp/ec" # the next save's shards on disk, its manifest not yet renamed
head -c 4096 "$tmp/e/zero-2-0of2.bin" >"$tmp/ec/zero-4-0of2.bin"
cp "$tmp/e/zero-2-1of2.bin" "$tmp/ec/zero-4-1of2.bin"
one eco --batch 2 --accum 2 --zero 0 --resume "$tmp/ec"
same_run "$tmp/o" "$tmp/eco" "a crash before the manifest: the previous checkpoint resumed"

# ---- 3. 2 -> 3 processes, engine and in-memory shards both ways -------------------------------
np 2 m2 --batch 1 --accum 3 --zero 2 --stop-at 2
np 3 m3 --batch 1 --accum 2 --zero 2 --resume "$tmp/m2"
np 2 z2 --batch 1 --accum 3 --zero 3 "${host[@]}" --stop-at 2
same_run "$tmp/m2" "$tmp/z2" "stage 3 (engine) np 2 --accum 3 vs in-memory stage 2 at step 2"
np 3 z21 --batch 1 --accum 2 --zero 1 "${host[@]}" --resume "$tmp/z2"
same_run "$tmp/m3" "$tmp/z21" "engine stage-3 shards (np 2) resumed at engine stage 1 (np 3)"
np 3 m23 --batch 1 --accum 2 --zero 3 "${dpg[@]}" --resume "$tmp/m2"
same_run "$tmp/m3" "$tmp/m23" "in-memory stage-2 shards (np 2) resumed at engine stage 3 (np 3, disk)"

# ---- 4. the other optimizers and widths (their own state cut at the shards; bf16-kahan's
# compensation carried with the pieces), each resumed against its uninterrupted twin ------------
args=("${base[@]}") # (the flags below say the width)
one mo --batch 2 --accum 2 --zero 0 --optimizer adam-mini --state-bits 8
np 2 ms --batch 2 --zero 3 --optimizer adam-mini --state-bits 8 "${host[@]}" --stop-at 2
one mr --batch 2 --accum 2 --zero 0 --resume "$tmp/ms"
same_run "$tmp/mo" "$tmp/mr" "Adam-mini 8-bit: stage 3 np 2 -> one process in memory"
one lo --batch 1 --accum 3 --zero 0 --optimizer lion --state-bits 8 --weights bf16-kahan "${host[@]}"
np 3 ls --batch 1 --zero 2 --optimizer lion --state-bits 8 --weights bf16-kahan "${host[@]}" --stop-at 2
np 3 lr --batch 1 --zero 3 --weights bf16-kahan "${host[@]}" --resume "$tmp/ls"
same_run "$tmp/lo" "$tmp/lr" "Lion 8-bit, bf16-kahan: stage 2 np 3 -> stage 3 np 3"
one so --batch 2 --accum 2 --zero 0 --optimizer sgd "${host[@]}"
np 2 ss --batch 2 --zero 1 --optimizer sgd "${host[@]}" --stop-at 2
np 2 sr --batch 2 --zero 3 "${dpg[@]}" --resume "$tmp/ss"
same_run "$tmp/so" "$tmp/sr" "SGD: stage 1 np 2 -> stage 3 np 2 (disk)"
one fo --batch 2 --accum 2 --zero 0 --weights bf16-kahan "${host[@]}"
np 2 fs --batch 2 --zero 3 --weights bf16-kahan --offload params=host,grads=disk,optim=host --offload-dir "$tmp/disk" --stop-at 2
one fr --batch 2 --accum 2 --zero 0 --weights bf16-kahan "${host[@]}" --resume "$tmp/fs"
same_run "$tmp/fo" "$tmp/fr" "AdamW fp32, bf16-kahan: stage 3 np 2 (gradients on disk) -> one process in the engine"

# ---- 5. memory, the saves included -------------------------------------------------------------
check_mem e 2 "stage 3 np 2, saving every step" --model "$shape" --seq 32 --batch 2 --zero 3 --state-bits 8 "${host[@]}"
check_mem m23 3 "stage 3 np 3 (disk), resumed and saved" --model "$shape" --seq 32 --batch 1 --accum 2 --zero 3 --state-bits 8 "${dpg[@]}"

[ $fail = 0 ] && echo "test_zero_ckpt_engine: all passed"
exit $((fail > 0))
