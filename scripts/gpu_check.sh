#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU check in one command (issue 32; docs/cuda.md, "Checking it on a
# GPU"). On a bare device machine (CUDA, PyTorch; no oneDNN, cJSON, PCRE2 or Open MPI, no package
# registry) it builds hptrain's GPU targets against the libraries in .gpu_deps/ (Debian's
# packages, unpacked from one archive that this script prepares here with --prepare), then runs,
# each stage under a timeout and all within the budget (GPU_CHECK_BUDGET, 470 s), most important
# first so that a timeout keeps what came before:
#   env        the GPU, driver, nvcc, PyTorch (nvidia-smi, nvcc --version)
#   build      cmake (sm_90 only, no MPI, no sanitizer variant), the GPU tests, hptrain, bench_cuda
#   reference  PyTorch's tiny GPT-2 reference state for test_cuda_gpt2 (tests/make_ref_state.py)
#   test_cuda, test_backend, test_cuda_train, test_cuda_gpt2
#              one at a time, HPT_REQUIRE_GPU=1: a CUDA backend that does not start fails
#   nccl       the NCCL transport (src/dist/nccl.c) op by op against the CPU's values: test_nccl on a
#              one-rank communicator (every op, the rank-order sum on the device); test_nccl 2
#              (two forked ranks) only where two GPUs are visible: NCCL refuses two ranks on one
#              GPU ("Duplicate GPU detected", NCCL issue #1241). NCCL: /usr/local/cuda's, else
#              PyTorch's nvidia/nccl wheel (include/, lib/libnccl.so.2, an rpath to it)
#   train      hptrain train on a tiny GPT-2 for 20 steps, --device cpu and --device cuda:
#              the losses side by side
#   lora       LoRA on --device cuda (HPT_UNVERIFIED_CUDA_LORA=1: refused without it) against the
#              same run on the CPU: a small odd Llama and GPT-2, base f32/bf16/int8/nf4 homed on
#              the device and the host (and the disk: the Llama's f32 and nf4), 3 steps each: the
#              losses (relative difference) and the saved adapters (largest absolute difference)
#              within 1e-5; the accounted device peak equal to hptrain estimate --device cuda's
#   transformers  Hugging Face directories written by tests/hf_write.py (Mistral with a sliding
#              window below T, Qwen2, Qwen3, Gemma 3) through transformers' own classes
#              (tests/hf_transformers_loss.py)
#              against hptrain eval on the CPU and the GPU: the losses within 1e-5 (skipped
#              without transformers)
#   sanitizer  test_backend under compute-sanitizer --tool memcheck
#   gemm       cuBLAS's fp32, TF32 and bf16 GEMM peaks (bench_cuda peak)
#   gpt2       gpt2-124m (B 8, T 1024): hptrain --device cuda, PyTorch eager and torch.compile
#              (bf16 autocast): tokens/s and MFU against the bf16 peak
#   calibrate  hptrain calibrate --device cuda (into a calibration file of its own), then estimate
#              of gpt2-124m (B 8, T 1024) --device cuda: the predicted step time beside the one the
#              gpt2 stage measured
#   llama8b    llama3.1-8b at --memory 24GB, 3 steps (bench/bench_gpu_8b.sh --quick): tokens/s,
#              the GPU's used memory (nvidia-smi) against the estimate, PCIe bytes against the minimum
#   llama1b    the llama3.2-1b shape (B 2, T 1024): hptrain, PyTorch eager and torch.compile
# It writes report.md, results.jsonl and logs.tar.gz (every stage's log) under $OUT (out/gpu_check
# when OUT is unset), rewritten after each stage; at most 8 files come back from a device call.
#
# usage: scripts/gpu_check.sh [--dry-run] [--prepare] [--only S1,S2] [--from STAGE] [--budget SECONDS]
#                             [--build DIR]
#   --dry-run  on a machine without a GPU: every step that needs none (the deps folder made and
#              unpacked, the size of what travels, a configure against the deps, the reference,
#              the CPU training run and the estimates, parsed; the report), the GPU stages marked
#              skipped; reuses the build tree DIR (default build) instead of building; exits 0
#              unless a non-GPU step failed
#   --prepare  only make .gpu_deps/deps.tar.xz (from the Debian packages) and exit
#   GPU_CHECK_TF32=1  the gpt2 and llama1b stages also run hptrain with TF32 GEMMs (HPT_CUDA_TF32=1)
#   GPU_CHECK_NO_TORCH=1  the gpt2 and llama1b stages without PyTorch's runs (hptrain's alone:
#              a rerun after a change to hptrain, PyTorch's figures already in hand)
#   --only, --from  run these stages / this stage and the ones after it, beside the setup stages
#              (env, deps, build, reference: a second call on the same warm machine finds the
#              build tree build-gpu there and builds only what changed)
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DRY=0
PREPARE=0
ONLY=""
FROM=""
BUDGET=${GPU_CHECK_BUDGET:-470}
BUILD=""
while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) DRY=1; shift ;;
    --prepare) PREPARE=1; shift ;;
    --only) ONLY=",$2,"; shift 2 ;;
    --from) FROM=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    *) echo "usage: $0 [--dry-run] [--prepare] [--only S1,S2] [--from STAGE] [--budget S] [--build DIR]" >&2
       exit 2 ;;
    esac
done
[ -n "$BUILD" ] || { [ $DRY = 1 ] && BUILD=build || BUILD=build-gpu; }
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
DEPS_DIR=${GPU_DEPS_DIR:-$ROOT/.gpu_deps} # where --prepare writes the archive (the ctest: its build tree)
DEPS_TAR="$DEPS_DIR/deps.tar.xz"
# Debian's runtime and development packages of what the device machine lacks; libdnnl needs
# libOpenCL.so.1 (ocl-icd) to load
DEPS_PKGS="libdnnl2 libdnnl-dev libcjson1 libcjson-dev libpcre2-8-0 libpcre2-dev libutf8proc2 libutf8proc-dev ocl-icd-libopencl1"
TRAVEL_LIMIT=$((64 * 1024 * 1024))
# a python3 with PyTorch: the device's python3 (PyTorch's own), Debian's /usr/bin/python3 here
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for p in python3 /usr/bin/python3; do
        "$p" -c 'import torch' 2>/dev/null && { PY=$p; break; }
    done
    PY=${PY:-python3}
fi

# ---- the deps archive (here, where apt works) ----
prepare_deps() {
    local tmp debs p f
    tmp=$(mktemp -d /tmp/gpu_deps.XXXXXX)
    debs="$tmp/debs"
    mkdir -p "$debs" "$tmp/root"
    for p in $DEPS_PKGS; do
        # the local apt cache first, else apt-get download (the registry's ordinary client)
        f=$(ls /var/cache/apt/archives/"${p}"_*_amd64.deb 2>/dev/null | sort -V | tail -n 1)
        if [ -n "$f" ]; then cp "$f" "$debs/"
        else (cd "$debs" && apt-get download "$p") || { echo "gpu_check: cannot get $p here" >&2; rm -rf "$tmp"; return 3; }
        fi
    done
    for f in "$debs"/*.deb; do dpkg -x "$f" "$tmp/root" || { rm -rf "$tmp"; return 1; }; done
    rm -rf "$tmp/root/usr/share" "$tmp/root/etc"
    find "$tmp/root" -name '*.a' -delete # shared libraries only
    mkdir -p "$DEPS_DIR"
    (cd "$debs" && ls -1 *.deb) > "$tmp/root/MANIFEST"
    # xz -1: a tenth of -6's time on two busy cores, 8 MB instead of 7
    XZ_OPT="-1 -T2" tar -C "$tmp/root" -cJf "$DEPS_TAR.part" . && mv "$DEPS_TAR.part" "$DEPS_TAR" || { rm -rf "$tmp"; return 1; }
    cp "$tmp/root/MANIFEST" "$DEPS_DIR/MANIFEST"
    rm -rf "$tmp"
    echo "gpu_check: $DEPS_TAR: $(du -h "$DEPS_TAR" | cut -f1) from $(tr '\n' ' ' < "$DEPS_DIR/MANIFEST")"
}
if [ $PREPARE = 1 ]; then prepare_deps; exit $?; fi

OUT=${OUT:-$ROOT/out/gpu_check}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
mkdir -p "$WORK/logs" "$WORK/detail" "$WORK/data"
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"
T0=$(date +%s)
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
if [ $DRY = 1 ]; then DEPS="$WORK/deps"; else DEPS=/tmp/hpt_deps; fi
DEPLIB="$DEPS/usr/lib/x86_64-linux-gnu"
HPT="$BUILD/hptrain"

# ---- the stage runner ----
# stage NAME LIMIT KIND FN: FN (a function of this file) runs under `timeout` for LIMIT seconds or
# what is left of the budget, its output in logs/NAME.log; KIND gpu: skipped in a dry run. FN may
# write a one-line note to $WORK/note, a status (skipped, fail) to $WORK/status, and markdown to
# $WORK/detail/NAME.md. After each stage the report and the logs are rewritten under $OUT.
started=0
wanted() {
    # the setup stages always run (on a warm machine: the archive unpacked again, an incremental
    # build, the reference kept), so that a second call builds what was fixed between the calls
    case "$1" in env|deps|size|build|reference) return 0 ;; esac
    if [ -n "$ONLY" ]; then case "$ONLY" in *",$1,"*) return 0 ;; *) return 1 ;; esac; fi
    if [ -n "$FROM" ] && [ $started = 0 ]; then [ "$1" = "$FROM" ] && started=1 || return 1; fi
    return 0
}
record() { # name status seconds note
    "$PY" -c 'import json,sys; print(json.dumps({"stage":sys.argv[1],"status":sys.argv[2],"secs":int(sys.argv[3]),"note":sys.argv[4]}))' \
        "$1" "$2" "$3" "$4" >> "$RESULTS"
    printf '%-16s %-8s %4ss  %s\n' "$1" "$2" "$3" "$4"
    write_report
}
stage() {
    local name=$1 limit=$2 kind=$3 fn=$4 left t rc st note
    wanted "$name" || return 0
    if [ $DRY = 1 ] && [ "$kind" = gpu ]; then record "$name" skipped 0 "dry run: needs a GPU"; return 0; fi
    left=$((BUDGET - ($(date +%s) - T0) - 5))
    if [ $left -lt 15 ]; then record "$name" skipped 0 "out of time (budget ${BUDGET} s): run it with --from $name"; return 0; fi
    [ "$limit" -gt $left ] && limit=$left
    rm -f "$WORK/note" "$WORK/status"
    t=$(date +%s)
    STAGE=$name timeout -k 10 "$limit" bash -c "set -o pipefail; $fn" > "$WORK/logs/$name.log" 2>&1
    rc=$?
    t=$(($(date +%s) - t))
    note=$(cat "$WORK/note" 2>/dev/null || true)
    if [ $rc = 124 ] || [ $rc = 137 ]; then st=timeout; note="timed out after ${limit} s; ${note:-$(tail -n 1 "$WORK/logs/$name.log")}"
    elif [ -s "$WORK/status" ]; then st=$(cat "$WORK/status")
    elif [ $rc = 0 ]; then st=pass
    elif [ $rc = 77 ]; then st=skipped
    else st=fail; [ -n "$note" ] || note="exit $rc: $(tail -n 1 "$WORK/logs/$name.log")"
    fi
    record "$name" "$st" "$t" "$note"
}

write_report() {
    tar -C "$WORK" -czf "$OUT/logs.tar.gz.part" logs detail results.jsonl 2>/dev/null && mv "$OUT/logs.tar.gz.part" "$OUT/logs.tar.gz"
    cp "$RESULTS" "$OUT/results.jsonl"
    "$PY" - "$WORK" "$OUT/report.md" "$DRY" "$BUDGET" "$(($(date +%s) - T0))" <<'EOF'
import json, os, sys
work, path, dry, budget, elapsed = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4], sys.argv[5]
rows = [json.loads(l) for l in open(os.path.join(work, "results.jsonl")) if l.strip()]
env = open(os.path.join(work, "env.txt")).read().strip() if os.path.exists(os.path.join(work, "env.txt")) else ""
out = ["# hptrain GPU check" + (" (dry run: no GPU stage ran)" if dry else ""), ""]
if env:
    out += ["```", env, "```", ""]
out += [f"elapsed {elapsed} s of a {budget} s budget", "",
        "| stage | status | s | result |", "| --- | --- | --- | --- |"]
for r in rows:
    out.append(f"| {r['stage']} | {r['status']} | {r['secs']} | {r['note'].replace('|', '/')} |")
out.append("")
for r in rows:
    d = os.path.join(work, "detail", r["stage"] + ".md")
    if os.path.exists(d):
        out += [f"## {r['stage']}", "", open(d).read().rstrip(), ""]
open(path, "w").write("\n".join(out) + "\n")
EOF
}

# ---- helpers the stages share (exported: the stages run in bash -c) ----
note() { echo "$*" > "$WORK/note"; }
status() { echo "$1" > "$WORK/status"; }
detail() { cat >> "$WORK/detail/$STAGE.md"; }
# shard FILE N V: an llm.c token shard of N random tokens below V (uint16, or uint32 version 7
# when V > 65535), seed 1; the same tokens on every machine
shard() {
    "$PY" - "$1" "$2" "$3" <<'EOF'
import random, struct, sys
path, n, V = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(1)
big = V > 65535
# a learnable stream: a random walk over a table of 4096 random tokens, so the loss falls
table = [rnd.randrange(V) for _ in range(4096)]
toks, j = [], 0
for i in range(n):
    j = (j + 1 + (rnd.randrange(8) == 0) * rnd.randrange(4096)) % 4096
    toks.append(table[j])
hdr = [20240801, 7, n] if big else [20240520, 1, n]
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *(hdr + [0] * 253)))
    f.write(struct.pack("<%d%s" % (n, "I" if big else "H"), *toks))
EOF
}
# bf16_peak: the bf16 GEMM peak (TFLOP/s) of this call's gemm stage or an earlier call's; 0: none
bf16_peak() {
    local f
    for f in "$WORK/peak.json" "$BUILD/peak.json"; do
        [ -s "$f" ] && { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["bf16_peak_tflops"])' "$f"; return; }
    done
    echo 0
}
# flops_per_token ESTIMATE_OUTPUT: "FLOPs/token 798.09 MFLOP" in FLOPs
flops_per_token() {
    "$PY" -c '
import re, sys
m = re.search(r"FLOPs/token ([0-9.]+) ([KMGT]?)FLOP", open(sys.argv[1]).read())
print(float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)] if m else 0)' "$1"
}
# mean_tps LOG: the mean tokens_per_s of steps 2.. of a --log file (the first warms up)
mean_tps() {
    "$PY" -c '
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t = [x["tokens_per_s"] for x in s[1:]] or [x["tokens_per_s"] for x in s]
print("%.1f" % (sum(t) / len(t)) if t else 0)' "$1"
}
export -f note status detail shard bf16_peak flops_per_token mean_tps
export WORK DRY ROOT BUILD HPT DEPS DEPLIB DEPS_TAR PY TRAVEL_LIMIT DEPS_DIR

# ---- the stages ----
st_env() {
    {
        # the device's copy of .git can be older than the working tree that travelled: the
        # changed files' count says so (a device call sends the tree, not the commits)
        echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(n=$(git -C "$ROOT" status --porcelain -uno 2>/dev/null | wc -l); [ "$n" -gt 0 ] && echo " + $n changed files")" \
            "on $(uname -n), $(nproc) cores, $(date -u +%FT%TZ)"
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
        (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | tail -n 1
        "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -n 1
        command -v compute-sanitizer >/dev/null && echo "compute-sanitizer: $(command -v compute-sanitizer)" ||
            { [ -x /usr/local/cuda/bin/compute-sanitizer ] && echo "compute-sanitizer: /usr/local/cuda/bin" || echo "compute-sanitizer: none"; }
    } | tee "$WORK/env.txt"
    note "$(sed -n 2p "$WORK/env.txt")"
}

st_deps() {
    if [ $DRY = 1 ] && [ ! -s "$DEPS_TAR" ]; then
        bash "$ROOT/scripts/gpu_check.sh" --prepare
        case $? in
        0) ;;
        3) note "the Debian packages cannot be got on this machine (no apt cache, no registry)"; status skipped; exit 0 ;;
        *) note "--prepare failed"; exit 1 ;;
        esac
    fi
    if [ $DRY = 0 ] && [ ! -s "$DEPS_TAR" ]; then
        # no archive carried: the machine must have the libraries itself
        ldconfig -p | grep -q libdnnl || { note "no .gpu_deps/deps.tar.xz (carry .gpu_deps) and no libdnnl here"; exit 1; }
        note "no archive: the system's libraries"; exit 0
    fi
    mkdir -p "$DEPS"
    tar -C "$DEPS" -xJf "$DEPS_TAR" ||
        "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$DEPS_TAR" "$DEPS" || exit 1
    for l in libdnnl.so libcjson.so libpcre2-8.so libutf8proc.so libOpenCL.so.1; do
        [ -e "$DEPLIB/$l" ] || { note "$l missing from the archive"; exit 1; }
    done
    # a program against the archive's headers and libraries alone: they load and answer
    cat > "$WORK/deps_probe.c" <<'EOF'
#include <cjson/cJSON.h>
#include <dnnl.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
int main(void) {
    const dnnl_version_t *v = dnnl_version();
    char p[64];
    pcre2_config(PCRE2_CONFIG_VERSION, p);
    printf("oneDNN %d.%d.%d, cJSON %s, PCRE2 %s\n", v->major, v->minor, v->patch, cJSON_Version(), p);
    return 0;
}
EOF
    "$(command -v cc || echo gcc)" -I"$DEPS/usr/include" "$WORK/deps_probe.c" -L"$DEPLIB" -Wl,-rpath-link,"$DEPLIB" \
        -ldnnl -lcjson -lpcre2-8 -o "$WORK/deps_probe" || { note "the probe does not build against the archive"; exit 1; }
    LD_LIBRARY_PATH="$DEPLIB" "$WORK/deps_probe" > "$WORK/probe.txt" || { note "the probe does not run"; exit 1; }
    note "$(du -h "$DEPS_TAR" | cut -f1) archive: $(cat "$WORK/probe.txt")"
}

st_size() {
    # what a device call sends: tracked and untracked-not-ignored files, plus the carried .gpu_deps
    local tree deps total
    tree=$(git -C "$ROOT" ls-files -co --exclude-standard -z | (cd "$ROOT" && xargs -0 -r stat -L -c %s 2>/dev/null) |
           awk '{s += $1} END {print s + 0}')
    deps=$(du -sb "$DEPS_DIR" 2>/dev/null | cut -f1)
    total=$((tree + ${deps:-0}))
    note "$((total / 1048576)) MiB travel (tree $((tree / 1048576)) MiB + $(basename "$DEPS_DIR") $((${deps:-0} / 1048576)) MiB) of 64 MiB"
    [ $total -le $TRAVEL_LIMIT ]
}

# NCCL for the nccl transport: the toolkit's where it has one (CMake finds it), else the one in
# PyTorch's wheels (nvidia/nccl: include/nccl.h, lib/libnccl.so.2), passed by path with an rpath
NCCL_DIR=""
if [ ! -e /usr/local/cuda/include/nccl.h ]; then
    NCCL_DIR=$("$PY" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
    [ -e "$NCCL_DIR/include/nccl.h" ] && [ -e "$NCCL_DIR/lib/libnccl.so.2" ] || NCCL_DIR=""
fi
export NCCL_DIR
CONFIGURE_ARGS() { # the device's configure, against the deps archive: one argument per line
    printf '%s\n' -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF -DHPT_MPI=OFF -DHPT_GENERIC_V3=OFF \
        -DHPT_CUDA_ARCHS=90 -DDNNL_LIB="$DEPLIB/libdnnl.so" -DCJSON_LIB="$DEPLIB/libcjson.so" \
        -DPCRE2_LIB="$DEPLIB/libpcre2-8.so" -DCJSON_INC="$DEPS/usr/include/cjson" \
        -DUTF8PROC_LIB="$DEPLIB/libutf8proc.so" -DUTF8PROC_INC="$DEPS/usr/include" \
        "-DCMAKE_C_FLAGS=-I$DEPS/usr/include" \
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$DEPLIB -Wl,-rpath,$DEPLIB${NCCL_DIR:+ -Wl,-rpath,$NCCL_DIR/lib} -Wl,--disable-new-dtags"
    [ -z "$NCCL_DIR" ] || printf '%s\n' -DNCCL_INCLUDE_DIR="$NCCL_DIR/include" -DNCCL_LIBRARY="$NCCL_DIR/lib/libnccl.so.2"
}
export -f CONFIGURE_ARGS
TARGETS="hptrain_cli test_cuda test_backend test_cuda_train test_cuda_gpt2 bench_cuda"
export TARGETS

st_build() {
    if [ $DRY = 1 ] && [ ! -e "$DEPLIB/libdnnl.so" ]; then
        status skipped; note "no deps archive here: the configure against it is not checked"; exit 0
    fi
    if [ $DRY = 1 ]; then
        # the device's configure, against the archive, in a scratch tree (no build: this machine's
        # build tree is reused), then the reused tree's executables
        local args
        mapfile -t args < <(CONFIGURE_ARGS)
        cmake -S "$ROOT" -B "$WORK/cfg" "${args[@]}" > "$WORK/cfg.log" 2>&1 || { cat "$WORK/cfg.log"; note "configure against the deps failed"; exit 1; }
        cat "$WORK/cfg.log"
        grep -q "^DNNL_LIB:FILEPATH=$DEPLIB" "$WORK/cfg/CMakeCache.txt" || { note "configure did not take the archive's oneDNN"; exit 1; }
        local cuda_on
        cuda_on=$(grep -c "CUDA backend ON" "$WORK/cfg.log")
        rm -rf "$WORK/cfg"
        for t in hptrain test_cuda test_backend test_cuda_train test_cuda_gpt2; do
            [ -x "$BUILD/$t" ] || { note "$BUILD/$t missing: build the tree first"; exit 1; }
        done
        note "configure against the deps: ok (CUDA backend $([ "$cuda_on" -gt 0 ] && echo ON || echo OFF)); reusing $BUILD"
        exit 0
    fi
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PATH="$PATH:/usr/local/cuda/bin"
    local args
    mapfile -t args < <(CONFIGURE_ARGS)
    cmake -S "$ROOT" -B "$BUILD" "${args[@]}" 2>&1 | tee "$WORK/cfg.log" || { note "configure failed"; exit 1; }
    grep -q "CUDA backend ON" "$WORK/cfg.log" || { note "the CUDA backend is OFF: nvcc or the toolkit not found"; exit 1; }
    local targets=$TARGETS
    grep -q "NCCL transport ON" "$WORK/cfg.log" && targets="$targets test_nccl"
    # shellcheck disable=SC2086
    cmake --build "$BUILD" -j "$(nproc)" --target $targets || { note "build failed"; exit 1; }
    note "built: $targets"
}

st_reference() {
    local d="$BUILD/reference" tmp
    mkdir -p "$d"
    if [ -x "$ROOT/tests/make_reference.sh" ] || [ -f "$ROOT/tests/make_reference.sh" ]; then
        bash "$ROOT/tests/make_reference.sh" "$d" || exit 1
    elif [ ! -s "$d/gpt2_tiny_steps.json" ]; then
        tmp=$(mktemp -d)
        "$PY" "$ROOT/tests/make_ref_state.py" "$tmp" 2 64 4 1000 1024 64 2 16 1337 || exit 1
        mv "$tmp/model.bin" "$d/gpt2_tiny_model.bin" && mv "$tmp/state.bin" "$d/gpt2_tiny_state.bin" &&
            mv "$tmp/steps.json" "$d/gpt2_tiny_steps.json" || exit 1
        rm -rf "$tmp"
    fi
    note "gpt2_tiny_* in $d"
}

# gpu_test NAME: one GPU test; HPT_REQUIRE_GPU=1, so a backend that does not start fails
gpu_test() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    cd "$BUILD" || exit 1
    HPT_REQUIRE_GPU=1 HPT_REF_DIR="$BUILD/reference" OMP_NUM_THREADS=8 "./$1"
    local rc=$?
    { echo '```'; grep -E "GPU memory|overhead|device region|attention T=|SKIP|FAIL|CHECK failed|checks," "$WORK/logs/$1.log" | head -n 40; echo '```'; } | detail
    note "$(grep -E "checks, [0-9]+ failed" "$WORK/logs/$1.log" | tail -n 1)"
    return $rc
}
export -f gpu_test

# st_nccl: the NCCL transport (docs/zero.md, "NCCL"): one rank always, two where two GPUs are seen
st_nccl() {
    export LD_LIBRARY_PATH="$DEPLIB${NCCL_DIR:+:$NCCL_DIR/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ -x "$BUILD/test_nccl" ] || { note "no test_nccl: the build found no NCCL (nccl.h, libnccl)"; exit 1; }
    local ngpu two rc=0
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    cd "$BUILD" || exit 1
    HPT_REQUIRE_GPU=1 ./test_nccl 1 || rc=1
    if [ "$ngpu" -ge 2 ]; then
        HPT_REQUIRE_GPU=1 ./test_nccl 2 || rc=1
        two="2 ranks on 2 GPUs: $(grep -E "checks, [0-9]+ failed" "$WORK/logs/nccl.log" | tail -n 1)"
    else
        two="2 ranks not run: $ngpu GPU visible (NCCL refuses two ranks on one GPU)"
    fi
    note "1 rank: $(grep -E "checks, [0-9]+ failed" "$WORK/logs/nccl.log" | head -n 1); $two"
    return $rc
}

st_train() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local d="$WORK/data/tiny" args
    mkdir -p "$d"
    shard "$d/train_000.bin" 200000 512 || exit 1
    args=(--model "gpt2:L=2,C=128,NH=4,V=512,T=128" --data "$d/train_*.bin" --batch 4 --seq 128 --steps 20
          --lr 1e-3 --seed 7 --threads 2)
    "$HPT" train "${args[@]}" --device cpu --log "$WORK/logs/train_cpu.jsonl" || { note "the CPU run failed"; exit 1; }
    if [ $DRY = 0 ]; then
        "$HPT" train "${args[@]}" --device cuda --log "$WORK/logs/train_cuda.jsonl" || { note "the --device cuda run failed"; exit 1; }
    fi
    "$PY" - "$WORK/logs/train_cpu.jsonl" "$WORK/logs/train_cuda.jsonl" "$WORK" <<'EOF'
import json, os, sys
def load(p):
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
cpu, gpu = load(sys.argv[1]), load(sys.argv[2])
work = sys.argv[3]
rows = ["| step | cpu loss | cuda loss | relative difference |", "| --- | --- | --- | --- |"]
worst = 0.0
for i, c in enumerate(cpu):
    g = gpu[i]["loss"] if i < len(gpu) else None
    d = abs(g - c["loss"]) / abs(c["loss"]) if g is not None else None
    if d is not None: worst = max(worst, d)
    rows.append(f"| {c['step']} | {c['loss']:.6f} | {'' if g is None else f'{g:.6f}'} | {'' if d is None else f'{d:.2e}'} |")
open(os.path.join(work, "detail", "train.md"), "w").write("\n".join(rows) + "\n")
ok = len(cpu) == 20 and cpu[-1]["loss"] < cpu[0]["loss"]
if not gpu:
    note = f"cpu: 20 steps, loss {cpu[0]['loss']:.4f} -> {cpu[-1]['loss']:.4f}; cuda: not run (dry run)" if ok else "the CPU log is short or its loss did not fall"
    open(os.path.join(work, "note"), "w").write(note + "\n")
    if not gpu and ok: open(os.path.join(work, "status"), "w").write("partial\n")
    sys.exit(0 if ok else 1)
ok = ok and len(gpu) == len(cpu) and worst <= 1e-3
open(os.path.join(work, "note"), "w").write(
    f"losses cpu {cpu[0]['loss']:.4f} -> {cpu[-1]['loss']:.4f}, cuda {gpu[0]['loss']:.4f} -> {gpu[-1]['loss']:.4f}; "
    f"largest relative difference {worst:.2e} (bound 1e-3)\n")
sys.exit(0 if ok else 1)
EOF
}

# st_matmul: --matmul bf16 (docs/design.md, "Matmul precision"): the linear layers' GEMMs and,
# since attention_bf16.cu, flash attention on the tensor cores (heads of 32 here and 64 in
# gpt2-124m; test_cuda's t_attention_bf16 checks the kernels against the CPU's bf16 pair).
# (a) The train stage's small GPT-2 for 10 steps with --matmul bf16 on the CPU and on the GPU:
# each step's loss within 1e-3 relative (both round the same operands to bf16; the sums' order
# differs). (b) A gpt2-124m step on the GPU at B 4, T 1024, 6 steps, --matmul fp32 against bf16:
# the mean step time of steps 2.., and bf16's ratio (bf16: bf16 GEMMs and tensor-core
# attention). The CPU run and (b)'s estimate run in a dry run too.
st_matmul() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local d="$WORK/data/tiny" args mm
    mkdir -p "$d"
    [ -s "$d/train_000.bin" ] || shard "$d/train_000.bin" 200000 512 || exit 1
    args=(--model "gpt2:L=2,C=128,NH=4,V=512,T=128" --data "$d/train_*.bin" --batch 4 --seq 128 --steps 10
          --lr 1e-3 --seed 7 --threads 2 --matmul bf16)
    "$HPT" train "${args[@]}" --device cpu --log "$WORK/logs/matmul_cpu.jsonl" || { note "the CPU --matmul bf16 run failed"; exit 1; }
    if [ $DRY = 1 ]; then
        "$HPT" estimate --model gpt2-124m --batch 4 --seq 1024 --matmul bf16 --device cuda > "$WORK/logs/matmul_est.txt" \
            || { note "estimate --matmul bf16 failed"; exit 1; }
        note "cpu --matmul bf16: 10 steps ran; cuda: not run (dry run)"; status partial; exit 0
    fi
    "$HPT" train "${args[@]}" --device cuda --log "$WORK/logs/matmul_cuda.jsonl" || { note "the --device cuda --matmul bf16 run failed"; exit 1; }
    local d2="$WORK/data/gpt2"
    mkdir -p "$d2"
    [ -s "$d2/train_000.bin" ] || shard "$d2/train_000.bin" 40000 50257 || exit 1
    for mm in fp32 bf16; do
        "$HPT" train --model gpt2-124m --data "$d2/train_*.bin" --batch 4 --seq 1024 --steps 6 --device cuda \
            --matmul $mm --log "$WORK/logs/matmul_124m_$mm.jsonl" --quiet || { note "gpt2-124m --matmul $mm failed"; exit 1; }
    done
    "$PY" - "$WORK" <<'EOF2'
import json, os, sys
work = sys.argv[1]
L = lambda n: [json.loads(l) for l in open(os.path.join(work, "logs", n)) if l.strip()]
cpu, gpu = L("matmul_cpu.jsonl"), L("matmul_cuda.jsonl")
worst = max(abs(g["loss"] - c["loss"]) / abs(c["loss"]) for c, g in zip(cpu, gpu)) if gpu else 1.0
ms = {m: L(f"matmul_124m_{m}.jsonl") for m in ("fp32", "bf16")}
mean = {m: sum(x["step_ms"] for x in v[1:]) / max(1, len(v) - 1) for m, v in ms.items()}
rows = ["| gpt2-124m, B 4, T 1024 | fp32 | bf16 |", "| --- | --- | --- |",
        f"| ms/step (steps 2..) | {mean['fp32']:.1f} | {mean['bf16']:.1f} |",
        f"| last loss | {ms['fp32'][-1]['loss']:.4f} | {ms['bf16'][-1]['loss']:.4f} |",
        "", f"small GPT-2, --matmul bf16, cpu vs cuda: largest relative loss difference {worst:.2e} over {len(gpu)} steps"]
open(os.path.join(work, "detail", "matmul.md"), "w").write("\n".join(rows) + "\n")
ok = len(cpu) == len(gpu) == 10 and worst <= 1e-3
open(os.path.join(work, "note"), "w").write(
    f"bf16 cpu vs cuda: loss rel {worst:.2e} (bound 1e-3); gpt2-124m ms/step fp32 {mean['fp32']:.1f}, "
    f"bf16 {mean['bf16']:.1f} (x{mean['fp32'] / max(mean['bf16'], 1e-9):.2f})\n")
sys.exit(0 if ok else 1)
EOF2
}

# st_lora: a LoRA run on the GPU beside the CPU's (docs/lora.md, docs/cuda.md). Each run: B 2,
# T 32, 3 steps, r 4, every linear layer, --save; the CPU's runs and the estimates run in a dry
# run too (the plumbing), the GPU's only on one.
st_lora() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export HPT_UNVERIFIED_CUDA_LORA=1
    # d: data, saved adapters and the disk home; g: logs, outputs and estimates (logs.tar.gz)
    local d="$WORK/data/lora" g="$WORK/logs/lora" cfg arch shape homes base home tag args rc=0
    mkdir -p "$d/off" "$g"
    shard "$d/train_000.bin" 20000 300 || exit 1
    : > "$g/runs.txt"
    for cfg in "llama|llama:L=2,C=48,NH=6,NKV=3,FF=80,V=300,T=64" "gpt2|gpt2:L=2,C=48,NH=6,V=300,T=64"; do
        IFS='|' read -r arch shape <<<"$cfg"
        for base in f32 bf16 int8 nf4; do
            homes="device host"
            [ "$arch" = llama ] && { [ $base = f32 ] || [ $base = nf4 ]; } && homes="device host disk"
            for home in $homes; do
                tag="$arch-$base-$home"
                args=(--model "$shape" --batch 2 --seq 32 --lora r=4,alpha=8 --base-weights $base
                      --base-home $home --offload-dir "$d/off")
                "$HPT" estimate "${args[@]}" --device cuda --json > "$g/$tag.est.json" || { echo "$tag: estimate failed"; rc=1; }
                args+=(--data "$d/train_*.bin" --steps 3 --lr 1e-3 --seed 7 --threads 2)
                "$HPT" train "${args[@]}" --device cpu --log "$g/$tag.cpu.jsonl" --save "$d/$tag.cpu" \
                    > "$g/$tag.cpu.out" 2>&1 || { echo "$tag: the CPU run failed: $(tail -n 1 "$g/$tag.cpu.out")"; rc=1; }
                if [ $DRY = 0 ]; then
                    "$HPT" train "${args[@]}" --device cuda --log "$g/$tag.cuda.jsonl" --save "$d/$tag.cuda" \
                        > "$g/$tag.cuda.out" 2>&1 || { echo "$tag: the --device cuda run failed: $(tail -n 1 "$g/$tag.cuda.out")"; rc=1; }
                fi
                echo "$tag" >> "$g/runs.txt"
            done
        done
    done
    "$PY" - "$d" "$g" "$WORK" "$DRY" <<'EOF' || rc=1
import json, os, struct, sys
d, g_dir, work, dry = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
def lines(p):
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
def adapters(p):  # safetensors: 8-byte header size, JSON header, F32 data
    f = os.path.join(p, "adapter_model.safetensors")
    if not os.path.exists(f):
        return None
    b = open(f, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((hi - lo) // 4), b[8 + n + lo:8 + n + hi])
    return out
rows = ["| run | cpu losses | cuda losses | loss rel. diff | adapters max abs diff | device peak (accounted) | estimate --device cuda |",
        "| --- | --- | --- | --- | --- | --- | --- |"]
worst_l = worst_a = 0.0
bad, n = [], 0
for tag in open(os.path.join(g_dir, "runs.txt")).read().split():
    n += 1
    c = [x["loss"] for x in lines(os.path.join(g_dir, tag + ".cpu.jsonl"))]
    gl = lines(os.path.join(g_dir, tag + ".cuda.jsonl"))
    g = [x["loss"] for x in gl]
    ep = os.path.join(g_dir, tag + ".est.json")
    est = json.load(open(ep))["peak_bytes_by_tier"]["device"] if os.path.exists(ep) and os.path.getsize(ep) else None
    pk = max(x.get("mem_peak_bytes", 0) for x in gl) if gl else None
    if len(c) != 3:
        bad.append(tag + " (cpu log)")
    if est is None:
        bad.append(tag + " (estimate)")
    dl = da = None
    if not dry:
        if len(g) != 3 or len(c) != 3:
            bad.append(tag + " (cuda log)")
        else:
            dl = max(abs(a - b) / abs(a) for a, b in zip(c, g))
            worst_l = max(worst_l, dl)
        A, B = adapters(os.path.join(d, tag + ".cpu")), adapters(os.path.join(d, tag + ".cuda"))
        if A is None or B is None or A.keys() != B.keys():
            bad.append(tag + " (adapters)")
        else:
            da = max(abs(x - y) for k in A for x, y in zip(A[k], B[k]))
            worst_a = max(worst_a, da)
        if (dl is not None and dl > 1e-5) or (da is not None and da > 1e-5):
            bad.append(tag + " (differs)")
        if pk is None or est is None or pk != est:
            bad.append("%s (peak %s, estimate %s)" % (tag, pk, est))
    f = lambda v: "" if v is None else "%.2e" % v
    rows.append("| %s | %s | %s | %s | %s | %s | %s |" % (
        tag, " ".join("%.6f" % x for x in c), " ".join("%.6f" % x for x in g), f(dl), f(da),
        "" if pk is None else pk, "" if est is None else est))
open(os.path.join(work, "detail", "lora.md"), "w").write("\n".join(rows) + "\n")
if dry:
    note = "%d CPU runs of 3 steps and their estimates --device cuda (dry run: no GPU run)" % n
    if not bad:
        open(os.path.join(work, "status"), "w").write("partial\n")
else:
    note = "%d runs: losses within %.2e (relative), adapters within %.2e of the CPU's (bound 1e-5)%s" % (
        n, worst_l, worst_a, "" if any("peak" in b for b in bad) else "; device peaks = estimates")
if bad:
    note += "; failed: " + ", ".join(bad[:8])
open(os.path.join(work, "note"), "w").write(note + "\n")
sys.exit(1 if bad else 0)
EOF
    return $rc
}

st_sanitizer() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local cs
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    [ -x "$cs" ] || { note "compute-sanitizer not found"; exit 1; }
    cd "$BUILD" || exit 1
    HPT_REQUIRE_GPU=1 OMP_NUM_THREADS=8 "$cs" --tool memcheck --error-exitcode 9 --print-limit 20 ./test_backend
    local rc=$?
    { echo '```'; grep -E "ERROR SUMMARY|Invalid|out of bounds|========= +at|checks," "$WORK/logs/sanitizer.log" | head -n 40; echo '```'; } | detail
    note "$(grep -E "ERROR SUMMARY" "$WORK/logs/sanitizer.log" | tail -n 1 | sed 's/=* *//'); $(grep -E "checks, [0-9]+ failed" "$WORK/logs/sanitizer.log" | tail -n 1)"
    return $rc
}

st_gemm() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "$BUILD/bench_cuda" peak | tee "$WORK/peak.json" || exit 1
    cp "$WORK/peak.json" "$BUILD/peak.json" # for a second call on the same machine
    note "$(cat "$WORK/peak.json")"
}

# hpt_bench TAG MODEL V B T STEPS [flags]: hptrain train --device cuda on random tokens; prints
# a JSON line (tokens/s, MFU against the measured bf16 peak, the estimate's device peak, the
# log's accounted peak); in a dry run the estimate alone
hpt_bench() {
    local tag=$1 model=$2 V=$3 B=$4 T=$5 steps=$6
    shift 6
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local d="$WORK/data/$tag" args fpt peak tps
    mkdir -p "$d"
    args=(--model "$model" --batch "$B" --seq "$T" --device cuda "$@")
    "$HPT" estimate "${args[@]}" > "$WORK/logs/${tag}_estimate.txt" 2>&1 || { echo "estimate of $tag failed"; return 1; }
    fpt=$(flops_per_token "$WORK/logs/${tag}_estimate.txt")
    [ $DRY = 1 ] && { echo "{\"impl\":\"hptrain-estimate\",\"tag\":\"$tag\",\"flops_per_token\":$fpt}"; return 0; }
    shard "$d/train_000.bin" $((B * T * (steps + 2) + 1)) "$V" || return 1
    "$HPT" train "${args[@]}" --data "$d/train_*.bin" --steps "$steps" --log "$WORK/logs/${tag}_steps.jsonl" \
        > "$WORK/logs/${tag}_train.out" 2> "$WORK/logs/${tag}_train.err" || { tail -n 3 "$WORK/logs/${tag}_train.err"; return 1; }
    tps=$(mean_tps "$WORK/logs/${tag}_steps.jsonl")
    peak=$(bf16_peak)
    "$PY" - "$tag" "$tps" "$fpt" "$peak" "$WORK/logs/${tag}_estimate.txt" "$WORK/logs/${tag}_steps.jsonl" <<'EOF'
import json, os, re, sys
tag, tps, fpt, peak = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
m = re.search(r"^\s*peak\s.*?(\d+)\s*$", open(sys.argv[5]).read(), re.M)
steps = [json.loads(l) for l in open(sys.argv[6]) if l.strip()]
print(json.dumps({"impl": os.environ.get("HPT_BENCH_IMPL", "hptrain-cuda-fp32"), "tag": tag, "tokens_per_s": tps, "flops_per_token": fpt,
                  "mfu": tps * fpt / (peak * 1e12) if peak else None,
                  "estimate_device_bytes": int(m.group(1)) if m else None,
                  "accounted_peak_bytes": max(s.get("mem_peak_bytes", 0) for s in steps),
                  "loss": steps[-1]["loss"]}))
EOF
}
# torch_bench ARGS...: bench/torch_cuda.py eager and torch.compile against the measured peak
torch_bench() {
    local peak c
    peak=$(bf16_peak)
    for c in "" "--compile"; do
        # shellcheck disable=SC2086
        "$PY" "$ROOT/bench/torch_cuda.py" "$@" --warmup 2 --steps 5 --peak-tflops "$peak" $c ||
            echo "{\"impl\":\"torch${c:+-compile}\",\"error\":\"failed\"}"
    done
}
# bench_table JSONL: the detail table of a benchmark stage, and its note
bench_table() {
    "$PY" - "$1" "$WORK" <<'EOF'
import json, os, sys
rows = []
for l in open(sys.argv[1]):
    try: rows.append(json.loads(l))
    except ValueError: pass
work = os.environ.get("STAGE", "bench")
t = ["| impl | tokens/s | GFLOP/token | MFU (bf16 peak) | device bytes | loss |", "| --- | --- | --- | --- | --- | --- |"]
notes = []
for r in rows:
    mem = r.get("accounted_peak_bytes", r.get("max_memory_allocated"))
    mfu = r.get("mfu")
    fpt = r.get("flops_per_token")
    t.append(f"| {r.get('impl')} | {r.get('tokens_per_s', '')} | {'' if not fpt else f'{fpt / 1e9:.3f}'} | "
             f"{'' if mfu is None else f'{mfu:.1%}'} | {mem or ''} | {r.get('loss', r.get('error', ''))} |")
    if "tokens_per_s" in r:
        notes.append(f"{r['impl']} {float(r['tokens_per_s']):.0f} tok/s" + ("" if mfu is None else f" {mfu:.1%}"))
    elif r.get("flops_per_token"):
        notes.append(f"estimate {r['flops_per_token'] / 1e9:.3f} GFLOP/token")
open(os.path.join(sys.argv[2], "detail", os.environ["STAGE"] + ".md"), "w").write("\n".join(t) + "\n")
open(os.path.join(sys.argv[2], "note"), "w").write("; ".join(notes) + "\n")
EOF
}
export -f hpt_bench torch_bench bench_table

st_gpt2() {
    local j="$WORK/logs/gpt2.jsonl"
    hpt_bench gpt2 gpt2-124m 50257 8 1024 6 | tee -a "$j"
    # the fast mode (bf16 GEMM and attention operands, fp32 sums): issue 39's goals
    [ $DRY = 0 ] && HPT_BENCH_IMPL=hptrain-cuda-bf16 hpt_bench gpt2_bf16 gpt2-124m 50257 8 1024 6 --matmul bf16 | tee -a "$j"
    [ "${GPU_CHECK_TF32:-0}" = 1 ] && [ $DRY = 0 ] &&
        HPT_CUDA_TF32=1 HPT_BENCH_IMPL=hptrain-cuda-tf32 hpt_bench gpt2_tf32 gpt2-124m 50257 8 1024 6 | tee -a "$j"
    [ $DRY = 1 ] || [ "${GPU_CHECK_NO_TORCH:-0}" = 1 ] || torch_bench --arch gpt2 --L 12 --C 768 --NH 12 --B 8 --T 1024 | tee -a "$j"
    bench_table "$j"
    [ $DRY = 1 ] && status partial
    grep -q tokens_per_s "$j" || [ $DRY = 1 ]
}

# st_calibrate: the GPU's calibration (docs/planner.md) and its prediction of the gpt2 stage's
# step against that stage's measured one (B*T over its mean tokens/s)
st_calibrate() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export HPT_CALIBRATION="$WORK/calibration.json"
    local pred tps meas
    "$HPT" calibrate --device cuda || return 1
    "$HPT" estimate --model gpt2-124m --batch 8 --seq 1024 --device cuda | tee "$WORK/logs/calibrate_estimate.txt" || return 1
    cp "$HPT_CALIBRATION" "$WORK/logs/calibration.json"
    pred=$(grep -o "predicted step [0-9.]* s" "$WORK/logs/calibrate_estimate.txt" | grep -o "[0-9.]*" | head -n 1)
    tps=$("$PY" -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
r=[x for x in r if x.get("impl")=="hptrain-cuda-fp32" and x.get("tag")=="gpt2" and x.get("tokens_per_s")]
print(r[0]["tokens_per_s"] if r else "")' "$WORK/logs/gpt2.jsonl" 2>/dev/null)
    meas=$([ -n "$tps" ] && "$PY" -c "print('%.3f' % (8 * 1024 / $tps))")
    # the fast mode: the bf16 rates' prediction against the gpt2 stage's --matmul bf16 run
    local pred16 tps16 meas16
    "$HPT" estimate --model gpt2-124m --batch 8 --seq 1024 --device cuda --matmul bf16 \
        > "$WORK/logs/calibrate_estimate_bf16.txt" 2>&1
    pred16=$(grep -o "predicted step [0-9.]* s" "$WORK/logs/calibrate_estimate_bf16.txt" | grep -o "[0-9.]*" | head -n 1)
    tps16=$("$PY" -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
r=[x for x in r if x.get("impl")=="hptrain-cuda-bf16" and x.get("tag")=="gpt2_bf16" and x.get("tokens_per_s")]
print(r[0]["tokens_per_s"] if r else "")' "$WORK/logs/gpt2.jsonl" 2>/dev/null)
    meas16=$([ -n "$tps16" ] && "$PY" -c "print('%.3f' % (8 * 1024 / $tps16))")
    note "gpt2-124m B 8 T 1024 --device cuda: predicted step ${pred:-none} s, measured ${meas:-none (no gpt2 stage in this call)} s; --matmul bf16: predicted ${pred16:-none} s, measured ${meas16:-none} s"
    [ -n "$pred" ]
}

st_llama1b() {
    local j="$WORK/logs/llama1b.jsonl"
    hpt_bench llama1b llama3.2-1b 128256 2 1024 5 | tee -a "$j"
    [ $DRY = 0 ] && HPT_BENCH_IMPL=hptrain-cuda-bf16 hpt_bench llama1b_bf16 llama3.2-1b 128256 2 1024 5 --matmul bf16 | tee -a "$j"
    [ "${GPU_CHECK_TF32:-0}" = 1 ] && [ $DRY = 0 ] &&
        HPT_CUDA_TF32=1 HPT_BENCH_IMPL=hptrain-cuda-tf32 hpt_bench llama1b_tf32 llama3.2-1b 128256 2 1024 5 | tee -a "$j"
    [ $DRY = 1 ] || [ "${GPU_CHECK_NO_TORCH:-0}" = 1 ] || torch_bench --arch llama --L 16 --C 2048 --NH 32 --NKV 8 --FF 8192 --V 128256 --B 2 --T 1024 | tee -a "$j"
    bench_table "$j"
    [ $DRY = 1 ] && status partial
    grep -q tokens_per_s "$j" || [ $DRY = 1 ]
}

st_llama8b() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local o="$WORK/logs/llama8b"
    if [ $DRY = 1 ]; then
        BUILD="$BUILD" PYTHON="$PY" bash "$ROOT/bench/bench_gpu_8b.sh" --quick --no-torch --estimate-only --out "$o" || exit 1
        note "estimate only (dry run): $(grep -E "^ *peak" "$o/estimate.txt" | head -n 1 | awk '{print "device " $2 " " $3 ", pinned host " $4 " " $5}'); $(cat "$o/hptrain.json")"
        status partial
        exit 0
    fi
    BUILD="$BUILD" PEAK_JSON="$BUILD/peak.json" PYTHON="$PY" \
        bash "$ROOT/bench/bench_gpu_8b.sh" --quick --no-torch --out "$o" --offload-dir "$WORK/offload8b"
    local rc=$?
    { echo '```'; cat "$o/hptrain.json" 2>/dev/null; echo '```'; } | detail
    note "$(grep -h '"system"' "$o/hptrain.json" 2>/dev/null | cut -c1-400)"
    return $rc
}

# st_profile: where a step's GPU time goes (issue 39), by kernel: ncu's gpu__time_duration of every
# launch in 2 steps of gpt2-124m (B 8, T 1024) and 1 of the llama3.2-1b shape (B 2, T 1024), summed
# per kernel name, against the step's wall time measured without ncu (the gpt2 and llama1b stages)
profile_model() { # tag model V B T steps
    local tag=$1 model=$2 V=$3 B=$4 T=$5 steps=$6 d="$WORK/data/prof_$1" ncu csv
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
    [ -n "$ncu" ] || { echo "ncu not found"; return 1; }
    mkdir -p "$d"
    shard "$d/train_000.bin" $((B * T * (steps + 2) + 1)) "$V" || return 1
    csv="$WORK/logs/profile_$tag.csv"
    "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw --launch-count 4000 \
        --log-file "$csv" "$HPT" train --model "$model" --batch "$B" --seq "$T" --device cuda \
        --data "$d/train_*.bin" --steps "$steps" > "$WORK/logs/profile_$tag.out" 2>&1 || { tail -n 5 "$WORK/logs/profile_$tag.out"; return 1; }
    "$PY" - "$csv" "$tag" "$steps" <<'PYEOF'
import csv, sys
path, tag, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [r for r in csv.reader(open(path, errors="replace"))]
h = next(i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r)
head = rows[h]
kn, tc = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
unit = rows[h + 1][tc] if len(rows) > h + 1 else ""
scale = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}.get(unit.strip(), None)
data = rows[h + 2:] if scale is not None else rows[h + 1:]
scale = scale or 1e-9
tot, cnt = {}, {}
for r in data:
    if len(r) <= max(kn, tc):
        continue
    try:
        t = float(r[tc].replace(",", "")) * scale
    except ValueError:
        continue
    name = r[kn].split("(")[0].strip()[:70]
    tot[name] = tot.get(name, 0.0) + t
    cnt[name] = cnt.get(name, 0) + 1
all_t = sum(tot.values())
print(f"## {tag}: {sum(cnt.values())} launches in {steps} step(s), GPU time {all_t * 1e3:.1f} ms "
      f"({all_t * 1e3 / steps:.1f} ms a step)\n")
print("| kernel | launches | ms a step | share |\n| --- | --- | --- | --- |")
for name, t in sorted(tot.items(), key=lambda kv: -kv[1])[:30]:
    print(f"| {name.replace('|', '/')} | {cnt[name]} | {t * 1e3 / steps:.2f} | {100 * t / all_t:.1f}% |")
PYEOF
}
st_profile() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PATH="$PATH:/usr/local/cuda/bin"
    local rc=0
    profile_model gpt2 gpt2-124m 50257 8 1024 2 | tee "$WORK/logs/profile.md" || rc=1
    profile_model llama1b llama3.2-1b 128256 2 1024 1 | tee -a "$WORK/logs/profile.md" || rc=1
    detail < "$WORK/logs/profile.md"
    note "$(grep -h '^## ' "$WORK/logs/profile.md" | sed 's/^## //' | tr '\n' ';')"
    return $rc
}

# st_transformers: each directory's loss by transformers and by hptrain eval (cpu; cuda beside a
# GPU) on one batch of its tokens; family|tag|shape|B|T|options per model (tests/hf_write.py's
# families and shapes, the ones the test_hf_* tests check against the hand-written references:
# here transformers' own classes, Mistral's window, Qwen2's biases, Qwen3's head width, Gemma 3's
# local and global layers with linear scaling)
st_transformers() {
    export LD_LIBRARY_PATH="$DEPLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "$PY" -c "import transformers" 2>/dev/null || { note "transformers is not installed"; exit 77; }
    local d="$WORK/data/hf" cfg fam tag shape B T opts want dev got rc=0 rows=""
    for cfg in "llama|mistral|llama:L=2,C=48,NH=6,NKV=2,FF=80,V=300,T=64,theta=10000,eps=1e-5,window=5|2|13|" \
               "qwen|qwen2|qwen2:L=2,C=48,NH=6,NKV=2,FF=80,V=300,T=64,theta=1000000|2|13|" \
               "qwen|qwen3|qwen3:L=2,C=40,NH=4,NKV=2,hd=14,FF=72,V=260,T=32,theta=1000000,tied=1|3|9|" \
               "gemma|gemma3|gemma3:L=3,C=48,NH=6,NKV=2,hd=10,FF=80,V=300,T=64,window=6,pattern=3,factor=8,tied=0|2|13|"; do
        IFS='|' read -r fam tag shape B T opts <<<"$cfg"
        # shellcheck disable=SC2086 # opts: several options
        "$PY" "$ROOT/tests/hf_write.py" "$fam" "$d/$tag" "$shape" "$B" "$T" 5 --stream $opts >/dev/null || exit 1
        want=$("$PY" "$ROOT/tests/hf_transformers_loss.py" "$d/$tag/hf" "$d/$tag/tokens.bin" "$B" "$T" |
               awk '/^transformers loss/ {print $3}')
        for dev in cpu cuda; do
            [ $DRY = 1 ] && [ $dev = cuda ] && continue
            got=$("$HPT" eval --quiet --model "$d/$tag/hf" --data "$d/$tag/tokens.bin" --batch "$B" --seq "$T" \
                  --batches 1 --device $dev | awk '/^loss/ {print $2}')
            rows="$rows $tag/$dev: hptrain $got, transformers $want;"
            "$PY" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(b))" \
                "$got" "$want" || rc=1
        done
    done
    note "${rows# }"
    return $rc
}

export -f st_env st_deps st_size st_build st_reference st_nccl st_train st_matmul st_lora st_sanitizer st_gemm st_gpt2 st_calibrate st_llama1b st_llama8b \
    profile_model st_profile st_transformers

# ---- the run ----
echo "gpu_check: $([ $DRY = 1 ] && echo "dry run, " )budget ${BUDGET} s, build tree $BUILD, output $OUT"
stage env 30 any st_env
stage deps 150 any st_deps
[ $DRY = 1 ] && stage size 60 any st_size
stage build "${GPU_CHECK_BUILD_LIMIT:-240}" any st_build
stage reference 60 any st_reference
for t in test_cuda test_backend test_cuda_train test_cuda_gpt2; do
    stage "$t" 120 gpu "gpu_test $t"
done
stage nccl 60 gpu st_nccl
stage train 60 any st_train
stage matmul 90 any st_matmul
stage lora 90 any st_lora
stage transformers 90 any st_transformers
stage sanitizer 150 gpu st_sanitizer
stage gemm 60 gpu st_gemm
stage gpt2 180 any st_gpt2
stage calibrate 90 gpu st_calibrate
stage llama8b 240 any st_llama8b
stage llama1b 240 any st_llama1b
# only when asked for (--only profile): ncu replays every launch, minutes of device time
case "$ONLY" in *",profile,"*) stage profile 300 gpu st_profile ;; esac
write_report
echo
cat "$OUT/report.md"
rm -rf "$WORK"
# exit 1 where a stage failed or timed out (in a dry run only the steps that need no GPU run)
! grep -q '"status": "\(fail\|timeout\)"' "$OUT/results.jsonl"
