#!/usr/bin/env bash
# test_zero_engine.sh HPTRAIN: the offload engine under many processes (docs/zero_engine.md).
#  Stage 0 (every process holds the whole model in the engine's homes; each block's gradients
#  summed over the processes in rank order at the engine's gradient-done point):
#  1. exact mode: mpirun -np 2 with --offload host and with --offload disk writes the state.bin
#     and model.bin of one process with --accum 2 --zero 0 (in memory, and with the engine:
#     its homes sum the micro-batches apart), byte for byte, with the same losses; -np 3 --batch 1
#     against --accum 3 (unequal chunks);
#  2. the fused update: with clipping off it is the exact update, so -np 2 --fused-update (host,
#     disk) writes the model.bin of one process with --accum 2 --zero 0, and its state.bin up to
#     the header's previous-step norm (which exact runs do not keep), whose value is the one
#     process's last gradient norm; with clipping (by the previous step's norm) host, disk and
#     no offload write the same state;
#  3. 8-bit AdamW state and bf16-sr weights in the engine, the same bits as their twins;
#  4. per-process memory: measured = estimated per tier (device, host, disk);
#  9. --accum 2 per process with the engine: stage 0 (host, disk) writes the bits of the in-memory
#     trainer's np 2 --accum 2, stages 1-3 (disk; np 3 host) the model.bin and losses of the
#     in-memory --zero 2 --accum 2 (the same order of sums); measured = estimated;
#  5. refusals: --accum with many processes and the engine's gradients on the device; a one-process apart sum where the
#     engine has no gradient slot or a 16-bit gradient home; --zero 3 with --offload none; what
#     stages 1-3 in the engine still refuse (bf16 weights on disk, 16-bit gradient homes, 8-bit
#     state on disk: the engine's own rule);
#  7. stages 1 and 2 (--zero 1|2): np 2 (host, disk) and np 3 (disk; host with recompute) write
#     the bits of one process with --accum N --zero 0, fused too (as in 2); a stage-2 checkpoint
#     resumes at stage 1 and in one process; measured = estimated per tier; the disk homes are
#     the mix of stage 0's and stage 3's their sharding implies; the bytes sent per step are the
#     paper's 2 x (plus the norm's chunk sums);
#  8. --weights bf16-sr (memory homes): stage 3 np 2 (host), np 3 (gradients and moments on
#     disk), fused, and a checkpoint resumed; stages 1, 2 np 2 (host), stage 2 np 3 (disk) and
#     fused; all with one process's bits; measured = estimated (bf16-kahan, 8-bit state and the
#     other optimizers: test_zero_engine8.sh);
#  6. stage 3 (--zero 3): each rank's homes hold its shard; np 2 (host, disk, recompute) and np 3
#     (disk) write the bits of one process with --accum N --zero 0, fused too (as in 2); a
#     checkpoint gathered at stage 3 resumes at stage 3 and in one process with the uninterrupted
#     run's bits; memory per process measured = estimated (estimate --zero 3 --procs N), the disk
#     homes about 1/N of stage 0's; the bytes sent per step are the volume the design implies.
# Skips (exit 77 as SKIP) where mpirun is not installed or the build has no MPI.
set -u
bin=$1
. "$(dirname "$0")/lib.sh"     # $tmp, bad, fail
. "$(dirname "$0")/mpi_lib.sh" # SKIP without mpirun; $mpi, mpi_shard
mpi_shard "$tmp/train_000.bin"
# the ranks' scratch checkpoints (stages 1-3) go here, not among other runs' in /tmp
export TMPDIR="$tmp/scratch"
mkdir -p "$TMPDIR"
mkdir -p "$tmp/disk"
shape="gpt2:L=2,C=64,NH=4,V=64,T=32"
args=(--model "$shape" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --warmup 2 --quiet)
host=(--offload host)
disk=(--offload disk --offload-dir "$tmp/disk")
losses() { python3 -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1])))" "$1"; }
same_run() { # same_run DIR_A DIR_B WHAT
    cmp -s "$(state_of "$1")" "$(state_of "$2")" || bad "$3: state.bin differs"
    cmp -s "$1/model.bin" "$2/model.bin" || bad "$3: model.bin differs"
}
one() { # one NAME ARGS...: one process
    local n=$1; shift
    "$bin" train "${args[@]}" "$@" --save "$tmp/$n" --log "$tmp/$n.jsonl" 2>"$tmp/$n.err" ||
        { bad "$n"; tail -3 "$tmp/$n.err"; }
}
np() { # np N NAME ARGS...: N processes
    local N=$1 n=$2; shift 2
    "${mpi[@]}" -np "$N" "$bin" train "${args[@]}" "$@" --save "$tmp/$n" --log "$tmp/$n.jsonl" 2>"$tmp/$n.err" ||
        { bad "$n"; tail -3 "$tmp/$n.err"; }
}

# ---- 1. stage 0, exact mode -----------------------------------------------------------------
one one2 --steps 4 --batch 2 --accum 2 --zero 0
one one2h --steps 4 --batch 2 --accum 2 --zero 0 "${host[@]}"
one one2d --steps 4 --batch 2 --accum 2 --zero 0 "${disk[@]}"
same_run "$tmp/one2" "$tmp/one2h" "one process: the engine's apart sum (host) vs in memory"
same_run "$tmp/one2" "$tmp/one2d" "one process: the engine's apart sum (disk) vs in memory"
np 2 np2h --steps 4 --batch 2 "${host[@]}"
np 2 np2d --steps 4 --batch 2 "${disk[@]}"
same_run "$tmp/one2" "$tmp/np2h" "np 2 --offload host vs accum 2"
same_run "$tmp/one2" "$tmp/np2d" "np 2 --offload disk vs accum 2"
[ "$(losses "$tmp/one2.jsonl")" = "$(losses "$tmp/np2h.jsonl")" ] || bad "np 2 host: losses differ from accum 2's"
one one3 --steps 3 --batch 1 --accum 3 --zero 0
np 3 np3h --steps 3 --batch 1 "${host[@]}"
same_run "$tmp/one3" "$tmp/np3h" "np 3 --offload host vs accum 3"

# ---- 2. stage 0, the fused update -------------------------------------------------------------
one one2c0 --steps 4 --batch 2 --accum 2 --zero 0 --grad-clip 0
np 2 np2fh --steps 4 --batch 2 --grad-clip 0 "${host[@]}" --fused-update
np 2 np2fd --steps 4 --batch 2 --grad-clip 0 "${disk[@]}" --fused-update
same_but_norm "$tmp/one2c0" "$tmp/np2fh" "np 2 fused host (no clipping) vs accum 2"
same_but_norm "$tmp/one2c0" "$tmp/np2fd" "np 2 fused disk (no clipping) vs accum 2"
cmp -s "$tmp/np2fh/state.bin" "$tmp/np2fd/state.bin" || bad "np 2 fused: host and disk states differ"
python3 - "$tmp/np2fh/state.bin" "$tmp/one2c0.jsonl" <<'PY' || bad "np 2 fused: the saved norm is not the one process's"
import json, struct, sys
norm = struct.unpack("<f", open(sys.argv[1], "rb").read()[216:220])[0]
last = json.loads(open(sys.argv[2]).readlines()[-1])["grad_norm"]
print("np 2 fused: previous-step norm %.7g, one process's last norm %.7g" % (norm, last))
sys.exit(0 if abs(norm - last) <= 1e-5 * last else 1)
PY
np 2 np2fhc --steps 4 --batch 2 "${host[@]}" --fused-update
np 2 np2fdc --steps 4 --batch 2 "${disk[@]}" --fused-update
np 2 np2fc --steps 4 --batch 2 --fused-update
same_run "$tmp/np2fhc" "$tmp/np2fdc" "np 2 fused, clipped: host vs disk"
same_run "$tmp/np2fhc" "$tmp/np2fc" "np 2 fused, clipped: host vs no offload"

# ---- 3. 8-bit state, bf16 weights -------------------------------------------------------------
one one8 --steps 4 --batch 2 --accum 2 --zero 0 --state-bits 8
np 2 np8h --steps 4 --batch 2 --state-bits 8 "${host[@]}"
same_run "$tmp/one8" "$tmp/np8h" "np 2 --state-bits 8 --offload host vs accum 2"
one one8c0 --steps 4 --batch 2 --accum 2 --zero 0 --state-bits 8 --grad-clip 0
np 2 np8fh --steps 4 --batch 2 --state-bits 8 --grad-clip 0 "${host[@]}" --fused-update
same_but_norm "$tmp/one8c0" "$tmp/np8fh" "np 2 --state-bits 8 fused host vs accum 2"
one onebf --steps 4 --batch 2 --accum 2 --zero 0 --weights bf16-sr "${host[@]}"
np 2 npbf --steps 4 --batch 2 --weights bf16-sr "${host[@]}"
same_run "$tmp/onebf" "$tmp/npbf" "np 2 --weights bf16-sr --offload host vs accum 2"

# ---- 4. memory per process: measured = estimated, per tier --------------------------------
check_mem() { # LOG WHAT ESTIMATE-ARGS...
    local log=$1 what=$2; shift 2
    python3 - "$log" "$what" "$bin" "$@" <<'PY' || bad "$what: measured != estimated"
import json, subprocess, sys
log, what, b = sys.argv[1:4]
e = json.loads(subprocess.check_output([b, "estimate", "--json"] + sys.argv[4:]))
got = json.loads(open(log).readlines()[-1])
est = e["peak_bytes_by_tier"]
m = {"device": got["mem_peak_bytes"], "host": got["host_peak_bytes"], "disk": got["disk_peak_bytes"]}
print("%s: per process measured %s, estimated %s" % (what, m, est))
sys.exit(0 if all(m[t] == est[t] for t in m) else 1)
PY
}
check_mem "$tmp/np2d.jsonl" "np 2 --offload disk" --model "$shape" --seq 32 --batch 2 "${disk[@]}"
check_mem "$tmp/one2h.jsonl" "one process --accum 2 --zero 0 --offload host" --model "$shape" --seq 32 --batch 2 --accum 2 --zero 0 "${host[@]}"

# ---- 6. stage 3 (--zero 3): each rank's homes hold its shard of every block ---------------
# four blocks, two slots: the backward reloads (and gathers again) two of them
args4=(--model "gpt2:L=4,C=64,NH=4,V=64,T=32" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --warmup 2 --quiet)
one4() { local n=$1; shift; "$bin" train "${args4[@]}" "$@" --save "$tmp/$n" --log "$tmp/$n.jsonl" 2>"$tmp/$n.err" || { bad "$n"; tail -3 "$tmp/$n.err"; }; }
np4() { local N=$1 n=$2; shift 2
    "${mpi[@]}" -np "$N" "$bin" train "${args4[@]}" "$@" --save "$tmp/$n" --log "$tmp/$n.jsonl" 2>"$tmp/$n.err" ||
        { bad "$n"; tail -3 "$tmp/$n.err"; }
}
one4 z1 --steps 4 --batch 2 --accum 2 --zero 0
np4 2 z3h --steps 4 --batch 2 --zero 3 "${host[@]}"
np4 2 z3d --steps 4 --batch 2 --zero 3 "${disk[@]}"
np4 2 z3r --steps 4 --batch 2 --zero 3 "${host[@]}" --recompute full --max-active-layers 3 --prefetch 2
same_run "$tmp/z1" "$tmp/z3h" "zero 3, np 2, host homes vs accum 2"
same_run "$tmp/z1" "$tmp/z3d" "zero 3, np 2, disk homes vs accum 2"
same_run "$tmp/z1" "$tmp/z3r" "zero 3, np 2, recompute, K 3 vs accum 2"
[ "$(losses "$tmp/z1.jsonl")" = "$(losses "$tmp/z3d.jsonl")" ] || bad "zero 3 disk: losses differ from accum 2's"
one4 z1n3 --steps 3 --batch 1 --accum 3 --zero 0
np4 3 z3n3 --steps 3 --batch 1 --zero 3 "${disk[@]}"
same_run "$tmp/z1n3" "$tmp/z3n3" "zero 3, np 3, disk homes vs accum 3"
HPT_DIST_PIECE=999 "${mpi[@]}" -x HPT_DIST_PIECE -np 3 "$bin" train "${args4[@]}" --steps 3 --batch 1 --zero 3 "${host[@]}" \
    --save "$tmp/z3n3p" 2>"$tmp/z3n3p.err" || { bad "zero 3 np 3 small rounds"; tail -3 "$tmp/z3n3p.err"; }
same_run "$tmp/z1n3" "$tmp/z3n3p" "zero 3, np 3, the reduce-scatter in rounds of 333 floats vs accum 3"
# fused: no clipping against one process; clipped (previous step's norm) against stage 0
one4 z1c0 --steps 4 --batch 2 --accum 2 --zero 0 --grad-clip 0
np4 2 z3fh --steps 4 --batch 2 --zero 3 --grad-clip 0 "${host[@]}" --fused-update
np4 2 z3fd --steps 4 --batch 2 --zero 3 --grad-clip 0 "${disk[@]}" --fused-update
same_but_norm "$tmp/z1c0" "$tmp/z3fh" "zero 3 fused host (no clipping) vs accum 2"
same_but_norm "$tmp/z1c0" "$tmp/z3fd" "zero 3 fused disk (no clipping) vs accum 2"
np4 2 z0fc --steps 4 --batch 2 "${host[@]}" --fused-update
np4 2 z3fc --steps 4 --batch 2 --zero 3 "${disk[@]}" --fused-update
same_run "$tmp/z0fc" "$tmp/z3fc" "fused, clipped: zero 3 (disk) vs zero 0 (host)"
# save_resume SAVE_STAGE RESUME_STAGE: 2 processes save at step 2 at SAVE_STAGE (disk homes);
# resumed at RESUME_STAGE (host homes) and in one process, both end with z1's bits (4 steps
# uninterrupted), and no rank's scratch checkpoint is left behind
save_resume() {
    local d=zs$1 r=zr$1$2
    np4 2 "$d" --steps 2 --batch 2 --zero "$1" "${disk[@]}"
    np4 2 "$r" --steps 4 --batch 2 --zero "$2" "${host[@]}" --resume "$tmp/$d"
    same_run "$tmp/z1" "$tmp/$r" "zero $1 saved at step 2 (disk), resumed at zero $2 (host)"
    one4 "${r}one" --steps 4 --batch 2 --accum 2 --zero 0 --resume "$tmp/$d"
    same_run "$tmp/z1" "$tmp/${r}one" "zero $1 saved at step 2, resumed in one process"
    ls "$TMPDIR" | grep -q "hpt-zero3-rank" && bad "zero $1: a rank's scratch checkpoint was left behind"
}
# checkpoints: the collective gather writes one process's files; they resume at stage 3 and in
# one process
save_resume 3 3
# memory per process: measured = estimated per tier; the homes about 1/N of stage 0's
np4 2 z0d --steps 2 --batch 2 "${disk[@]}"
args=("${args4[@]}")
check_mem "$tmp/z3d.jsonl" "zero 3 np 2 disk" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 "${disk[@]}" --zero 3 --procs 2
check_mem "$tmp/z3n3.jsonl" "zero 3 np 3 disk" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 1 "${disk[@]}" --zero 3 --procs 3
check_mem "$tmp/z3h.jsonl" "zero 3 np 2 host" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 "${host[@]}" --zero 3 --procs 2
python3 - "$tmp/z0d.jsonl" "$tmp/z3d.jsonl" "$tmp/z3n3.jsonl" <<'PY' || bad "zero 3: the disk homes are not about 1/N of stage 0's"
import json, sys
d = [json.loads(open(p).readlines()[-1])["disk_peak_bytes"] for p in sys.argv[1:]]
print("disk homes per process: stage 0 %d, stage 3 np 2 %d (%.3f), np 3 %d (%.3f)" % (d[0], d[1], d[1] / d[0], d[2], d[2] / d[0]))
# a shard rounds up to 4096 bytes and to a chunk start: 1/N plus a few percent on this small block
sys.exit(0 if 0.5 <= d[1] / d[0] < 0.55 and 1 / 3 <= d[2] / d[0] < 0.37 else 1)
PY
# bytes sent per step by rank 0 (the layer's count, step 2 to 3: the last step's has the save's):
# forward gathers of the 4 blocks, backward gathers of the 2 not left in the slots, reduce-scatter
# of the 4 blocks' gradients, the non-block gradients' all-reduce, the norm's chunk sums
python3 - "$tmp/z3d.jsonl" <<'PY' || bad "zero 3: bytes sent per step differ from the volume expected"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = rows[2]["dist_sent_bytes"] - rows[1]["dist_sent_bytes"]
N, L, K, C, V, T = 2, 4, 2, 64, 128, 32  # V: padded vocabulary
bn = 12 * C * C + 13 * C
nb = V * C + T * C + 2 * C
want = 4 * (N - 1) / N * ((3 * L - K) * bn + 2 * nb) + L * 12 * 64 * 8 * (N - 1)
print("zero 3 np 2: sent %d bytes per step, expected %.0f (%.4f)" % (got, want, got / want))
sys.exit(0 if abs(got / want - 1) < 0.01 else 1)
PY

# ---- 7. stages 1 and 2 (--zero 1|2): m and v sharded (and at 2 the gradients' homes), the weights
# whole in every rank's homes, each owner's updated range all-gathered before the write-back ----
for st in 1 2; do
    np4 2 "z${st}h" --steps 4 --batch 2 --zero $st "${host[@]}"
    np4 2 "z${st}d" --steps 4 --batch 2 --zero $st "${disk[@]}"
    same_run "$tmp/z1" "$tmp/z${st}h" "zero $st, np 2, host homes vs accum 2"
    same_run "$tmp/z1" "$tmp/z${st}d" "zero $st, np 2, disk homes vs accum 2"
    np4 3 "z${st}n3" --steps 3 --batch 1 --zero $st "${disk[@]}"
    same_run "$tmp/z1n3" "$tmp/z${st}n3" "zero $st, np 3, disk homes vs accum 3"
    np4 2 "z${st}fh" --steps 4 --batch 2 --zero $st --grad-clip 0 "${host[@]}" --fused-update
    np4 2 "z${st}fd" --steps 4 --batch 2 --zero $st --grad-clip 0 "${disk[@]}" --fused-update
    same_but_norm "$tmp/z1c0" "$tmp/z${st}fh" "zero $st fused host (no clipping) vs accum 2"
    same_but_norm "$tmp/z1c0" "$tmp/z${st}fd" "zero $st fused disk (no clipping) vs accum 2"
    np4 2 "z${st}fc" --steps 4 --batch 2 --zero $st "${disk[@]}" --fused-update
    same_run "$tmp/z0fc" "$tmp/z${st}fc" "fused, clipped: zero $st (disk) vs zero 0 (host)"
done
[ "$(losses "$tmp/z1.jsonl")" = "$(losses "$tmp/z2d.jsonl")" ] || bad "zero 2 disk: losses differ from accum 2's"
np4 3 z2n3r --steps 3 --batch 1 --zero 2 "${host[@]}" --recompute full --max-active-layers 3 --prefetch 2
same_run "$tmp/z1n3" "$tmp/z2n3r" "zero 2, np 3, host homes, recompute, K 3 vs accum 3"
# a checkpoint saved at stage 2 resumes at stage 1 and in one process with the uninterrupted bits
save_resume 2 1
# memory per process: measured = estimated per tier; the homes: stage 1 keeps the weights and the
# gradients whole and shards m and v (2 of 4 homes as stage 3's), stage 2 the weights whole
check_mem "$tmp/z1d.jsonl" "zero 1 np 2 disk" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 "${disk[@]}" --zero 1 --procs 2
check_mem "$tmp/z2h.jsonl" "zero 2 np 2 host" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 "${host[@]}" --zero 2 --procs 2
check_mem "$tmp/z2n3.jsonl" "zero 2 np 3 disk" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 1 "${disk[@]}" --zero 2 --procs 3
check_mem "$tmp/z1fd.jsonl" "zero 1 np 2 disk fused" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 "${disk[@]}" --zero 1 --procs 2 --fused-update
python3 - "$tmp/z0d.jsonl" "$tmp/z3d.jsonl" "$tmp/z1d.jsonl" "$tmp/z2d.jsonl" <<'PY' || bad "zero 1, 2: the disk homes are not the mix of stage 0's and stage 3's"
import json, sys
z0, z3, z1, z2 = [json.loads(open(p).readlines()[-1])["disk_peak_bytes"] for p in sys.argv[1:]]
print("disk homes per process, np 2: stage 0 %d, 1 %d (%.3f), 2 %d (%.3f), 3 %d (%.3f)" % (z0, z1, z1 / z0, z2, z2 / z0, z3, z3 / z0))
# four homes of the same size each (weights, gradients, m, v): stage 1 has 2 whole and 2 sharded
sys.exit(0 if 2 * z1 == z0 + z3 and 4 * z2 == z0 + 3 * z3 else 1)
PY
# bytes sent per step by rank 0 (step 2 to 3): the reduce-scatter of the 4 blocks' gradients and
# the all-gather of their updated weights (the paper's 2 x), the non-block all-reduce, the norm's
# chunk sums
for st in 1 2; do
python3 - "$tmp/z${st}d.jsonl" "$st" <<'PY' || bad "zero $st: bytes sent per step differ from the volume expected"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = rows[2]["dist_sent_bytes"] - rows[1]["dist_sent_bytes"]
N, L, C, V, T = 2, 4, 64, 128, 32  # V: padded vocabulary
bn = 12 * C * C + 13 * C
nb = V * C + T * C + 2 * C
want = 4 * 2 * (N - 1) / N * (L * bn + nb) + L * 12 * 64 * 8 * (N - 1)
print("zero %s np 2: sent %d bytes per step, expected %.0f (%.4f)" % (sys.argv[2], got, want, got / want))
sys.exit(0 if abs(got / want - 1) < 0.01 else 1)
PY
done

# ---- 8. stage 3 with bf16-sr weights: each rank's bf16 home holds its shard; stochastic
# rounding's noise by the one process's element index, so the one process's bits -------------
one4 bf1 --steps 4 --batch 2 --accum 2 --zero 0 --weights bf16-sr "${host[@]}"
np4 2 bf3h --steps 4 --batch 2 --zero 3 --weights bf16-sr "${host[@]}"
same_run "$tmp/bf1" "$tmp/bf3h" "zero 3 bf16-sr, np 2, host homes vs accum 2"
one4 bf1n3 --steps 3 --batch 1 --accum 3 --zero 0 --weights bf16-sr "${host[@]}"
np4 3 bf3n3 --steps 3 --batch 1 --zero 3 --weights bf16-sr --offload params=host,grads=disk,optim=disk --offload-dir "$tmp/disk"
same_run "$tmp/bf1n3" "$tmp/bf3n3" "zero 3 bf16-sr, np 3, gradients and moments on disk vs accum 3"
one4 bf1c0 --steps 4 --batch 2 --accum 2 --zero 0 --weights bf16-sr --grad-clip 0 "${host[@]}"
np4 2 bf3f --steps 4 --batch 2 --zero 3 --weights bf16-sr --grad-clip 0 "${host[@]}" --fused-update
same_but_norm "$tmp/bf1c0" "$tmp/bf3f" "zero 3 bf16-sr fused host (no clipping) vs accum 2"
np4 2 bf3s --steps 2 --batch 2 --zero 3 --weights bf16-sr "${host[@]}"
np4 2 bf3r --steps 4 --batch 2 --zero 3 --weights bf16-sr "${host[@]}" --resume "$tmp/bf3s"
same_run "$tmp/bf1" "$tmp/bf3r" "zero 3 bf16-sr saved at step 2, resumed at zero 3"
for st in 1 2; do # stages 1, 2: the bf16 home whole, each owner's range gathered widened
    np4 2 "bf${st}h" --steps 4 --batch 2 --zero $st --weights bf16-sr "${host[@]}"
    same_run "$tmp/bf1" "$tmp/bf${st}h" "zero $st bf16-sr, np 2, host homes vs accum 2"
done
np4 3 bf2n3 --steps 3 --batch 1 --zero 2 --weights bf16-sr --offload params=host,grads=disk,optim=disk --offload-dir "$tmp/disk"
same_run "$tmp/bf1n3" "$tmp/bf2n3" "zero 2 bf16-sr, np 3, gradients and moments on disk vs accum 3"
np4 2 bf2f --steps 4 --batch 2 --zero 2 --weights bf16-sr --grad-clip 0 "${host[@]}" --fused-update
same_but_norm "$tmp/bf1c0" "$tmp/bf2f" "zero 2 bf16-sr fused host (no clipping) vs accum 2"
check_mem "$tmp/bf2h.jsonl" "zero 2 bf16-sr np 2 host" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 "${host[@]}" --weights bf16-sr --zero 2 --procs 2
check_mem "$tmp/bf3h.jsonl" "zero 3 bf16-sr np 2 host" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 "${host[@]}" --weights bf16-sr --zero 3 --procs 2
check_mem "$tmp/bf3n3.jsonl" "zero 3 bf16-sr np 3" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 1 --offload params=host,grads=disk,optim=disk --offload-dir "$tmp/disk" --weights bf16-sr --zero 3 --procs 3

# ---- 9. --accum K per process with the engine: each process sums its micro-batches apart in its
# homes. Stage 0 sums the processes' K-sums (rank order) at the last micro-batch: the grouping of
# the in-memory trainer's N processes x --accum K (one process's --accum N*K adds sequentially:
# not bit for bit, docs/zero.md). Stages 1-3 reduce-scatter each micro-batch and sum over k in
# the shards, the non-block gradients all-reduced per micro-batch too: in-memory stage 2's order.
np4 2 acc_m0 --steps 4 --batch 1 --accum 2
np4 2 acc_e0h --steps 4 --batch 1 --accum 2 "${host[@]}"
np4 2 acc_e0d --steps 4 --batch 1 --accum 2 "${disk[@]}"
same_run "$tmp/acc_m0" "$tmp/acc_e0h" "np 2 --accum 2, engine (host) vs in memory"
same_run "$tmp/acc_m0" "$tmp/acc_e0d" "np 2 --accum 2, engine (disk) vs in memory"
np4 2 acc_m2 --steps 4 --batch 1 --accum 2 --zero 2
for st in 1 2 3; do
    np4 2 "acc_e${st}" --steps 4 --batch 1 --accum 2 --zero $st "${disk[@]}"
    cmp -s "$tmp/acc_m2/model.bin" "$tmp/acc_e${st}/model.bin" || bad "np 2 --accum 2 --zero $st (disk): model.bin differs from in-memory --zero 2's"
    [ "$(losses "$tmp/acc_m2.jsonl")" = "$(losses "$tmp/acc_e${st}.jsonl")" ] || bad "np 2 --accum 2 --zero $st: losses differ from in-memory --zero 2's"
done
np4 3 acc_m2n3 --steps 3 --batch 1 --accum 2 --zero 2
np4 3 acc_e3n3 --steps 3 --batch 1 --accum 2 --zero 3 "${host[@]}"
cmp -s "$tmp/acc_m2n3/model.bin" "$tmp/acc_e3n3/model.bin" || bad "np 3 --accum 2 --zero 3 (host): model.bin differs from in-memory --zero 2's"
# the two orders differ in the last bits: the test tells them apart
[ "$(losses "$tmp/acc_m0.jsonl")" = "$(losses "$tmp/acc_m2.jsonl")" ] && cmp -s "$tmp/acc_m0/model.bin" "$tmp/acc_m2/model.bin" &&
    echo "note: stage 0's and stage 2's accumulation orders gave the same bits on this data"
check_mem "$tmp/acc_e3.jsonl" "zero 3 np 2 --accum 2 disk" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 1 --accum 2 "${disk[@]}" --zero 3 --procs 2
check_mem "$tmp/acc_e0d.jsonl" "zero 0 np 2 --accum 2 disk" --model "gpt2:L=4,C=64,NH=4,V=64,T=32" --seq 32 --batch 1 --accum 2 "${disk[@]}" --zero 0 --procs 2

# ---- 5. refusals ------------------------------------------------------------------------------
# (--accum K per process runs with the gradients' home off the device: 9 below)
out=$("${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 1 --accum 2 --offload params=host 2>&1) &&
    bad "np 2 --accum 2 with the engine's gradients on the device should be refused"
echo "$out" | grep -q "grads=host|disk" || bad "np 2 --accum 2 --offload params=host: the refusal should name the fix ($out)"
out=$("$bin" train "${args[@]}" --steps 2 --batch 1 --accum 2 --zero 0 --offload params=host 2>&1) &&
    bad "an apart sum with the gradients' home on the device should be refused"
echo "$out" | grep -q "grads=host|disk" || bad "apart sum, device gradients: the refusal should name the fix ($out)"
out=$("$bin" train "${args[@]}" --steps 2 --batch 1 --accum 2 --zero 0 "${host[@]}" --grad-home bf16 2>&1) &&
    bad "an apart sum with a 16-bit gradient home should be refused"

out=$("${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 1 --zero 3 --offload none 2>&1) &&
    bad "--zero 3 without the engine should be refused" # (--zero 3 alone: host homes, test_zero.sh)
echo "$out" | grep -q "offload" || bad "--zero 3 without the engine: the refusal should name --offload ($out)"
# (8-bit state, Lion, SGD, Adam-mini and bf16-kahan weights run at stages 1-3: test_zero_engine8.sh)

refused() { # refused WHAT PATTERN ARGS...: N = 2 refuses ARGS, naming PATTERN
    local what=$1 pat=$2; shift 2
    out=$("${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 1 "$@" 2>&1) && bad "$what should be refused"
    echo "$out" | grep -q -- "$pat" || bad "$what: the refusal should name $pat ($out)"
}
# (bf16-sr weights on disk, 16-bit gradient homes and loss scaling run at stages 1-3:
# test_zero_engine16.sh); bf16-kahan on disk is refused in any number of processes
refused "--zero 2 --weights bf16-kahan on disk" "bf16-kahan weights keep their home" --zero 2 "${disk[@]}" --weights bf16-kahan
refused "--zero 1 --state-bits 8 with the state on disk" "optim=device or optim=host" --zero 1 "${disk[@]}" --state-bits 8

[ $fail = 0 ] && echo "test_zero_engine: all passed"
exit $((fail > 0))
