#!/bin/bash
# bench/bench_mlptile.sh: what the tiled MLP (--mlp-tile, docs/activations.md) costs at short
# T, where nothing needs it (bench/bench_mlptile.c: untiled and tiled in turns in one process,
# each variant's best round). With --base DIR (a source tree built before the tiling, its
# build/libhptrain.a made), the untiled step of that tree and of this one, in turns ROUNDS
# times: the untiled default's speed before and after.
#
# usage: bench/bench_mlptile.sh [--base DIR] [--rounds R] [-- BENCH ARGS (SHAPE B T THREADS ...)]
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE="" ROUNDS=3 ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
    --base) BASE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --) shift; ARGS=("$@"); break ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
    esac
done
build() { # source tree, output, extra flags
    cc -O2 -std=c11 -D_GNU_SOURCE "${@:3}" -I"$1/include" -I"$1/src" "$ROOT/bench/bench_mlptile.c" \
        "$1/build/libhptrain.a" -fopenmp -ldnnl -lpcre2-8 -lcjson -lutf8proc -lmvec -lm -o "$2"
}
[ -f "$ROOT/build/libhptrain.a" ] || { echo "no $ROOT/build/libhptrain.a: build first" >&2; exit 1; }
build "$ROOT" "$ROOT/build/bench_mlptile" || exit 1
echo "== bench_mlptile: $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1 /proc/loadavg)"
"$ROOT/build/bench_mlptile" "${ARGS[@]}"
[ -n "$BASE" ] || exit 0
build "$BASE" "$ROOT/build/bench_mlptile_base" -DHPT_BENCH_UNTILED_ONLY || exit 1
build "$ROOT" "$ROOT/build/bench_mlptile_untiled" -DHPT_BENCH_UNTILED_ONLY || exit 1
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r: base  $("$ROOT/build/bench_mlptile_base" "${ARGS[@]}" | tail -1)"
    echo "round $r: this  $("$ROOT/build/bench_mlptile_untiled" "${ARGS[@]}" | tail -1)"
done
echo "load after: $(cut -d' ' -f1 /proc/loadavg)"
