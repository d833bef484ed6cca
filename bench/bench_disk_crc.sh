#!/usr/bin/env bash
# bench_disk_crc.sh: the cost of the disk tier's page checksums (CRC-32C set on every write,
# checked on every read; src/mem/disk.c). Builds the command line a second time with
# -DHPT_DISK_NO_VERIFY (build-nocrc/, the only difference), then runs both in turns (A B, B A, ...)
# on a short training run with weights, gradients and AdamW state on disk (--offload disk):
# per pair the ratio of tokens/s (steps after the first) and of CPU seconds (user + system; on
# a shared machine steadier than time), medians over the pairs. Then the bound from first
# principles: the bytes a step moves through the disk tier (the offload report) over the
# checksum's measured rate (bench/bench_crc32c.c), against the step time.
# Usage: bench/bench_disk_crc.sh [--model SHAPE] [--batch B] [--seq T] [--steps S] [--rounds R]
#        [--dir DIR]   (DIR: the disk tier's directory; default a fresh one under /var/tmp, a
#        real file system, so direct I/O is used; removed at the end)
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODEL="gpt2:L=6,C=512,NH=8" B=4 T=64 STEPS=4 ROUNDS=3 DIR=""
while [ $# -gt 0 ]; do
    case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
[ -x "$ROOT/build/hptrain" ] || { echo "no build/hptrain: build first" >&2; exit 1; }
cmake -S "$ROOT" -B "$ROOT/build-nocrc" -DHPT_SANITIZE=OFF -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_FLAGS=-DHPT_DISK_NO_VERIFY >/dev/null || exit 1
make -C "$ROOT/build-nocrc" -j"$(nproc)" hptrain_cli 2>&1 | grep -E "error|warning"
[ -n "$DIR" ] || DIR=$(mktemp -d /var/tmp/hpt_crc_bench_XXXXXX)
TMP=$(mktemp -d)
trap 'rm -rf "$DIR" "$TMP"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=PASSIVE
echo "== bench_disk_crc: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), disk tier in $DIR ($(stat -f -c %T "$DIR"))"
echo "$MODEL B=$B T=$T, $STEPS steps, --offload disk; A: without checksums (build-nocrc), B: with (build)"
gcc -O3 -march=native -std=c11 -D_GNU_SOURCE -I"$ROOT/src" "$ROOT/bench/bench_crc32c.c" \
    "$ROOT/src/core/crc32c.c" -o "$TMP/bench_crc32c" -lpthread && "$TMP/bench_crc32c" | tee "$TMP/rate"
. "$ROOT/bench/random_shard.sh"
random_shard "$TMP" 400000
tps_r=() cpu_r=()
for r in $(seq 1 "$ROUNDS"); do
    order="nocrc crc"; [ $((r % 2)) -eq 0 ] && order="crc nocrc" # turns: no order bias
    for which in $order; do
        bin="$ROOT/build/hptrain"; [ $which = nocrc ] && bin="$ROOT/build-nocrc/hptrain"
        /usr/bin/time -f "%U %S" -o "$TMP/time.$which" "$bin" train --model "$MODEL" \
            --data "$TMP/train_000.bin" --batch "$B" --seq "$T" --steps "$STEPS" --offload disk \
            --offload-dir "$DIR" --log "$TMP/log.$which" > "$TMP/out.$which" 2>&1 ||
            { echo "run failed: $(tail -n 2 "$TMP/out.$which")"; exit 1; }
    done
    line=$(python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
def tps(w):
    r = [json.loads(l) for l in open(f"{d}/log.{w}")][1:]
    return sum(x["tokens_per_s"] for x in r) / len(r)
def cpu(w):
    u, s = open(f"{d}/time.{w}").read().split()[-2:]
    return float(u) + float(s)
a, b = tps("nocrc"), tps("crc")
ca, cb = cpu("nocrc"), cpu("crc")
print("%.4f %.4f A %.1f tok/s %.1f CPU s, B %.1f tok/s %.1f CPU s" % (b / a, cb / ca, a, ca, b, cb))
PY
)
    read -r tr cr rest <<< "$line"
    tps_r+=("$tr"); cpu_r+=("$cr")
    echo "round $r: $rest: tokens/s B/A $tr, CPU seconds B/A $cr"
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median over $ROUNDS pairs: tokens/s with/without checksums $(med "${tps_r[@]}"), CPU seconds $(med "${cpu_r[@]}") (load $(cut -d' ' -f1 /proc/loadavg))"
python3 - "$TMP/out.crc" "$TMP/log.crc" "$TMP/rate" <<'PY'
import json, re, sys
out = open(sys.argv[1]).read()
m = re.search(r"disk in ([\d.]+) MiB out ([\d.]+) MiB", out)
steps = [json.loads(l) for l in open(sys.argv[2])][1:]
rate = float(re.search(r"crc32c_pages ([\d.]+) GB/s", open(sys.argv[3]).read()).group(1))
if m and steps:
    mib = float(m.group(1)) + float(m.group(2))
    step_s = sum(s["step_ms"] for s in steps) / len(steps) / 1e3
    crc_s = mib * 2**20 / (rate * 1e9)
    print("bound: %.0f MiB a step through the disk tier, checksummed in %.3f CPU s at %.1f GB/s; "
          "step %.2f s: %.2f%% of the step if none of it overlapped compute"
          % (mib, crc_s, rate, step_s, 100 * crc_s / step_s))
PY
