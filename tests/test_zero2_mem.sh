#!/usr/bin/env bash
# test_zero2_mem.sh HPTRAIN [HPTRAIN_ASAN]: ZeRO stage 2 in memory frees the blocks' gradients
# layer by layer (docs/zero.md, "Stage 2's gradients"): each block's gradients go through one of
# two block-sized slots and are reduce-scattered onto their owners from the block's done point,
# the exchange running while the next block's backward writes the other slot.
#  1. the same bits: 3 processes at --zero 2 write one process's model.bin (--accum 3 --zero 0)
#     and shards that are its state.bin, with loss scaling (the overflow check reads the owners'
#     sums); 2 processes with 8-bit Adam-mini state likewise; the exchanges cut into rounds of
#     333 floats (HPT_DIST_PIECE: many rounds in flight on both slots' channels at once), with
#     and without the progress thread (HPT_DIST_PROGRESS=thread), give the same bits (accum 1:
#     one process's; accum 2: the default run's);
#  2. memory (3 processes, --accum 1 and 2): every rank's measured device peak = `hptrain estimate --procs N --rank r`; and the
#     bytes stage 2 saves against stage 1 on each rank are derived here from the shape and the
#     rank's run as its shard's header records it (stage 1: the whole flat gradients, 4P bytes,
#     plus with --accum 2 a whole sum; stage 2: the non-block tensors' gradients, two blocks'
#     slots, the run's block values, plus with --accum 2 the run's non-block values), and that
#     difference is the measured peaks' difference, to the byte.
# The sanitizer binary (when given) runs a --zero 2 --accum 2 run of 3 processes (LeakSanitizer
# off: Open MPI's allocations live until exit). Skips (77) where mpirun is not installed.
set -u
bin=$1
asan=${2:-}
. "$(dirname "$0")/lib.sh"      # $tmp, bad, fail
. "$(dirname "$0")/mpi_lib.sh"  # SKIP without mpirun; $mpi, mpi_shard
. "$(dirname "$0")/zero_lib.sh" # same_run, shards_are
mpi_shard "$tmp/train_000.bin"
L=6 C=64 # 6 blocks: stage 2 holds two blocks' slots beside its run, less than stage 1 still
shape="gpt2:L=$L,C=$C,NH=4,V=64,T=32"
args=(--model "$shape" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --warmup 2 --quiet)
peak() { tail -1 "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['mem_peak_bytes'])"; }

# ---- 1. the same bits, 2. memory --------------------------------------------------------------
ls=(--loss-scale dynamic)
"$bin" train "${args[@]}" "${ls[@]}" --steps 2 --batch 1 --accum 3 --zero 0 --save "$tmp/one3" 2>/dev/null || bad "one process, accum 3"
# stage 1 and stage 2 side by side, per rank: measured = estimated, and their difference derived
for a in 1 2; do
    for z in 1 2; do
        d="$tmp/m$a$z"
        "${mpi[@]}" -np 3 "$bin" train "${args[@]}" "${ls[@]}" --steps 2 --batch 1 --accum $a --zero $z --save "$d" \
            --log "$d.%r.jsonl" 2>"$d.err" || { bad "np 3 accum $a --zero $z"; tail -5 "$d.err"; }
        got=$(for r in 0 1 2; do peak "$d.$r.jsonl"; done | xargs)
        est=$("$bin" estimate --model "$shape" --seq 32 --batch 1 --accum $a --zero $z --procs 3 --json |
              python3 -c "import json,sys; print(' '.join(str(x) for x in json.load(sys.stdin)['per_process_peak_bytes']))")
        echo "np 3 accum $a --zero $z: device bytes per process measured $got, estimated $est"
        [ "$got" = "$est" ] || bad "np 3 accum $a --zero $z: measured $got, estimated $est"
    done
    python3 - "$tmp/m${a}1" "$tmp/m${a}2" 3 $a $L $C <<'PY' || bad "np 3 accum $a: stage 2's saving is not the derived one"
import glob, json, struct, sys
d1, d2, n, a, L, C = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
Vp, maxT = 128, 32   # V=64 padded to a multiple of 128; T=32
pre = Vp * C + maxT * C                   # wte, wpe: before the blocks
blk = 12 * C * C + 13 * C                 # one block's values (GPT-2)
P = pre + L * blk + 2 * C                 # + lnfw, lnfb after the blocks
NB = P - L * blk
def peak(d, r): return json.loads(open("%s.%d.jsonl" % (d, r)).read().splitlines()[-1])["mem_peak_bytes"]
ok = True
for r in range(n):
    sh = glob.glob("%s/zero-*-%dof%d.bin" % (d2, r, n))[0]
    h = struct.unpack("<8q", open(sh, "rb").read()[8:72])
    lo, hi = h[4], h[5]                   # the rank's run of values (checkpoint order)
    clamp = lambda x: min(max(x, pre), pre + L * blk)
    own_blk = clamp(hi) - clamp(lo)       # its block values
    own_nb = (hi - lo) - own_blk          # its non-block ones
    g1 = 4 * P * (2 if a > 1 else 1)      # stage 1: flat gradients (+ the apart sum)
    g2 = 4 * (NB + 2 * blk + own_blk + (own_nb if a > 1 else 0))
    m1, m2 = peak(d1, r), peak(d2, r)
    print("rank %d of %d, accum %d: run [%d, %d) of %d: device peak stage 1 %d, stage 2 %d; gradients %d -> %d (derived), measured difference %d"
          % (r, n, a, lo, hi, P, m1, m2, g1, g2, m1 - m2))
    ok &= hi <= P and m1 - m2 == g1 - g2 and g2 < g1
sys.exit(0 if ok else 1)
PY
done
cmp -s "$tmp/one3/model.bin" "$tmp/m12/model.bin" || bad "np 3 --zero 2: model.bin differs from accum 3's"
shards_are "$tmp/m12" "$tmp/one3/state.bin" "np 3 --zero 2 (loss scaling)"
# the exchanges in many small rounds, both slots in flight at once; with the progress thread too
for pr in none thread; do
    for a in 1 2; do
        d="$tmp/p$pr$a"
        "${mpi[@]}" -x HPT_DIST_PIECE=333 -x HPT_DIST_PROGRESS=$pr -np 3 "$bin" train "${args[@]}" "${ls[@]}" \
            --steps 2 --batch 1 --accum $a --zero 2 --save "$d" 2>"$d.err" ||
            { bad "np 3 --zero 2 --accum $a, rounds of 333 floats, progress $pr"; tail -5 "$d.err"; }
        cmp -s "$tmp/m${a}2/model.bin" "$d/model.bin" ||
            bad "np 3 --zero 2 --accum $a, rounds of 333 floats, progress $pr: model.bin differs"
    done
    shards_are "$tmp/p${pr}1" "$tmp/one3/state.bin" "np 3 --zero 2, rounds of 333 floats, progress $pr"
done
q8=(--optimizer adam-mini --state-bits 8)
"$bin" train "${args[@]}" "${q8[@]}" --steps 2 --batch 1 --accum 2 --zero 0 --save "$tmp/oneq" 2>/dev/null || bad "one process, adam-mini 8-bit"
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" "${q8[@]}" --steps 2 --batch 1 --zero 2 --save "$tmp/zq" 2>/dev/null || bad "np 2 --zero 2 adam-mini 8-bit"
cmp -s "$tmp/oneq/model.bin" "$tmp/zq/model.bin" || bad "np 2 --zero 2 adam-mini 8-bit: model.bin differs"
shards_are "$tmp/zq" "$tmp/oneq/state.bin" "np 2 --zero 2 adam-mini 8-bit"

if [ -n "$asan" ]; then
    # the sanitizer binary against its own twins: its bits are not the plain build's (other
    # compiler flags: -O1, no -march=native; one process differs as well), so it is checked as
    # the plain build is above: stage 2 at --accum 1 (loss scaling) = one process with --accum 3,
    # and stage 2 at --accum 2 = the engine's stage 2 at --accum 2 (the same order of sums,
    # test_zero_engine.sh; without loss scaling, which the engine's stages refuse)
    export ASAN_OPTIONS=detect_leaks=0
    "$asan" train "${args[@]}" "${ls[@]}" --steps 2 --batch 1 --accum 3 --zero 0 --save "$tmp/za0" 2>"$tmp/asan.err" ||
        { bad "sanitizer build, one process, accum 3"; tail -20 "$tmp/asan.err"; }
    for run in "za1 ${ls[*]} --accum 1" "za2 --accum 2" "za3 --accum 2 --offload host"; do
        # shellcheck disable=SC2086
        set -- $run
        n=$1; shift
        pr=none; [ "$n" = za1 ] && pr=thread # the progress thread under the sanitizer too
        "${mpi[@]}" -x ASAN_OPTIONS -x HPT_DIST_PIECE=333 -x HPT_DIST_PROGRESS=$pr -np 3 "$asan" train "${args[@]}" --steps 2 --batch 1 --zero 2 "$@" \
            --save "$tmp/$n" 2>"$tmp/asan.err" || { bad "sanitizer build, np 3 --zero 2 $*"; tail -20 "$tmp/asan.err"; }
    done
    cmp -s "$tmp/za0/model.bin" "$tmp/za1/model.bin" ||
        bad "sanitizer build, np 3 --zero 2 (loss scaling): model.bin differs from its accum 3's"
    cmp -s "$tmp/za2/model.bin" "$tmp/za3/model.bin" ||
        bad "sanitizer build, np 3 --zero 2 --accum 2: model.bin differs from the engine's stage 2"
fi
finish test_zero2_mem
