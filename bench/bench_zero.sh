#!/usr/bin/env bash
# bench_zero.sh [HPTRAIN [SECTIONS]]: data parallel over MPI (docs/zero.md). Run under the shared
# lock, a section or two at a time (each under ~5 minutes):
#   flock /work/bench.lock bench/bench_zero.sh build/hptrain "bytes mem124"
#   flock /work/bench.lock bench/bench_zero.sh build/hptrain mem350
#   flock /work/bench.lock bench/bench_zero.sh build/hptrain mem2_124   (and mem2_350)
# SECTIONS (default all): bytes mem124 mem350 speed; mem2_124, mem2_350, mem3, overlap (not in the
#    default)
# bytes: bytes sent per step per process, counted by the communication layer (each rank's log,
#    dist_sent_bytes, between steps 2 and 3), at stages 0-3 and N = 2, 4, against the ZeRO
#    paper's volume (2 x the parameters in the dtype sent, fp32 here, for stages 0-2, 3 x at 3; a ring or
#    reduce-scatter + all-gather sends 2 (N-1)/N of it per process on average);
# mem124, mem350: per-process memory (each rank's accounted device peak and peak RSS, one step
#    of B=1, T=64) at stages 0, 1, 2 (2 also with --accum 2, where its micro-batch sum is
#    shard-sized) against the estimator's figure for that rank (--procs N --rank R), on
#    gpt2-124m at N = 2 and 4 and gpt2-350m at N = 2 and 4 (4 x stage 0 of 350m, 4 x 5.7 GiB,
#    does not fit beside the other work on this 23 GiB machine: left out);
# mem3: stage 3 (--zero 3 alone: the engine's homes on the host) on both models at N = 2 and 4,
#    each rank's device and host peaks against its estimate;
# mem2_124, mem2_350: stage 2's rows alone (the blocks' gradients freed layer by layer since
#    zmem4; stages 0 and 1 are unchanged), gpt2-124m N = 2, 4 and gpt2-350m N = 2, 4;
# overlap: stage 2's per-block exchange overlapped with the next block's backward (two slots,
#    since zov5) against the blocking one-slot exchange before it (BENCH_BEFORE=path of a binary
#    built before), and with the progress thread (HPT_DIST_PROGRESS=thread): mean step time of
#    steps 2-3 at N = 2, B=1 T=128, gpt2-124m and gpt2-350m (OVERLAP_MODELS), side by side in
#    rounds (each rank's step_ms; rank 0's shown);
# speed: throughput: 2 processes x 1 thread (stages 0 and 1) against 1 process x 2 threads with
#    the same global batch (--batch 4 each against --batch 4 --accum 2 --zero 0, its bit-identical twin, and
#    --batch 8), side by side in one run.
set -u
bin=${1:-build/hptrain}
sections=${2:-"bytes mem124 mem350 speed"}
want() { [[ " $sections " == *" $1 "* ]]; }
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

small="gpt2:L=4,C=256,NH=4,V=50257,T=128"
if want bytes; then
echo "== bytes sent per step per process (fp32; the layer's count between steps 2 and 3)"
for n in 2 4; do for z in 0 1 2 3; do
    rm -f "$tmp"/b.*.jsonl
    OMP_NUM_THREADS=1 "${mpi[@]}" -np $n "$bin" train --model "$small" --data "$data" --batch 1 --seq 64 \
        --steps 3 --zero $z --quiet --log "$tmp/b.%r.jsonl" 2>"$tmp/b.err" >/dev/null || { echo "N=$n zero $z failed"; tail -3 "$tmp/b.err"; continue; }
    np_=$("$bin" estimate --model "$small" --batch 1 --seq 64 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['num_params'])")
    python3 - "$tmp" $n $z $np_ <<'PY'
import json, sys
d, n, z, npar = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
per = []
for r in range(n):
    rows = [json.loads(l) for l in open("%s/b.%d.jsonl" % (d, r))]
    per.append(rows[2]["dist_sent_bytes"] - rows[1]["dist_sent_bytes"])
P = 4.0 * npar
k = 3 if z == "3" else 2   # stage 3: a gather in the forward and the backward, a reduce-scatter
print("N=%d --zero %s: per process %s MiB (%s x params x 4 B); mean %.3f x; the paper's %d (N-1)/N = %.3f x"
      % (n, z, " ".join("%.2f" % (b / 2**20) for b in per), " ".join("%.3f" % (b / P) for b in per),
         sum(per) / len(per) / P, k, k * (n - 1) / n))
PY
done; done
fi

mem_runs() { # mem_runs MODEL "N Z ACCUM" ... (MEM_SPECS="N Z A,N Z A": those instead)
    local model=$1; shift
    [ -n "${MEM_SPECS:-}" ] && IFS=, read -ra specs <<< "$MEM_SPECS" && set -- "${specs[@]}"
    for spec in "$@"; do
        set -- $spec
        rm -f "$tmp"/m.*.jsonl
        OMP_NUM_THREADS=1 "${mpi[@]}" -np "$1" "$bin" train --model "$model" --data "$data" --batch 1 --seq 64 \
            --steps 1 --zero "$2" --accum "$3" --quiet --log "$tmp/m.%r.jsonl" 2>"$tmp/m.err" >/dev/null ||
            { echo "$model N=$1 --zero $2 --accum $3 failed"; tail -3 "$tmp/m.err"; continue; }
        est=$("$bin" estimate --model "$model" --batch 1 --seq 64 --zero "$2" --accum "$3" --procs "$1" --json |
              python3 -c "import json,sys; print(' '.join(map(str, json.load(sys.stdin)['per_process_peak_bytes'])))")
        python3 - "$tmp" "$1" "$model" "$2" "$3" $est <<'PY'
import json, sys
d, n, model, z, a = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
est = [int(x) for x in sys.argv[6:]]
got = [json.loads(open("%s/m.%d.jsonl" % (d, r)).readlines()[-1]) for r in range(n)]
mib = lambda b: "%.1f" % (b / 2**20)
same = all(g["mem_peak_bytes"] == e for g, e in zip(got, est))
print("%s N=%d --zero %s --accum %s: device MiB per process %s (estimated %s: %s); peak RSS MiB %s"
      % (model, n, z, a, " ".join(mib(g["mem_peak_bytes"]) for g in got), " ".join(mib(e) for e in est),
         "measured = estimated" if same else "DIFFERENT", " ".join("%.0f" % (g["rss_peak_bytes"] / 2**20) for g in got)))
PY
    done
}
mem3_runs() { # mem3_runs MODEL N...: --zero 3 (the engine's homes on the host), device and host
    local model=$1; shift
    for n in "$@"; do
        rm -f "$tmp"/m.*.jsonl
        OMP_NUM_THREADS=1 "${mpi[@]}" -np "$n" "$bin" train --model "$model" --data "$data" --batch 1 --seq 64 \
            --steps 1 --zero 3 --quiet --log "$tmp/m.%r.jsonl" 2>"$tmp/m.err" >/dev/null ||
            { echo "$model N=$n --zero 3 failed"; tail -3 "$tmp/m.err"; continue; }
        est=$(for ((r = 0; r < n; r++)); do "$bin" estimate --model "$model" --batch 1 --seq 64 --zero 3 --procs "$n" --rank $r --json |
              python3 -c "import json,sys; t=json.load(sys.stdin)['peak_bytes_by_tier']; print('%d:%d' % (t['device'], t['host']))"; done | xargs)
        python3 - "$tmp" "$n" "$model" $est <<'PY'
import json, sys
d, n, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
est = [tuple(map(int, x.split(":"))) for x in sys.argv[4:]]
got = [json.loads(open("%s/m.%d.jsonl" % (d, r)).readlines()[-1]) for r in range(n)]
got = [(g["mem_peak_bytes"], g["host_peak_bytes"], g["rss_peak_bytes"]) for g in got]
mib = lambda b: "%.1f" % (b / 2**20)
same = all(g[:2] == e for g, e in zip(got, est))
print("%s N=%d --zero 3: device + host MiB per process %s (estimated %s: %s); peak RSS MiB %s"
      % (model, n, " ".join("%s+%s" % (mib(g[0]), mib(g[1])) for g in got),
         " ".join("%s+%s" % (mib(e[0]), mib(e[1])) for e in est),
         "measured = estimated" if same else "DIFFERENT", " ".join("%.0f" % (g[2] / 2**20) for g in got)))
PY
    done
}
if want mem3; then
echo "== stage 3 per-process memory (the engine's homes on the host: --zero 3 alone)"
mem3_runs gpt2-124m 2 4
mem3_runs gpt2-350m 2 4
fi
if want mem124; then
echo "== per-process memory, gpt2-124m (accounted device peak of every rank; estimate per rank)"
mem_runs gpt2-124m "2 0 1" "2 1 1" "2 2 1" "2 1 2" "2 2 2" "4 0 1" "4 1 1" "4 2 1" "4 1 2" "4 2 2"
fi
if want mem350; then
echo "== per-process memory, gpt2-350m (4 x stage 0 left out: 4 x 5.7 GiB does not fit here)"
mem_runs gpt2-350m "2 0 1" "2 1 1" "2 2 2" "4 1 1" "4 2 1"
fi
if want mem2_124; then
echo "== stage 2 per-process memory, gpt2-124m"
mem_runs gpt2-124m "2 2 1" "2 2 2" "4 2 1" "4 2 2"
fi
if want mem2_350; then
echo "== stage 2 per-process memory, gpt2-350m"
mem_runs gpt2-350m "2 2 1" "2 2 2" "4 2 1"
fi

if want overlap; then
echo "== stage 2 step time, N = 2, B=1 T=128 (ms, mean of steps 2-3, rank 0 / rank 1)"
step_ms() { # step_ms BIN MODEL [ENV...]
    local b=$1 model=$2; shift 2
    rm -f "$tmp"/o.*.jsonl
    OMP_NUM_THREADS=1 "${mpi[@]}" "$@" -np 2 "$b" train --model "$model" --data "$data" --batch 1 --seq 128 \
        --steps 3 --zero 2 --quiet --log "$tmp/o.%r.jsonl" 2>"$tmp/o.err" >/dev/null || { echo "failed"; tail -2 "$tmp/o.err"; return; }
    python3 - "$tmp" <<'PY'
import json, sys
ms = []
for r in range(2):
    rows = [json.loads(l) for l in open("%s/o.%d.jsonl" % (sys.argv[1], r))][1:]
    ms.append(sum(x["step_ms"] for x in rows) / len(rows))
print(" / ".join("%.0f" % m for m in ms))
PY
}
for model in ${OVERLAP_MODELS:-gpt2-124m gpt2-350m}; do for rep in 1 2; do
    [ -n "${BENCH_BEFORE:-}" ] && echo "$model round $rep: before (one slot, blocking):  $(step_ms "$BENCH_BEFORE" $model)"
    echo "$model round $rep: overlapped, no thread:       $(step_ms "$bin" $model)"
    echo "$model round $rep: overlapped, progress thread: $(step_ms "$bin" $model -x HPT_DIST_PROGRESS=thread)"
done; done
fi

want speed || exit 0
echo "== throughput, global batch 8 x 128 tokens, $small"
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
    echo "  2 processes x 1 thread, --batch 4 --zero 1:   $(OMP_NUM_THREADS=1 run "${mpi[@]}" -np 2 "$bin" train --batch 4 --zero 1)"
    echo "  1 process x 2 threads, --batch 4 --accum 2 --zero 0: $(OMP_NUM_THREADS=2 run "$bin" train --batch 4 --accum 2 --zero 0)"
    echo "  1 process x 2 threads, --batch 8:             $(OMP_NUM_THREADS=2 run "$bin" train --batch 8)"
done
