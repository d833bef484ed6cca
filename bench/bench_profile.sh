#!/usr/bin/env bash
# Builds the library (Release) and bench/bench_profile.c, then runs the memory benchmark of the
# GPT-2 124M shape: estimated peak, accounted peak, RSS peak, profiler overhead (recording on vs
# off). Usage: bench/bench_profile.sh [--pairs N] [--threads N]   (BUILD=dir to pick the build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF >/dev/null
cmake --build "$build" --target hptrain -j2 >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude bench/bench_profile.c "$build/libhptrain.a" \
  -fopenmp -ldnnl -lpcre2-8 -lcjson -lmvec -lm -o "$build/bench_profile"
exec "$build/bench_profile" "$@"
