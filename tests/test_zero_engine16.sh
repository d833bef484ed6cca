#!/usr/bin/env bash
# test_zero_engine16.sh HPTRAIN: ZeRO stages 1-3 in the offload engine with 16-bit homes and loss
# scaling (docs/zero_engine.md, "16-bit homes and loss scaling"):
#  1. bf16-sr weights with their home on disk: each shard's (stage 3) or the whole block's bf16
#     values (stages 1, 2) read and written through a bf16 staging block; N processes write the
#     state.bin and model.bin of one process with --accum N --zero 0 and the same flags, byte for
#     byte (stages 1-3 exact, 1 and 3 fused, a stage-3 checkpoint resumed at stage 3);
#     bf16-kahan on disk stays refused in any number of processes (its compensation);
#  2. 16-bit gradient homes (--grad-home bf16|fp16): the reduce-scatter sums each range in fp32 in
#     rank order and its owner narrows it once into its home; stages 1-3 write the bits of stage 0
#     with N processes (the all-reduce's fp32 sum of the same micro-batches, narrowed once), host
#     and disk homes, N = 2 and 3 (with bf16-sr weights on disk too); one process's --accum N
#     rounds its home at every micro-batch instead, and the first step's gradient norm stays
#     within that rounding's bound;
#  3. loss scaling: fp32 homes, dynamic and fixed, against one process's --accum N --zero 0;
#     fp16 homes with a scale that overflows on some steps and not others (on some ranks' ranges
#     only: the flags are all-reduced) against stage 0, every rank's scaler the same, a stage-3
#     checkpoint (scaler included) resumed with the uninterrupted run's bits;
#  4. every rank's bytes per tier (device, host, disk) = `hptrain estimate --procs N --rank r`.
# Skips (exit 77 as SKIP) where mpirun is not installed or the build has no MPI.
set -u
bin=$1
. "$(dirname "$0")/zero_engine_lib.sh" # lib.sh, mpi_lib.sh, zero_lib.sh; one, np, check_mem; the tokens, $tmp/disk, $TMPDIR
shape="gpt2:L=4,C=64,NH=4,V=64,T=32"
args=(--model "$shape" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --warmup 2 --quiet)
host=(--offload host)
disk=(--offload disk --offload-dir "$tmp/disk")
pd=(--offload params=disk,grads=host,optim=host --offload-dir "$tmp/disk")
small=(--model "$shape" --seq 32)

# ---- 1. bf16-sr weights on disk -----------------------------------------------------------------
# (clipping off: the fused runs write the twin's bits up to the header's previous-step norm)
one bd --steps 4 --batch 2 --accum 2 --zero 0 --weights bf16-sr --grad-clip 0 "${disk[@]}"
np 2 bd1 --steps 4 --batch 2 --zero 1 --weights bf16-sr --grad-clip 0 "${disk[@]}"
same_run "$tmp/bd" "$tmp/bd1" "zero 1 bf16-sr on disk np 2 vs accum 2"
np 2 bd2 --steps 4 --batch 2 --zero 2 --weights bf16-sr --grad-clip 0 "${pd[@]}"
same_run "$tmp/bd" "$tmp/bd2" "zero 2 bf16-sr on disk (gradients, moments on the host) np 2 vs accum 2"
np 2 bd3 --steps 4 --batch 2 --zero 3 --weights bf16-sr --grad-clip 0 "${disk[@]}"
same_run "$tmp/bd" "$tmp/bd3" "zero 3 bf16-sr on disk np 2 vs accum 2"
check_mem bd3 2 "zero 3 bf16-sr on disk np 2" "${small[@]}" --batch 2 --zero 3 --weights bf16-sr "${disk[@]}"
check_mem bd2 2 "zero 2 bf16-sr on disk np 2" "${small[@]}" --batch 2 --zero 2 --weights bf16-sr "${pd[@]}"
# fused: the update rounds into a staging block filled from the slot (stage 1: gathered there)
np 2 bdf1 --steps 4 --batch 2 --zero 1 --weights bf16-sr --grad-clip 0 "${pd[@]}" --fused-update
same_but_norm "$tmp/bd" "$tmp/bdf1" "zero 1 bf16-sr on disk fused np 2 vs accum 2"
np 2 bdf3 --steps 4 --batch 2 --zero 3 --weights bf16-sr --grad-clip 0 "${disk[@]}" --fused-update
same_but_norm "$tmp/bd" "$tmp/bdf3" "zero 3 bf16-sr on disk fused np 2 vs accum 2"
# a stage-3 checkpoint (the shards' bf16 values gathered widened) resumed at stage 3
np 2 bd3s --steps 2 --batch 2 --zero 3 --weights bf16-sr --grad-clip 0 "${pd[@]}"
np 2 bd3r --steps 4 --batch 2 --zero 3 --weights bf16-sr --grad-clip 0 "${pd[@]}" --resume "$tmp/bd3s"
same_run "$tmp/bd" "$tmp/bd3r" "zero 3 bf16-sr on disk np 2 saved at step 2, resumed vs accum 2"
# the shards' bf16 values read from disk and written back range by range (engine_ckpt.c): a stage-3
# checkpoint resumed at stage 1, whose whole disk home each rank fills from every shard
np 2 bd3s1 --steps 2 --batch 2 --zero 3 --weights bf16-sr --grad-clip 0 "${disk[@]}"
np 2 bd1r --steps 4 --batch 2 --zero 1 --weights bf16-sr --grad-clip 0 "${disk[@]}" --resume "$tmp/bd3s1"
same_run "$tmp/bd" "$tmp/bd1r" "zero 3 bf16-sr on disk np 2 saved at step 2, resumed at stage 1 vs accum 2"
out=$("${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 1 --zero 2 --weights bf16-kahan "${disk[@]}" 2>&1) &&
    bad "bf16-kahan weights on disk should be refused"
echo "$out" | grep -q "bf16-kahan weights keep their home" || bad "bf16-kahan on disk: the refusal should say why ($out)"

# ---- 2. 16-bit gradient homes -------------------------------------------------------------------
np 2 g0bf16 --steps 4 --batch 2 --zero 0 --grad-home bf16 "${host[@]}"
for z in 1 3; do
    np 2 g${z}bf16 --steps 4 --batch 2 --zero $z --grad-home bf16 "${host[@]}"
    same_run "$tmp/g0bf16" "$tmp/g${z}bf16" "zero $z --grad-home bf16 np 2 host vs zero 0"
done
np 2 g0fp16 --steps 4 --batch 2 --zero 0 --grad-home fp16 "${host[@]}" # (implies --loss-scale dynamic)
np 2 gd2fp16 --steps 4 --batch 2 --zero 2 --grad-home fp16 "${disk[@]}"
same_run "$tmp/g0fp16" "$tmp/gd2fp16" "zero 2 --grad-home fp16 np 2 disk vs zero 0 host"
np 3 gt0 --steps 3 --batch 1 --zero 0 --grad-home bf16 --weights bf16-sr "${host[@]}"
np 3 gt3 --steps 3 --batch 1 --zero 3 --grad-home bf16 --weights bf16-sr "${disk[@]}"
same_run "$tmp/gt0" "$tmp/gt3" "zero 3 --grad-home bf16 --weights bf16-sr np 3 disk vs zero 0 host"
np 3 gt1 --steps 3 --batch 1 --zero 1 --grad-home bf16 --weights bf16-sr "${disk[@]}"
same_run "$tmp/gt0" "$tmp/gt1" "zero 1 --grad-home bf16 --weights bf16-sr np 3 disk vs zero 0 host"
check_mem gd2fp16 2 "zero 2 --grad-home fp16 np 2 disk" "${small[@]}" --batch 2 --zero 2 --grad-home fp16 "${disk[@]}"
check_mem g3bf16 2 "zero 3 --grad-home bf16 np 2 host" "${small[@]}" --batch 2 --zero 3 --grad-home bf16 "${host[@]}"
check_mem gt3 3 "zero 3 --grad-home bf16 --weights bf16-sr np 3 disk" "${small[@]}" --batch 1 --zero 3 --grad-home bf16 --weights bf16-sr "${disk[@]}"
check_mem gt1 3 "zero 1 --grad-home bf16 --weights bf16-sr np 3 disk" "${small[@]}" --batch 1 --zero 1 --grad-home bf16 --weights bf16-sr "${disk[@]}"
# one process's --accum 2 with a bf16 home rounds micro-batch 0's gradients into the home before
# adding micro-batch 1's (no apart sum in 16 bits): at step 1 (the same weights) its norm
# ||round(g0) + g1|| differs from the processes' ||g0 + g1|| by at most ||round(g0) - g0|| <=
# 2^-8 ||g0|| (bf16's unit roundoff; the norms are of the mean, / 2), plus fp32's order
one ga --steps 1 --batch 2 --accum 2 --grad-home bf16 "${host[@]}"
one g0n --steps 1 --batch 2 --accum 1 "${host[@]}" # ||g0||: micro-batch 0 alone
python3 - "$tmp/ga.jsonl" "$tmp/g3bf16.0.jsonl" "$tmp/g0n.jsonl" <<'PY' || bad "one process's --accum 2 with a bf16 home: the first step's norm is outside the rounding's bound"
import json, sys
one, zero3, g0 = (json.loads(open(p).readline())["grad_norm"] for p in sys.argv[1:4])
bound = 2.0 ** -8 * g0 / 2 + 1e-6 * zero3
print("step 1 norms: one process --accum 2 %.9g, zero 3 np 2 %.9g; |diff| %.3g, bound %.3g" % (one, zero3, abs(one - zero3), bound))
sys.exit(0 if abs(one - zero3) <= bound else 1)
PY

# ---- 3. loss scaling ----------------------------------------------------------------------------
one ld --steps 4 --batch 2 --accum 2 --zero 0 --loss-scale dynamic --loss-scale-window 2 "${host[@]}"
np 2 ld2 --steps 4 --batch 2 --zero 2 --loss-scale dynamic --loss-scale-window 2 "${host[@]}"
same_run "$tmp/ld" "$tmp/ld2" "zero 2 --loss-scale dynamic np 2 vs accum 2"
one lf --steps 4 --batch 2 --accum 2 --zero 0 --loss-scale 1024 "${disk[@]}"
np 2 lf3 --steps 4 --batch 2 --zero 3 --loss-scale 1024 "${disk[@]}"
same_run "$tmp/lf" "$tmp/lf3" "zero 3 --loss-scale 1024 np 2 disk vs accum 2"
# fp16 homes, 2^17 growing every clean step: overflows on some steps (on rank 0's range or not)
ov=(--batch 1 --grad-home fp16 --loss-scale dynamic --loss-scale-init 131072 --loss-scale-window 1 "${host[@]}")
np 3 o0 --steps 8 --zero 0 "${ov[@]}"
python3 - "$tmp/o0.0.jsonl" <<'PY' || bad "fp16 with a scale of 2^17: expected skipped and applied steps both"
import json, sys
s = [json.loads(l)["skipped"] for l in open(sys.argv[1])]
print("stage 0 skipped per step:", s)
sys.exit(0 if 0 < sum(x > 0 for x in s) < len(s) else 1)
PY
for z in 1 3; do
    np 3 o$z --steps 8 --zero $z "${ov[@]}"
    same_run "$tmp/o0" "$tmp/o$z" "zero $z fp16 homes with overflowing steps np 3 vs zero 0"
    python3 - "$tmp/o0.0.jsonl" "$tmp/o$z".{0,1,2}.jsonl <<'PY' || bad "zero $z: a rank's loss scale or skips differ from stage 0's"
import json, sys
seq = [[(j["loss_scale"], j["skipped"]) for j in map(json.loads, open(p))] for p in sys.argv[1:]]
sys.exit(0 if all(s == seq[0] for s in seq) else 1)
PY
done
np 3 o3s --steps 2 --zero 3 "${ov[@]}"
np 3 o3r --steps 8 --zero 3 "${ov[@]}" --resume "$tmp/o3s"
same_run "$tmp/o0" "$tmp/o3r" "zero 3 fp16 homes np 3 saved at step 2 (two skipped steps), resumed (the scaler's state) vs zero 0"
check_mem o1 3 "zero 1 --grad-home fp16 np 3 host" "${small[@]}" --batch 1 --zero 1 --grad-home fp16 "${host[@]}"
ls "$TMPDIR" | grep -q "hpt-zero3-rank" && bad "a rank's scratch checkpoint was left behind"

[ $fail = 0 ] && echo "test_zero_engine16: all passed"
exit $((fail > 0))
