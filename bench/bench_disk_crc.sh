#!/usr/bin/env bash
# bench_disk_crc.sh: the cost of the disk tier's page checksums (CRC-32C on every write, checked
# on every read; src/mem/disk.c). Builds the command line a second time with -DHPT_DISK_NO_VERIFY
# (build-nocrc/, the only difference), then runs both side by side with bench/pair.sh on
# GPT-2 124M training steps with weights, gradients and AdamW state on disk (--offload disk):
# the median tokens/s ratio with checksums / without.
# Usage: bench/bench_disk_crc.sh [--configs "4x64"] [--steps S] [--rounds R] [--dir DIR]
#        DIR: the disk tier's directory (default a fresh one under /var/tmp, a real file system
#        so direct I/O is used), removed at the end.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CONFIGS="4x64" STEPS=4 ROUNDS=3 DIR=""
while [ $# -gt 0 ]; do
    case "$1" in
    --configs) CONFIGS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    *) echo "usage: $0 [--configs \"BxT ...\"] [--steps S] [--rounds R] [--dir DIR]" >&2; exit 2 ;;
    esac
done
[ -x "$ROOT/build/hptrain" ] || { echo "no build/hptrain: build first" >&2; exit 1; }
cmake -S "$ROOT" -B "$ROOT/build-nocrc" -DHPT_SANITIZE=OFF -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_FLAGS=-DHPT_DISK_NO_VERIFY >/dev/null || exit 1
make -C "$ROOT/build-nocrc" -j"$(nproc)" hptrain_cli 2>&1 | grep -E "error|warning"
[ -n "$DIR" ] || DIR=$(mktemp -d /var/tmp/hpt_crc_bench_XXXXXX)
trap 'rm -rf "$DIR"' EXIT
echo "== bench_disk_crc: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, disk tier in $DIR ($(stat -f -c %T "$DIR"))"
echo "A: without checksums (build-nocrc), B: with (build); B/A < 1 is the cost"
"$ROOT/bench/pair.sh" "$ROOT/build-nocrc/hptrain" "$ROOT/build/hptrain" --configs "$CONFIGS" \
    --steps "$STEPS" --rounds "$ROUNDS" -- --offload disk --offload-dir "$DIR"
