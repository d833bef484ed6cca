#!/usr/bin/env bash
# bench_zero.sh [HPTRAIN]: data parallel over MPI (docs/zero.md). Run under the shared lock:
#   flock /work/bench.lock bench/bench_zero.sh build/hptrain
# 1. bytes sent per step per process, counted by the communication layer, against the ZeRO
#    paper's volume for stage 0 (2 x the parameters in the dtype sent, fp32 here; a ring or
#    reduce-scatter + all-gather sends 2 (N-1)/N of it), at N = 2 and 4;
# 2. per-process memory (the accounted device peak, rank 0's; every rank holds the same) on
#    gpt2-124m at N = 2 and 4 and gpt2-350m at N = 2, one step of B=1, T=64, against the
#    estimator's figure for one process;
# 3. throughput: 2 processes x 1 thread against 1 process x 2 threads with the same global
#    batch (--batch 4 each against --batch 4 --accum 2 --zero 0, its bit-identical twin, and
#    --batch 8), side by side in one run.
set -u
bin=${1:-build/hptrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl=self,vader,tcp
mpi=(mpirun --oversubscribe --bind-to none)
python3 - "$tmp" <<'PY'
import random, struct, sys
random.seed(11)
t = [random.randrange(50000) for _ in range(200000)]
open(sys.argv[1] + "/train_000.bin", "wb").write(
    struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)) + struct.pack("<%dH" % len(t), *t))
PY
data=$tmp/train_000.bin
field() { tail -1 "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }

echo "== 1. bytes sent per step per process (stage 0, fp32 gradients)"
small="gpt2:L=4,C=256,NH=4,V=50257,T=128"
for n in 2 4; do
    OMP_NUM_THREADS=1 "${mpi[@]}" -np $n "$bin" train --model "$small" --data "$data" --batch 1 --seq 64 \
        --steps 3 --quiet 2>"$tmp/b$n.err" >/dev/null
    line=$(grep "data parallel" "$tmp/b$n.err")
    echo "N=$n: $line; the paper's 2 x params x 4 bytes x (N-1)/N = $(python3 -c "print('%.3f' % (2*($n-1)/$n))") x"
done

echo "== 2. per-process memory, stage 0 (accounted device peak, rank 0; estimate of one process)"
for spec in "gpt2-124m 2" "gpt2-124m 4" "gpt2-350m 2"; do
    set -- $spec
    OMP_NUM_THREADS=1 "${mpi[@]}" -np "$2" "$bin" train --model "$1" --data "$data" --batch 1 --seq 64 \
        --steps 1 --quiet --log "$tmp/m.jsonl" 2>"$tmp/m.err" >/dev/null || { echo "$1 N=$2 failed"; tail -3 "$tmp/m.err"; continue; }
    est=$("$bin" estimate --model "$1" --batch 1 --seq 64 --zero 0 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['peak_bytes'])")
    got=$(field "$tmp/m.jsonl" mem_peak_bytes)
    rss=$(field "$tmp/m.jsonl" rss_peak_bytes)
    echo "$1 N=$2: per process $(python3 -c "print('%.1f MiB' % ($got/2**20))") measured, $(python3 -c "print('%.1f MiB' % ($est/2**20))") estimated; peak RSS $(python3 -c "print('%.0f MiB' % ($rss/2**20))")"
done

echo "== 3. throughput, global batch 8 x 128 tokens, $small"
run() { # run NAME CMD...: tokens per second of the last 4 of 6 steps
    "$@" --model "$small" --data "$data" --seq 128 --steps 6 --warmup 1 --quiet --log "$tmp/t.jsonl" \
        2>/dev/null >/dev/null || { echo "failed: $*"; return; }
    python3 - "$tmp/t.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][2:]
print("%.0f tok/s (mean step %.0f ms)" % (sum(x["tokens_per_s"] for x in r) / len(r), sum(x["step_ms"] for x in r) / len(r)))
PY
}
for rep in 1 2; do
    echo "round $rep:"
    echo "  2 processes x 1 thread, --batch 4:            $(OMP_NUM_THREADS=1 run "${mpi[@]}" -np 2 "$bin" train --batch 4)"
    echo "  1 process x 2 threads, --batch 4 --accum 2 --zero 0: $(OMP_NUM_THREADS=2 run "$bin" train --batch 4 --accum 2 --zero 0)"
    echo "  1 process x 2 threads, --batch 8:             $(OMP_NUM_THREADS=2 run "$bin" train --batch 8)"
done
