#!/usr/bin/env bash
# test_crash.sh HPTRAIN [KILLS_MEM KILLS_DISK]: training survives kill -9.
# `hptrain train --save-every 1` on a tiny model is killed with SIGKILL at random moments
# (seeded: the same moments each run, up to the machine's timing) and resumed from its save
# directory each time, until it completes; it must end with the bits of an uninterrupted run
# (state.bin and model.bin, byte for byte), and leave no temporary file behind. The rows are
# shuffled (--shuffle on; the memory run's 300 steps pass an epoch's 234 batches), so the
# resumed runs also read the rows of the saved (epoch, position) in the epoch's order. Twice: with the
# model in memory (KILLS_MEM kills, default 50), and with weights, gradients and AdamW state on
# disk (--offload disk; KILLS_DISK, default 30), where before each resume a stale file is
# planted in the offload directory: the disk tier's blocks are anonymous files (O_TMPFILE)
# that die with the process, so a resumed run rebuilds them from the checkpoint and never
# reads what a killed run left (docs/hardening.md).
# Before each kill the threads' system calls are read from /proc (fsync, write, rename:
# a checkpoint being written; pread64/pwrite64, and the 1 ms sleep after each disk-tier
# transfer that HPT_TEST_DISK_DELAY_US adds in the offload run: the disk tier's I/O, the
# optimizer's write-back among it) and counted, to show where the kills landed; a kill that
# leaves the killed process's checkpoint temporary file landed inside a save.
set -u
bin=$1
kills_mem=${2:-50}
kills_disk=${3:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=PASSIVE
fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
python3 - "$tmp" <<'PY'
import random, struct, sys
random.seed(3)
pat = [random.randrange(64) for _ in range(37)]
t = [pat[i % 37] if random.random() < 0.8 else random.randrange(64) for i in range(30000)]
open(sys.argv[1] + "/train_000.bin", "wb").write(
    struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)) + struct.pack("<%dH" % len(t), *t))
PY
shape="gpt2:L=2,C=64,NH=4,V=64,T=32"
RANDOM=1919 # the seed of the kill moments
declare -A where

# sample PID: the system calls its threads are in now (names), appended to where[]
sample() {
    local n
    for f in /proc/"$1"/task/*/syscall; do
        read -r n _ < "$f" 2>/dev/null || continue
        case "$n" in
        35|230) where[disk]=$((${where[disk]:-0} + 1)) ;; # HPT_TEST_DISK_DELAY_US's sleep
        74|75) where[fsync]=$((${where[fsync]:-0} + 1)) ;;
        1) where[write]=$((${where[write]:-0} + 1)) ;;
        82) where[rename]=$((${where[rename]:-0} + 1)) ;;
        17) where[pread64]=$((${where[pread64]:-0} + 1)) ;;
        18) where[pwrite64]=$((${where[pwrite64]:-0} + 1)) ;;
        esac
    done
}

# scenario NAME STEPS KILLS EXTRA...: the uninterrupted run, then the killed-and-resumed one
scenario() {
    local name=$1 steps=$2 target=$3; shift 3
    local ref=$tmp/$name-ref dir=$tmp/$name-run off=$tmp/$name-off
    local args=(--data "$tmp/train_000.bin" --batch 4 --seq 32 --steps "$steps" --lr 3e-3
                --save-every 1 --shuffle on --data-seed 7 --quiet "$@")
    local offargs=()
    [ "$name" = disk ] && offargs=(--offload-dir "$off")
    "$bin" train --model "$shape" "${args[@]}" "${offargs[@]}" --save "$ref" >/dev/null 2>"$tmp/err" ||
        { bad "$name: the uninterrupted run failed: $(tail -n 2 "$tmp/err")"; return; }
    local kills=0 in_save=0 runs=0 rc reps=0
    # a fast machine finishes a run in fewer kills than asked: the killed-and-resumed run starts
    # over (a fresh directory, every finished run checked against the reference) until the kills
    # are done, so the count does not depend on the machine's speed
    while [ $kills -lt "$target" ] && [ $reps -lt 20 ]; do
        reps=$((reps + 1))
        rm -rf "$dir" "$off"
        while :; do
            local from=(--model "$shape")
            [ -f "$dir/state.bin" ] && from=(--resume "$dir")
            if [ "$name" = disk ] && [ -d "$off" ]; then # what a killed run left: never to be read
                [ -z "$(ls -A "$off")" ] || bad "$name: the killed run left files in $off: $(ls "$off")"
                head -c 1048576 /dev/urandom > "$off/hpt-disk-stale"
            fi
            "$bin" train "${from[@]}" "${args[@]}" "${offargs[@]}" --save "$dir" >/dev/null 2>"$tmp/err" &
            local pid=$!
            runs=$((runs + 1))
            if [ $kills -lt "$target" ]; then
                # 30..330 ms: the start (load), steps, checkpoint writes alike
                sleep "0.$(printf '%03d' $((30 + RANDOM % 300)))"
                if kill -0 $pid 2>/dev/null; then
                    sample $pid
                    kill -9 $pid 2>/dev/null
                    wait $pid 2>/dev/null
                    kills=$((kills + 1))
                    ls "$dir"/*.tmp.$pid >/dev/null 2>&1 && in_save=$((in_save + 1))
                    rm -f "$off/hpt-disk-stale" 2>/dev/null
                    continue
                fi
            fi
            wait $pid
            rc=$?
            [ $rc -eq 0 ] || { bad "$name: a resumed run failed ($rc): $(tail -n 2 "$tmp/err")"; return; }
            break
        done
        rm -f "$off/hpt-disk-stale" 2>/dev/null
        cmp -s "$ref/state.bin" "$dir/state.bin" || bad "$name: state.bin differs from the uninterrupted run's"
        cmp -s "$ref/model.bin" "$dir/model.bin" || bad "$name: model.bin differs from the uninterrupted run's"
        if ls "$dir"/*.tmp.* >/dev/null 2>&1; then bad "$name: temporary files left: $(ls "$dir")"; fi
    done
    [ $kills -ge "$target" ] || bad "$name: only $kills kills in $reps runs to the end (wanted $target)"
    local w=""
    for k in fsync write rename pread64 pwrite64 disk; do w="$w $k ${where[$k]:-0},"; done
    echo "$name: $kills kills survived in $runs runs ($reps to the end) of $steps steps; $in_save left a checkpoint" \
         "half-written; threads at the kills:${w%,}; final bits equal the uninterrupted run's"
    where=()
    total_kills=$((total_kills + kills))
}

total_kills=0
scenario mem 300 "$kills_mem"
export HPT_TEST_DISK_DELAY_US=1000
scenario disk 100 "$kills_disk" --offload disk
echo "test_crash: $total_kills kills, $fail failures"
[ $fail -eq 0 ]
