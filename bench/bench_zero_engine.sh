#!/usr/bin/env bash
# bench_zero_engine.sh [HPTRAIN] [--big]: the offload engine under many processes (docs/zero_engine.md).
#  (a) bytes sent per step per process (the communication layer's own count, between steps 2
#      and 3) at stages 0-3 (BENCH_STAGES, default "0 1 2 3") with --offload host, gpt2-124m,
#      N = 2, B=1 T=64, against the ZeRO paper's volumes (stages 0-2: 2 x parameters, stage 3:
#      3 x parameters, in the
#      (N-1)/N form a ring or all-to-all moves, fp32) and against the design's own formula;
#  (b) per-process memory per tier, stages 0, 1, 2, 3, N = 2 and 4, gpt2-124m and
#      gpt2-350m, --offload host and disk (hptrain estimate --procs N; tests/test_zero_engine.sh
#      checks measured = estimated per tier), and measured for the run of (a);
#  (d) (BENCH_PARTS=d) per-process bytes with 8-bit AdamW, Adam-mini and Lion at stages 0-3,
#      their state cut at the shards (estimates; the tests check measured = estimated);
#  (e) (BENCH_PARTS=e) the model state per process (weights, gradients, optimizer state, every
#      tier) at stages 0-3, N = 2 and 4, gpt2-124m and gpt2-350m, the largest rank's, against
#      stage 0 (estimates; tests/test_zero_emb.sh checks measured = estimated per rank);
#  (c) the largest GPT-2 that 4 processes train with stage 3 against stage 0 and one process,
#      from the estimates, RAM = device + host tiers summed over the processes; with --big, 4
#      processes train gpt2-1558m with stage 3 and disk homes for 2 steps (about 9 GiB of RAM
#      and 22 GiB of disk: run under the shared lock).
# Run the timed parts under the shared lock: flock /work/bench.lock bench/bench_zero_engine.sh
set -u
bin=${1:-build/hptrain}
big=0; [ "${2:-}" = "--big" ] && big=1
tmp=$(mktemp -d -p /var/tmp)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=(mpirun --oversubscribe --bind-to none)
mkdir -p "$tmp/disk"
python3 - "$tmp" <<'PY'
import random, struct, sys
random.seed(1)
t = [random.randrange(50257) for _ in range(20000)]
open(sys.argv[1] + "/train_000.bin", "wb").write(
    struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)) + struct.pack("<%dH" % len(t), *t))
PY

parts=${BENCH_PARTS:-abc} # which of (a), (b), (c) to run
if [[ $parts == *a* ]]; then
echo "== (a) bytes sent per step per process, gpt2-124m, N = 2, B=1 T=64 =="
stages=${BENCH_STAGES:-0 1 2 3}
for z in $stages; do
    /usr/bin/time -f "%e s, %M KiB peak RSS (rank 0's mpirun)" "${mpi[@]}" -np 2 "$bin" train --model gpt2-124m \
        --data "$tmp/train_000.bin" --batch 1 --seq 64 --steps 3 --offload host --zero $z --quiet \
        --log "$tmp/a$z.jsonl" 2>"$tmp/a$z.err" || { echo "stage $z failed"; tail -5 "$tmp/a$z.err"; }
    grep -E "done:|data parallel|offload:" "$tmp/a$z.err"
done
python3 - $stages <<PY

import json, sys
C, L, V, T, N, K = 768, 12, 50304, 1024, 2, 2
bn = 12 * C * C + 13 * C             # a block's floats
nb = V * C + T * C + 2 * C           # wte, wpe, the final layernorm
P = L * bn + nb
for z in map(int, sys.argv[1:]):
    r = [json.loads(l) for l in open("$tmp/a%d.jsonl" % z)]
    got = r[2]["dist_sent_bytes"] - r[1]["dist_sent_bytes"]
    x = 2 if z < 3 else 3
    paper = x * P * 4 * (N - 1) / N
    norm = L * 12 * 64 * 8 * (N - 1) if z > 0 else 0  # the norm's chunk sums
    own = 4 * (N - 1) / N * (2 * P if z < 3 else (3 * L - K) * bn + 2 * nb) + norm
    print("stage %d: %.1f MiB per step = %.3f x params x 4 B; the paper's %d x params x (N-1)/N: %.1f MiB (measured/paper %.3f); "
          "the design's formula %.1f MiB (measured/formula %.4f)" % (z, got / 2**20, got / (4 * P), x,
          paper / 2**20, got / paper, own / 2**20, got / own))
    print("  per process measured: device %.1f MiB, host %.1f MiB, disk %.1f MiB" % (
        r[-1]["mem_peak_bytes"] / 2**20, r[-1]["host_peak_bytes"] / 2**20, r[-1]["disk_peak_bytes"] / 2**20))
PY
fi

echo "== (b) per-process bytes per tier (estimates; measured = estimated: tests/test_zero_engine.sh) =="
est() { # MODEL OFFLOAD ZERO N -> device host disk (bytes)
    "$bin" estimate --json --model "$1" --batch 1 --seq 64 --offload "$2" --offload-dir "$tmp/disk" --zero "$3" --procs "$4" |
        python3 -c "import json,sys; t=json.load(sys.stdin)['peak_bytes_by_tier']; print(t['device'], t['host'], t['disk'])"
}
[[ $parts == *b* ]] && printf "%-10s %-5s %-12s %10s %10s %10s %12s\n" model homes stage device host disk "state homes"
[[ $parts == *b* ]] && for m in gpt2-124m gpt2-350m; do
    for off in host disk; do
        read -r d0 h0 k0 < <(est $m $off 0 1)
        for n in 2 4; do
            for z in 0 1 2 3; do
                read -r d h k < <(est $m $off $z $n)
                [ "$off" = host ] && home=$h || home=$k
                [ "$off" = host ] && base=$h0 || base=$k0
                awk -v m=$m -v o=$off -v s="$z, N=$n" -v d=$d -v h=$h -v k=$k -v r=$home -v b=$base 'BEGIN {
                    printf "%-10s %-5s %-12s %8.1f MiB %8.1f MiB %8.1f MiB %8.3f x stage 0\n", m, o, s,
                        d / 1048576, h / 1048576, k / 1048576, r / b }'
            done
        done
    done
done

[[ $parts == *c* ]] && echo "== (c) the largest GPT-2 that fits, RAM (device + host tiers, summed over the processes) <= 20 GiB, disk <= 60 GiB (this machine: 23 GiB of RAM, 61 GiB of disk free) =="
[[ $parts == *c* ]] && for m in gpt2-124m gpt2-350m gpt2-774m gpt2-1558m; do
    for off in host disk; do
        for cfg in "0 1" "0 4" "3 4"; do
            set -- $cfg
            read -r d h k < <(est $m $off $1 $2)
            ram=$(( (d + h) * $2 )); dsk=$(( k * $2 ))
            fits=no; [ $ram -le $((20 << 30)) ] && [ $dsk -le $((60 << 30)) ] && fits=yes
            awk -v m=$m -v o=$off -v z=$1 -v n=$2 -v r=$ram -v k=$dsk -v f=$fits 'BEGIN {
                printf "%-10s %-5s stage %s x %s processes: RAM %6.2f GiB, disk %6.2f GiB: %s\n", m, o, z, n,
                    r / 1073741824, k / 1073741824, f }'
        done
    done
done

# (d) the optimizer states optim.c keeps (8-bit, Lion, Adam-mini), cut at the shards: per-process
# bytes (rank 0) at stages 0-3, host homes (BENCH_PARTS=d: estimates only, no lock needed)
if [[ $parts == *d* ]]; then
echo "== (d) per-process bytes with the cut optimizer state, B=1 T=64, --offload host, rank 0 (MiB) =="
for m in gpt2-124m gpt2-350m; do
    for opt in "--state-bits 8" "--optimizer adam-mini --state-bits 8" "--optimizer lion --state-bits 8"; do
        row="$m $opt:"
        for cfg in "0 1" "1 2" "2 2" "3 2" "3 4"; do
            set -- $cfg
            # shellcheck disable=SC2086 # $opt is several options
            row+=$("$bin" estimate --json --model $m --batch 1 --seq 64 --offload host $opt --zero $1 --procs $2 |
                python3 -c "import json,sys; t=json.load(sys.stdin)['peak_bytes_by_tier']; print(' stage $1 N=$2 device %.1f host %.1f;' % (t['device'] / 2**20, t['host'] / 2**20), end='')")
        done
        echo "$row"
    done
done
fi

# (e) the model state per process (weights, gradients and optimizer state, every tier: hptrain
# estimate's params + grads + optim), stages 0-3 against stage 0, N = 2 and 4 (BENCH_PARTS=e:
# estimates, no lock needed; measured = estimated per tier and rank: tests/test_zero_emb.sh)
if [[ $parts == *e* ]]; then
echo "== (e) model state per process (params + grads + optim, all tiers), B=1 T=64, --offload host =="
for m in ${BENCH_MODELS:-gpt2-124m gpt2-350m}; do # e.g. BENCH_MODELS="gpt2-774m gpt2-1558m"
    for opt in "" "--state-bits 8" "--fused-update --embeddings chunked"; do
        for n in 2 4; do
            # shellcheck disable=SC2086 # $opt is several options
            python3 - "$bin" "$m" "$n" $opt <<'PY'
import json, subprocess, sys
b, m, n, opt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def state(z, r):
    e = json.loads(subprocess.check_output([b, "estimate", "--json", "--model", m, "--batch", "1", "--seq", "64",
        "--offload", "host", "--zero", str(z), "--procs", str(n), "--rank", str(r)] + opt))["bytes"]
    return sum(e[t][c] for t in e for c in ("params", "grads", "optim"))
s0 = state(0, 0)
row = "%-9s %-36s N=%d: stage 0 %7.1f MiB" % (m, " ".join(opt) or "AdamW fp32", n, s0 / 2**20)
for z in (1, 2, 3):
    big = max(state(z, r) for r in range(n))
    row += "; stage %d %7.1f MiB (%.3f x, 1/N = %.3f)" % (z, big / 2**20, big / s0, 1 / n)
print(row)
PY
        done
    done
done
fi

if [ $big = 1 ]; then
    echo "== (c') 4 processes train gpt2-1558m, stage 3, disk homes, --fused-update, B=1 T=64, 2 steps =="
    /usr/bin/time -f "%e s wall, %M KiB peak RSS of one process" "${mpi[@]}" -np 4 "$bin" train --model gpt2-1558m \
        --data "$tmp/train_000.bin" --batch 1 --seq 64 --steps 2 --offload disk --offload-dir "$tmp/disk" \
        --fused-update --zero 3 --log "$tmp/big.jsonl" 2>"$tmp/big.err" || { echo "big run failed"; tail -5 "$tmp/big.err"; }
    grep -E "done:|data parallel|offload:|peak|RSS" "$tmp/big.err" | head -12
    cat "$tmp/big.jsonl"
fi
