#!/usr/bin/env bash
# test_zero.sh HPTRAIN [HPTRAIN_ASAN]: data parallel over MPI (docs/zero.md), on one machine.
#  1. the same bits: `mpirun -np 2 hptrain train --batch 2` writes the state.bin and model.bin of
#     one process with `--batch 2 --accum 2 --zero 0`, byte for byte, with the same losses; so
#     does -np 3 --batch 1 against --accum 3 (chunks of unequal length), also with the layer's
#     exchange cut into many small rounds (HPT_DIST_PIECE), and with 8-bit AdamW state and full
#     recomputation; `mpirun -np 1` writes the bits of no mpirun; against one batch of 4 (no
#     accumulation) the sums' order differs, so not bit for bit: the weights after 6 AdamW steps
#     agree within 1e-4 of the largest weight (measured: 8e-6; AdamW's m/sqrt(v) turns a last-bit
#     difference of a near-zero gradient into up to lr per step, so the bound is loose by nature).
#  2. checkpoints: a run of 2 processes stopped at step 3 resumes in 1 process (--accum 2), and
#     a run of 1 process resumes in 2, both ending with the uninterrupted run's bits;
#  3. ZeRO stages 1 and 2: N = 2, 3 processes at --zero 1|2 write one process's model.bin (--accum
#     N --zero 0) and shards whose concatenation is that process's state.bin, with fp32 and 8-bit
#     AdamW (with recomputation), Adam-mini and 8-bit Lion; sharded checkpoints re-cut 3 -> 1,
#     1 -> 2 (stage 0 -> 2) and 2 -> 3 with the uninterrupted run's bits; a damaged shard is
#     named; every rank's measured device bytes = the estimate for its rank (also as profile
#     reads each rank's --trace 'F.%r.json'); --zero 3 without --offload runs in the engine's
#     host homes (the bits of --zero 3 --offload host); --zero 3 with --offload none and --zero 1
#     with the engine and 8-bit state are refused by name;
#  4. bad input: processes started with different configurations refuse to start, naming the
#     option and both values; a resume with another global batch is refused;
#  5. faults: a rank killed (SIGKILL) mid-run makes mpirun end the others within 60 s with a
#     non-zero status, and the last checkpoint loads and finishes in one process; a rank that
#     hangs (SIGSTOP) makes the others fail with the layer's timeout error (HPT_DIST_TIMEOUT_S).
# The sanitizer binary (when given) runs case 1 once and a --zero 2 run saved and resumed in one
# process, with LeakSanitizer off: Open MPI's own
# allocations live until exit (its leaks are not ours).
# Skips (exit 77 as SKIP) where mpirun is not installed.
set -u
bin=$1
asan=${2:-}
. "$(dirname "$0")/lib.sh"     # $tmp, bad, fail
. "$(dirname "$0")/mpi_lib.sh" # SKIP without mpirun; $mpi, mpi_shard
. "$(dirname "$0")/zero_lib.sh" # same_run, shards_are
mpi_shard "$tmp/train_000.bin"
args=(--model "gpt2:L=2,C=64,NH=4,V=64,T=32" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3
      --warmup 2 --quiet)
losses() { python3 -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1])))" "$1"; }

# ---- 1. the same bits -------------------------------------------------------------------
"$bin" train "${args[@]}" --steps 6 --batch 2 --accum 2 --zero 0 --save "$tmp/one2" --log "$tmp/one2.jsonl" 2>/dev/null || bad "one process, accum 2"
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 6 --batch 2 --save "$tmp/np2" --log "$tmp/np2.jsonl" 2>"$tmp/np2.err" ||
    { bad "mpirun -np 2"; cat "$tmp/np2.err"; }
same_run "$tmp/one2" "$tmp/np2" "np 2 vs accum 2"
[ "$(losses "$tmp/one2.jsonl")" = "$(losses "$tmp/np2.jsonl")" ] || bad "np 2: losses differ from accum 2's"
[ "$(wc -l <"$tmp/np2.jsonl")" = 6 ] || bad "np 2: rank 0's log should have 6 steps"

"$bin" train "${args[@]}" --steps 4 --batch 1 --accum 3 --zero 0 --save "$tmp/one3" 2>/dev/null || bad "one process, accum 3"
"${mpi[@]}" -np 3 "$bin" train "${args[@]}" --steps 4 --batch 1 --save "$tmp/np3" 2>/dev/null || bad "mpirun -np 3"
same_run "$tmp/one3" "$tmp/np3" "np 3 vs accum 3"
HPT_DIST_PIECE=999 "${mpi[@]}" -x HPT_DIST_PIECE -np 3 "$bin" train "${args[@]}" --steps 4 --batch 1 --save "$tmp/np3p" 2>/dev/null ||
    bad "mpirun -np 3, small rounds"
same_run "$tmp/one3" "$tmp/np3p" "np 3 in rounds of 333 floats vs accum 3"
# with 8-bit AdamW state and full recomputation (each rank's optimizer runs on the same sums)
tech=(--state-bits 8 --recompute full)
"$bin" train "${args[@]}" "${tech[@]}" --steps 4 --batch 2 --accum 2 --zero 0 --save "$tmp/one8" 2>/dev/null || bad "one process, 8-bit"
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" "${tech[@]}" --steps 4 --batch 2 --save "$tmp/np8" 2>/dev/null || bad "mpirun -np 2, 8-bit"
same_run "$tmp/one8" "$tmp/np8" "np 2 vs accum 2 with --state-bits 8 --recompute full"
# the difference to one process is the summation order, nothing else: 1 process, 1 rank
"${mpi[@]}" -np 1 "$bin" train "${args[@]}" --steps 4 --batch 3 --save "$tmp/np1" 2>/dev/null || bad "mpirun -np 1"
"$bin" train "${args[@]}" --steps 4 --batch 3 --save "$tmp/plain1" 2>/dev/null || bad "one process, batch 3"
same_run "$tmp/plain1" "$tmp/np1" "np 1 vs no mpirun"

"$bin" train "${args[@]}" --steps 6 --batch 4 --save "$tmp/b4" 2>/dev/null || bad "one process, batch 4"
python3 - "$tmp/np2/model.bin" "$tmp/b4/model.bin" <<'PY' || bad "np 2 x batch 2 vs batch 4: weights beyond 1e-4"
import struct, sys
def floats(p):
    b = open(p, "rb").read()[1024:]
    return struct.unpack("<%df" % (len(b) // 4), b)
a, b = floats(sys.argv[1]), floats(sys.argv[2])
worst = max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)
print("np 2 x B 2 vs B 4 after 6 steps: weights differ by %.2e of the largest weight" % worst)
sys.exit(0 if len(a) == len(b) and worst < 1e-4 else 1)
PY

# per-process memory: measured (rank 0's accounted device peak) = estimated, with and without
# the apart sum's buffer (--accum 2 per process)
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 2 --accum 2 --log "$tmp/mem.jsonl" 2>/dev/null || bad "np 2 accum 2"
for a in 1 2; do
    est=$("$bin" estimate --model "gpt2:L=2,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 --accum $a --zero 0 --json |
          python3 -c "import json,sys; print(json.load(sys.stdin)['peak_bytes'])")
    log=$tmp/np2.jsonl; [ $a = 2 ] && log=$tmp/mem.jsonl
    got=$(tail -1 "$log" | python3 -c "import json,sys; print(json.load(sys.stdin)['mem_peak_bytes'])")
    echo "np 2, accum $a per process: device bytes per process measured $got, estimated $est"
    [ "$est" = "$got" ] || bad "np 2 accum $a: measured $got bytes per process, estimated $est"
done

if [ -n "$asan" ] && [ -x "$asan" ]; then
    ASAN_OPTIONS=detect_leaks=0 "${mpi[@]}" -x ASAN_OPTIONS -np 2 "$asan" train "${args[@]}" --steps 6 --batch 2 --save "$tmp/np2asan" 2>"$tmp/asan.err" ||
        { bad "sanitizer build, mpirun -np 2"; tail -20 "$tmp/asan.err"; }
    # its own reference: -O1 code rounds differently from the plain build's -O3 -march=native
    ASAN_OPTIONS=detect_leaks=0 "$asan" train "${args[@]}" --steps 6 --batch 2 --accum 2 --zero 0 --save "$tmp/one2asan" 2>/dev/null ||
        bad "sanitizer build, one process"
    same_run "$tmp/one2asan" "$tmp/np2asan" "sanitizer build np 2 vs accum 2"
    # stage 2: the sharded step, its checkpoint and a re-cut into one process
    ASAN_OPTIONS=detect_leaks=0 "${mpi[@]}" -x ASAN_OPTIONS -np 2 "$asan" train "${args[@]}" --steps 6 --batch 2 --zero 2 --save "$tmp/z2asan" --stop-at 3 2>"$tmp/asan.err" ||
        { bad "sanitizer build, mpirun -np 2 --zero 2"; tail -20 "$tmp/asan.err"; }
    ASAN_OPTIONS=detect_leaks=0 "$asan" train "${args[@]}" --steps 6 --batch 2 --accum 2 --zero 0 --resume "$tmp/z2asan" --save "$tmp/z2asan" 2>"$tmp/asan.err" ||
        { bad "sanitizer build, a --zero 2 checkpoint resumed in one process"; tail -20 "$tmp/asan.err"; }
    same_run "$tmp/one2asan" "$tmp/z2asan" "sanitizer build: np 2 --zero 2 to step 3, then 1 process"
fi

# ---- 2. checkpoints: 2 -> 1 and 1 -> 2 ---------------------------------------------------
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 6 --batch 2 --save "$tmp/r21" --stop-at 3 2>/dev/null
[ -f "$tmp/r21/state.bin" ] || bad "np 2 --stop-at 3 saved nothing"
"$bin" train "${args[@]}" --steps 6 --batch 2 --accum 2 --zero 0 --resume "$tmp/r21" --save "$tmp/r21" 2>/dev/null ||
    bad "resume of a 2-process checkpoint in 1 process"
same_run "$tmp/one2" "$tmp/r21" "2 processes to step 3, then 1"
"$bin" train "${args[@]}" --steps 6 --batch 2 --accum 2 --zero 0 --save "$tmp/r12" --stop-at 3 2>/dev/null
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 6 --batch 2 --resume "$tmp/r12" --save "$tmp/r12" 2>/dev/null ||
    bad "resume of a 1-process checkpoint in 2 processes"
same_run "$tmp/one2" "$tmp/r12" "1 process to step 3, then 2"
out=$("${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 6 --batch 2 --accum 2 --resume "$tmp/r12" 2>&1) &&
    bad "a resume with another global batch (2 x 2 x 2) should be refused"
grep -q "micro-batches per step" <<<"$out" || bad "global-batch refusal: $out"

# ---- 3. ZeRO stages 1 and 2 (sharded optimizer state; stage 2 also the summed gradients) ----
# the same bits at N = 2 and 3, stages 1 and 2, fp32 and 8-bit AdamW with recomputation
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 6 --batch 2 --zero 1 --save "$tmp/z1n2" --log "$tmp/z1n2.jsonl" \
    --trace "$tmp/z1n2.%r.json" 2>/dev/null || bad "np 2 --zero 1"
for r in 0 1; do # each rank's trace: profile estimates that process's own bytes, exactly
    "$bin" profile "$tmp/z1n2.$r.json" >"$tmp/prof.$r" 2>&1
    grep -q "process $r of 2" "$tmp/prof.$r" && grep -q "the run's plan: --zero 1" "$tmp/prof.$r" &&
        grep -qE "for this run as recorded \(measured .*, \+0\.00%\)" "$tmp/prof.$r" ||
        bad "profile of rank $r's --zero 1 trace: $(grep -A3 'what would lower' "$tmp/prof.$r")"
done
cmp -s "$tmp/one2/model.bin" "$tmp/z1n2/model.bin" || bad "np 2 --zero 1: model.bin differs from accum 2's"
[ "$(losses "$tmp/one2.jsonl")" = "$(losses "$tmp/z1n2.jsonl")" ] || bad "np 2 --zero 1: losses differ"
shards_are "$tmp/z1n2" "$tmp/one2/state.bin" "np 2 --zero 1"
[ -f "$tmp/z1n2/state.bin" ] && bad "np 2 --zero 1 wrote a state.bin beside its shards"
"${mpi[@]}" -np 3 "$bin" train "${args[@]}" --steps 4 --batch 1 --zero 2 --save "$tmp/z2n3" 2>/dev/null || bad "np 3 --zero 2"
cmp -s "$tmp/one3/model.bin" "$tmp/z2n3/model.bin" || bad "np 3 --zero 2: model.bin differs from accum 3's"
shards_are "$tmp/z2n3" "$tmp/one3/state.bin" "np 3 --zero 2"
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" "${tech[@]}" --steps 4 --batch 2 --zero 2 --save "$tmp/z2n2q" 2>/dev/null || bad "np 2 --zero 2, 8-bit"
cmp -s "$tmp/one8/model.bin" "$tmp/z2n2q/model.bin" || bad "np 2 --zero 2 8-bit: model.bin differs"
shards_are "$tmp/z2n2q" "$tmp/one8/state.bin" "np 2 --zero 2 with --state-bits 8 --recompute full"
"$bin" train "${args[@]}" "${tech[@]}" --steps 4 --batch 1 --accum 3 --zero 0 --save "$tmp/one8n3" 2>/dev/null || bad "one process, accum 3, 8-bit"
"${mpi[@]}" -np 3 "$bin" train "${args[@]}" "${tech[@]}" --steps 4 --batch 1 --zero 1 --save "$tmp/z1n3q" 2>/dev/null || bad "np 3 --zero 1, 8-bit"
shards_are "$tmp/z1n3q" "$tmp/one8n3/state.bin" "np 3 --zero 1 with --state-bits 8 --recompute full"
for o in "--optimizer adam-mini" "--optimizer lion --state-bits 8"; do
    "$bin" train "${args[@]}" $o --steps 3 --batch 1 --accum 3 --zero 0 --save "$tmp/oo" 2>/dev/null || bad "one process $o"
    "${mpi[@]}" -np 3 "$bin" train "${args[@]}" $o --steps 3 --batch 1 --zero 2 --save "$tmp/zo" 2>/dev/null || bad "np 3 --zero 2 $o"
    shards_are "$tmp/zo" "$tmp/oo/state.bin" "np 3 --zero 2 $o"
    rm -rf "$tmp/oo" "$tmp/zo"
done
# checkpoints re-cut: 3 -> 1 (stage 2 -> 0), 1 -> 2 (stage 0 -> 2), 2 -> 3 (stage 1, against the
# same run at stage 0)
"${mpi[@]}" -np 3 "$bin" train "${args[@]}" --steps 4 --batch 1 --zero 2 --save "$tmp/q31" --stop-at 2 2>/dev/null
[ -f "$tmp/q31/zero.manifest" ] || bad "np 3 --zero 2 --stop-at 2 wrote no manifest"
mkdir -p "$tmp/q31b" && cp "$tmp/q31"/zero* "$tmp/q31b/" # (damaged below)
"$bin" train "${args[@]}" --steps 4 --batch 1 --accum 3 --zero 0 --resume "$tmp/q31" --save "$tmp/q31" 2>/dev/null ||
    bad "a 3-process sharded checkpoint resumed in 1 process"
same_run "$tmp/one3" "$tmp/q31" "3 processes (--zero 2) to step 2, then 1"
"$bin" train "${args[@]}" --steps 6 --batch 2 --accum 2 --zero 0 --save "$tmp/q12" --stop-at 3 2>/dev/null
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 6 --batch 2 --zero 2 --resume "$tmp/q12" --save "$tmp/q12" 2>/dev/null ||
    bad "a 1-process checkpoint resumed in 2 processes at --zero 2"
cmp -s "$tmp/one2/model.bin" "$tmp/q12/model.bin" || bad "1 process to step 3, then 2 at --zero 2: model.bin differs"
shards_are "$tmp/q12" "$tmp/one2/state.bin" "1 process to step 3, then 2 at --zero 2"
for z in 0 1; do
    "${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 6 --batch 1 --accum 3 --zero $z --save "$tmp/q23z$z" --stop-at 3 2>/dev/null
    "${mpi[@]}" -np 3 "$bin" train "${args[@]}" --steps 6 --batch 1 --accum 2 --zero $z --resume "$tmp/q23z$z" --save "$tmp/q23z$z" 2>/dev/null ||
        bad "a 2-process checkpoint (--zero $z) resumed in 3 processes"
done
cmp -s "$tmp/q23z0/model.bin" "$tmp/q23z1/model.bin" || bad "2 -> 3 processes: --zero 1's model.bin differs from --zero 0's"
shards_are "$tmp/q23z1" "$tmp/q23z0/state.bin" "2 -> 3 processes at --zero 1"
# a shard damaged: the resume names it
[ -f "$tmp/q31/zero.manifest" ] && bad "a stage-0 save should remove the older manifest"
printf 'x' | dd of="$tmp/q31b/zero-2-1of3.bin" bs=1 seek=200 conv=notrunc 2>/dev/null
out=$("$bin" train "${args[@]}" --steps 4 --batch 1 --accum 3 --zero 0 --resume "$tmp/q31b" 2>&1) && bad "a damaged shard should be refused"
grep -q "zero-2-1of3.bin: checksum mismatch" <<<"$out" || bad "damaged shard: $out"
# per-process memory: every rank's accounted device peak = the estimate for that rank
for z in 1 2; do for a in 1 2; do
    "${mpi[@]}" -np 3 "$bin" train "${args[@]}" --steps 2 --batch 2 --accum $a --zero $z --log "$tmp/zm.%r.jsonl" 2>/dev/null || bad "np 3 --zero $z accum $a"
    est=$("$bin" estimate --model "gpt2:L=2,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 --accum $a --zero $z --procs 3 --json |
          python3 -c "import json,sys; print(' '.join(map(str, json.load(sys.stdin)['per_process_peak_bytes'])))")
    got=$(for r in 0 1 2; do tail -1 "$tmp/zm.$r.jsonl" | python3 -c "import json,sys; print(json.load(sys.stdin)['mem_peak_bytes'])"; done | xargs)
    echo "np 3 --zero $z accum $a: device bytes per process measured $got, estimated $est"
    [ "$est" = "$got" ] || bad "np 3 --zero $z accum $a: measured $got, estimated $est"
done; done
# refusals
# --zero 3 without --offload runs in the engine's host homes: --zero 3 --offload host's bits;
# with --offload none it is refused
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 2 --zero 3 --save "$tmp/z3a" 2>/dev/null || bad "np 2 --zero 3 alone"
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 2 --zero 3 --offload host --save "$tmp/z3h" 2>/dev/null || bad "np 2 --zero 3 --offload host"
same_run "$tmp/z3h" "$tmp/z3a" "np 2: --zero 3 alone vs --zero 3 --offload host"
out=$("${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 2 --offload none --zero 3 2>&1) && bad "--offload none --zero 3 should be refused"
grep -q -- "--zero 3 (sharded optimizer state, gradients and parameters) runs in the offload engine's homes, not with --offload none" <<<"$out" ||
    bad "--offload none --zero 3 refusal: $out"
# --zero 1 with the engine runs (docs/zero_engine.md, test_zero_engine*.sh, 8-bit state too),
# with a 16-bit gradient home too (its bits: test_zero_engine16.sh)
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --steps 2 --batch 2 --zero 1 --offload host --grad-home bf16 >/dev/null 2>&1 ||
    bad "--zero 1 --offload --grad-home bf16 should run"

# ---- 4. different configurations ---------------------------------------------------------
cat >"$tmp/differ.sh" <<EOF
#!/bin/bash
if [ "\$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$bin" train "\$@" --lr 2e-3; fi
exec "$bin" train "\$@"
EOF
chmod +x "$tmp/differ.sh"
t0=$(date +%s)
out=$("${mpi[@]}" -np 2 "$tmp/differ.sh" "${args[@]}" --steps 3 --batch 2 2>&1) && bad "different --lr should be refused"
grep -q -- "different configurations: --lr is 0.00200000009 on rank 1 but 0.00300000003 on rank 0" <<<"$out" ||
    bad "the refusal should name --lr and both values: $out"
[ $(($(date +%s) - t0)) -lt 60 ] || bad "the refusal took over 60 s"

# ---- 5. faults ----------------------------------------------------------------------------
cat >"$tmp/pid.sh" <<EOF
#!/bin/bash
echo \$\$ >"$tmp/pid.\$OMPI_COMM_WORLD_RANK"
exec "$bin" train "\$@"
EOF
chmod +x "$tmp/pid.sh"
# wait_for FILE: up to 60 s
wait_for() { for _ in $(seq 600); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }
"${mpi[@]}" -np 2 "$tmp/pid.sh" "${args[@]}" --steps 100000 --batch 2 --save "$tmp/kill" --save-every 2 \
    >"$tmp/kill.out" 2>&1 &
job=$!
if wait_for "$tmp/kill/state.bin" && wait_for "$tmp/pid.1"; then
    kill -9 "$(cat "$tmp/pid.1")"
    t0=$(date +%s)
    for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    if kill -0 $job 2>/dev/null; then
        bad "the others still run 60 s after rank 1 was killed"
        kill -9 $job
    fi
    wait $job && bad "mpirun should exit non-zero after a rank was killed"
    echo "killed rank 1: the job ended in $(($(date +%s) - t0)) s: $(grep -m1 -i "signal 9\|killed" "$tmp/kill.out")"
    grep -qi "signal 9\|killed" "$tmp/kill.out" || { bad "no message names the killed process"; cat "$tmp/kill.out"; }
    "$bin" train --resume "$tmp/kill" --data "$tmp/train_000.bin" --steps 100000 --batch 2 --accum 2 --zero 0 \
        --seq 32 --lr 3e-3 --warmup 2 --stop-at 1 --quiet 2>"$tmp/kill.err"
    # --stop-at below the checkpoint's step: the checkpoint loaded (the stop comes after one more step)
    [ -f "$tmp/kill/state.bin" ] && ! grep -qi "error\|cannot" "$tmp/kill.err" ||
        { bad "the last checkpoint does not load after the kill"; cat "$tmp/kill.err"; }
else
    bad "the run to kill did not start"
    kill -9 $job 2>/dev/null
fi

rm -f "$tmp"/pid.[0-9]*
# (stopped once training runs: MPI_Init itself has no deadline of ours)
HPT_DIST_TIMEOUT_S=3 "${mpi[@]}" -x HPT_DIST_TIMEOUT_S -np 2 "$tmp/pid.sh" "${args[@]}" --steps 100000 --batch 2 \
    --save "$tmp/hang" --save-every 2 >"$tmp/hang.out" 2>&1 &
job=$!
if wait_for "$tmp/hang/state.bin" && wait_for "$tmp/pid.1"; then
    kill -STOP "$(cat "$tmp/pid.1")"
    t0=$(date +%s)
    for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    if kill -0 $job 2>/dev/null; then
        bad "rank 0 still waits 60 s after rank 1 stopped"
        kill -9 "$(cat "$tmp/pid.1")" $job 2>/dev/null
    fi
    wait $job && bad "mpirun should exit non-zero after a rank hung"
    echo "stopped rank 1: the job ended in $(($(date +%s) - t0)) s"
    grep -q "no answer from the other processes within 3 s" "$tmp/hang.out" ||
        { bad "no timeout error"; cat "$tmp/hang.out"; }
    kill -9 "$(cat "$tmp/pid.1")" 2>/dev/null
else
    bad "the run to stop did not start"
    kill -9 $job 2>/dev/null
fi

[ $fail -eq 0 ] && echo "test_zero: all passed" || echo "test_zero: $fail failure(s)"
[ $fail -eq 0 ]
