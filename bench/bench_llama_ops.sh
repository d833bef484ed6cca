#!/usr/bin/env bash
# The Llama family's CPU ops against plain scalar loops, ns per element (bench/bench_llama_ops.c).
# Usage: bench/bench_llama_ops.sh [N C FF NH NKV hd]   (BUILD=dir picks the build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF >/dev/null
cmake --build "$build" --target hptrain -j2 >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Isrc bench/bench_llama_ops.c "$build/libhptrain.a" \
  -fopenmp -ldnnl -lpcre2-8 -lcjson -lmvec -lm -o "$build/bench_llama_ops"
"$build/bench_llama_ops" "$@"
