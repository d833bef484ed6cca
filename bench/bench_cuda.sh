#!/usr/bin/env bash
# bench/bench_cuda.sh: hptrain's CUDA backend beside PyTorch 2.x on one GPU (docs/cuda.md).
# WRITTEN, NEVER RUN: the session that wrote it had no GPU; run it on an H100 or H200.
#
# In one run:
#   1. the GPU's GEMM peaks through cuBLAS (bench_cuda peak): bf16 inputs with fp32 accumulation
#      (the MFU denominator for every row below), TF32 and fp32;
#   2. per shape (gpt2-124m, gpt2-350m; PyTorch also the llama3.2-1b shape):
#      hptrain: the GPT-2 step built from the CUDA backend's ops (fp32: the table has no bf16
#               path yet; the runner does not use the GPU yet), bench_cuda step;
#      PyTorch: eager and torch.compile, bf16 autocast with fp32 master weights, fused AdamW
#               (bench/torch_cuda.py);
#      each as tokens/s, MFU against the measured bf16 peak, and peak device memory (hptrain:
#      accounted and cudaMemGetInfo's; PyTorch: max_memory_allocated and _reserved).
# The table goes to stdout, the JSON lines to $OUT (default build/bench_cuda.jsonl).
#
# usage: bench/bench_cuda.sh [--quick] [--steps S] [--python PY]
#   --quick  small shapes: checks the plumbing; the figures mean nothing
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
steps=10
quick=0
py=python3
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1; shift ;;
    --steps) steps=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--steps S] [--python PY]" >&2; exit 2 ;;
    esac
done
out=${OUT:-$build/bench_cuda.jsonl}

[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF >/dev/null
[ -d "$build/CMakeFiles/hptrain_cuda.dir" ] ||
    { echo "bench_cuda: $build has no CUDA backend (nvcc not found at configure time)" >&2; exit 1; }
cmake --build "$build" --target bench_cuda -j >/dev/null   # the CMake target (CMakeLists.txt)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$py -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'

: > "$out"
"$build/bench_cuda" peak | tee -a "$out"
peak=$($py -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["bf16_peak_tflops"])' "$out")

if [ $quick = 1 ]; then
    gpt_shapes=("2 128 4 4 256")           # L C NH B T
    llama_shapes=()
else
    gpt_shapes=("12 768 12 8 1024" "24 1024 16 8 1024")
    llama_shapes=("--L 16 --C 2048 --NH 32 --NKV 8 --FF 8192 --V 128256 --B 4 --T 2048")
fi
for s in "${gpt_shapes[@]}"; do
    read -r L C NH B T <<<"$s"
    "$build/bench_cuda" step "$L" "$C" "$NH" "$B" "$T" "$steps" | tee -a "$out"
    for c in "" "--compile"; do
        $py bench/torch_cuda.py --arch gpt2 --L "$L" --C "$C" --NH "$NH" --B "$B" --T "$T" --steps "$steps" \
            --peak-tflops "$peak" $c | tee -a "$out" || echo "torch $c failed" >&2
    done
done
for s in "${llama_shapes[@]}"; do
    for c in "" "--compile"; do
        # shellcheck disable=SC2086
        $py bench/torch_cuda.py --arch llama $s --steps "$steps" --peak-tflops "$peak" $c | tee -a "$out" ||
            echo "torch llama $c failed" >&2
    done
done

$py - "$out" "$peak" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peak = float(sys.argv[2])
print(f"\nbf16 GEMM peak (cuBLAS, measured above): {peak:.1f} TFLOP/s")
print(f"{'impl':34} {'shape':22} {'tokens/s':>10} {'MFU':>6} {'peak MiB':>10} {'memgetinfo MiB':>15}")
for r in rows[1:]:
    shape = f"L{r['L']} C{r['C']} B{r['B']} T{r['T']}"
    mfu = r["flops_per_token"] * r["tokens_per_s"] / (peak * 1e12)
    mem = r.get("accounted_peak_bytes", r.get("max_memory_allocated", 0)) / 2**20
    mgi = r.get("memgetinfo_used_bytes", r.get("max_memory_reserved", 0)) / 2**20
    print(f"{r['impl']:34} {shape:22} {r['tokens_per_s']:10.0f} {mfu:6.1%} {mem:10.0f} {mgi:15.0f}")
EOF
