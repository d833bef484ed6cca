#!/usr/bin/env bash
# test_zero_fault.sh HPTRAIN [HPTRAIN_ASAN]: faults and bad input at ZeRO stages 1, 2 and 3 (docs/zero.md,
# "Faults and bad input"; stage 0's are in test_zero.sh). Two processes train with a checkpoint
# every 2 steps, at --zero 1, --zero 2 (sharded checkpoints: zero.manifest and a shard per rank)
# and --zero 3 --offload host (the engine's sharded homes; sharded checkpoints too):
#  1. a rank killed (SIGKILL) in the middle of the run: mpirun ends the other within the bound
#     (30 s; about 2 s here) with a non-zero status and a message naming the killed process;
#  2. a rank that hangs (SIGSTOP): the other fails with the layer's timeout error within the
#     bound (HPT_DIST_TIMEOUT_S=3, checked under 30 s) and the job ends;
#  after each, the last checkpoint loads: resumed in one process (--accum 2 --zero 0) for one more
#  step, it writes the state.bin and model.bin of one uninterrupted process run to that step,
#  byte for byte (independent reference: a fresh one-process run, no checkpoint between); at
#  stages 1, 2 and 3 it also resumes in 2 processes at its stage, writing that run's model.bin and
#  shards that put together are its state.bin;
#  3. processes started with different configurations (one rank with another --zero, --state-bits,
#     --optimizer, --fused-update) refuse to start at every stage, naming the option and both
#     values (every rank fails with that message), within 30 s.
# The sanitizer binary (when given) runs the stage-2 kill and its resumes (against its own
# reference: -O1 code rounds differently), with LeakSanitizer off (Open MPI's allocations live
# until exit). Skips (exit 77) where mpirun is not installed.
set -u
bin=$1
asan=${2:-}
. "$(dirname "$0")/lib.sh"      # $tmp, bad, fail
. "$(dirname "$0")/mpi_lib.sh"  # SKIP without mpirun; $mpi, mpi_shard
. "$(dirname "$0")/zero_lib.sh" # same_run, shards_are
mpi_shard "$tmp/train_000.bin"
base=(--model "gpt2:L=2,C=64,NH=4,V=64,T=32" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3
      --warmup 2 --quiet --batch 2)
long=(--steps 100000) # the cosine's length: the killed runs never reach it
cat >"$tmp/pid.sh" <<EOF
#!/bin/bash
echo \$\$ >"$tmp/pid.\$OMPI_COMM_WORLD_RANK"
exec "\$HPT_BIN" train "\$@"
EOF
chmod +x "$tmp/pid.sh"
wait_for() { for _ in $(seq 600); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; } # up to 60 s
step_of() { tail -1 "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['step'])"; }

# fault NAME SIGNAL FILE STAGE_ARGS...: 2 processes with a checkpoint every 2 steps; once FILE
# (the checkpoint's) exists, rank 1 gets SIGNAL; the job must end within 30 s, non-zero.
fault() {
    local name=$1 sig=$2 file=$3; shift 3
    local d=$tmp/$name job t0 dt
    rm -f "$tmp"/pid.[0-9]*
    # TMPDIR: a stage-3 rank's scratch checkpoint directory (dp_engine.c) stays in $tmp when
    # its rank is killed mid-save (other tests look for strays in /tmp)
    mkdir -p "$tmp/scratch"
    TMPDIR=$tmp/scratch HPT_BIN=$bin HPT_DIST_TIMEOUT_S=3 "${mpi[@]}" -x TMPDIR -x HPT_BIN -x HPT_DIST_TIMEOUT_S -np 2 "$tmp/pid.sh" "${base[@]}" "${long[@]}" "$@" \
        --save "$d" --save-every 2 >"$tmp/$name.out" 2>&1 &
    job=$!
    if ! wait_for "$d/$file" || ! wait_for "$tmp/pid.1"; then
        bad "$name: the run did not start"; kill -9 $job 2>/dev/null; wait $job; return
    fi
    sleep 0.3 # some steps on: the signal lands in a step (or a save) of a run under way
    kill -"$sig" "$(cat "$tmp/pid.1")"
    t0=$(date +%s.%N)
    for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    dt=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)")
    if kill -0 $job 2>/dev/null; then
        bad "$name: the job still runs 30 s after rank 1 got SIG$sig"
        kill -9 $job 2>/dev/null
    fi
    wait $job && bad "$name: mpirun should exit non-zero"
    kill -9 "$(cat "$tmp/pid.1")" 2>/dev/null # a stopped rank
    echo "$name: SIG$sig to rank 1, the job ended in $dt s: $(grep -m1 -i "no answer\|signal 9" "$tmp/$name.out")"
}

# resumes NAME STAGE_ARGS...: the killed run's last checkpoint, one step on, is an uninterrupted
# one-process run's (and, sharded, a 2-process resume at its stage writes that run's shards)
resumes() {
    local name=$1; shift
    local d=$tmp/$name s
    "$bin" train "${base[@]}" "${long[@]}" --accum 2 --zero 0 --resume "$d" --save "$d.one" --stop-at 1 \
        --log "$d.one.jsonl" 2>"$d.one.err" || { bad "$name: the last checkpoint does not load"; tail -3 "$d.one.err"; return; }
    s=$(step_of "$d.one.jsonl")
    "$bin" train "${base[@]}" "${long[@]}" --accum 2 --zero 0 --save "$d.ref" --stop-at "$s" 2>"$d.ref.err" ||
        bad "$name: the reference run"
    same_run "$d.ref" "$d.one" "$name: resumed in one process at step $((s - 1)) (one step on)"
    if [ $# -gt 0 ] && [ -f "$d/zero.manifest" ]; then
        "${mpi[@]}" -np 2 "$bin" train "${base[@]}" "${long[@]}" "$@" --resume "$d" --save "$d.two" --stop-at 1 \
            2>"$d.two.err" || { bad "$name: the last checkpoint does not resume in 2 processes"; tail -3 "$d.two.err"; return; }
        cmp -s "$d.ref/model.bin" "$d.two/model.bin" || bad "$name: resumed in 2 processes ($*): model.bin differs"
        shards_are "$d.two" "$d.ref/state.bin" "$name: resumed in 2 processes ($*)"
    fi
    echo "$name: the checkpoint of step $((s - 1)) resumes with the uninterrupted run's bits"
}

# ---- 1, 2. a rank killed, a rank hung, at stages 1, 2, 3 ----------------------------------------
fault kill1 9 zero.manifest --zero 1
grep -qi "signal 9\|killed" "$tmp/kill1.out" || { bad "kill1: no message names the killed process"; tail -5 "$tmp/kill1.out"; }
resumes kill1 --zero 1
fault hang2 STOP zero.manifest --zero 2
grep -q "no answer from the other processes within 3 s" "$tmp/hang2.out" || { bad "hang2: no timeout error"; tail -5 "$tmp/hang2.out"; }
resumes hang2 --zero 2
fault kill2 9 zero.manifest --zero 2
grep -qi "signal 9\|killed" "$tmp/kill2.out" || { bad "kill2: no message names the killed process"; tail -5 "$tmp/kill2.out"; }
resumes kill2
fault hang1 STOP zero.manifest --zero 1
grep -q "no answer from the other processes within 3 s" "$tmp/hang1.out" || { bad "hang1: no timeout error"; tail -5 "$tmp/hang1.out"; }
resumes hang1
fault kill3 9 zero.manifest --zero 3 --offload host
grep -qi "signal 9\|killed" "$tmp/kill3.out" || { bad "kill3: no message names the killed process"; tail -5 "$tmp/kill3.out"; }
resumes kill3 --zero 3 --offload host
fault hang3 STOP zero.manifest --zero 3 --offload host
grep -q "no answer from the other processes within 3 s" "$tmp/hang3.out" || { bad "hang3: no timeout error"; tail -5 "$tmp/hang3.out"; }
resumes hang3

if [ -n "$asan" ] && [ -x "$asan" ]; then # the sanitizer binary: a kill at stage 2 and its resumes
    export ASAN_OPTIONS=detect_leaks=0
    keep=$bin bin=$asan mpi0=("${mpi[@]}")
    mpi+=(-x ASAN_OPTIONS)
    fault akill2 9 zero.manifest --zero 2
    grep -qi "signal 9\|killed" "$tmp/akill2.out" || { bad "akill2: no message names the killed process"; tail -5 "$tmp/akill2.out"; }
    grep -q "ERROR: AddressSanitizer\|runtime error" "$tmp/akill2.out" && { bad "akill2: the sanitizer reports"; grep -A5 Sanitizer "$tmp/akill2.out"; }
    resumes akill2 --zero 2
    grep -q "ERROR: AddressSanitizer\|runtime error" "$tmp"/akill2.*.err && bad "akill2's resumes: the sanitizer reports"
    bin=$keep mpi=("${mpi0[@]}")
    unset ASAN_OPTIONS
fi

# ---- 3. different configurations, at every stage ------------------------------------------------
cat >"$tmp/differ.sh" <<EOF
#!/bin/bash
if [ "\$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$bin" train "\$@" \$DIFF; fi
exec "$bin" train "\$@"
EOF
chmod +x "$tmp/differ.sh"
differ() { # differ "RANK 1'S EXTRA" "EXPECTED" ARGS...
    local d=$1 want=$2 t0 out; shift 2
    t0=$(date +%s)
    out=$(DIFF="$d" "${mpi[@]}" -x DIFF -np 2 "$tmp/differ.sh" "${base[@]}" --steps 3 "$@" 2>&1) &&
        bad "$* with $d on rank 1: should be refused"
    # (every rank fails with this message; mpirun may end one before it prints)
    grep -q -- "different configurations: $want" <<<"$out" || bad "$* with $d on rank 1: the refusal should name the difference ($want): $out"
    [ $(($(date +%s) - t0)) -lt 30 ] || bad "$* with $d on rank 1: the refusal took 30 s or more"
    echo "$* / rank 1 $d: refused: $want"
}
differ "--zero 2" "--zero is 2 on rank 1 but 1 on rank 0" --zero 1
differ "--state-bits 8" "--state-bits is 8 on rank 1 but not given on rank 0" --zero 1
differ "--zero 1" "--zero is 1 on rank 1 but 2 on rank 0" --zero 2
differ "--optimizer lion" "--optimizer is lion on rank 1 but not given on rank 0" --zero 2
differ "--zero 0" "--zero is 0 on rank 1 but 3 on rank 0" --zero 3 --offload host
differ "--fused-update" "--fused-update is given on rank 1 but not given on rank 0" --zero 3 --offload host

[ $fail -eq 0 ] && echo "test_zero_fault: all passed" || echo "test_zero_fault: $fail failure(s)"
[ $fail -eq 0 ]
