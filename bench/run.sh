#!/bin/bash
# bench/run.sh: hptrain vs PyTorch 1.13 on GPT-2 124M training steps (CPU, fp32, AdamW).
#
# For each (B, T) in 4x64 and 4x256, one after the other in one run: `hptrain train` on a
# random-token shard, then bench/torch_gpt2.py in its best configuration, then in its default
# configuration; every process under /usr/bin/time so both sides' peak RSS is measured the
# same way. bench/gemm_peak gives the machine's fp32 GEMM peak (oneDNN, same thread count)
# for MFU. bench/report.py prints the table and writes summary.md and summary.json.
# docs/benchmarks.md explains every figure. About 5-8 minutes on a 2-core machine.
#
# usage: bench/run.sh [--out DIR] [--threads N] [--configs "4x64 4x256"] [--warmup W]
#                     [--steps S] [--hptrain PATH] [--no-build] [--no-hptrain]
#                     [--no-torch-default] [--timeout SECONDS] [--quick]
#   --quick   a tiny model (L=2, C=64, NH=4, V=1000, maxT=64) and short runs: checks the
#             plumbing in under a minute; its figures mean nothing.
# Exit status: 0 when the report was written (sides that failed show as n/a with a note),
# 1 when nothing could run.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3 # Debian's python3-torch lives there; a pyenv python3 comes first on PATH
THREADS=2
CONFIGS="4x64 4x256"
WARMUP=""           # per-config defaults below
STEPS=""
HPTRAIN="$ROOT/build/hptrain"
OUT=""
BUILD=1
RUN_HPT=1
HPT_NOTE=""         # why the hptrain side did not run, for the report
RUN_TORCH_DEFAULT=1
TIMEOUT=420         # seconds per process; a hung or very slow run becomes n/a
QUICK=0

die() { echo "bench/run.sh: $*" >&2; exit 1; }
note() { echo "== $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --out) OUT=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --hptrain) HPTRAIN=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --no-hptrain) RUN_HPT=0; HPT_NOTE="skipped (--no-hptrain)"; shift ;;
    --no-torch-default) RUN_TORCH_DEFAULT=0; shift ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done

# Model shape, on both sides. hptrain pads V to Vp rows of wte; PyTorch uses V.
if [ $QUICK = 1 ]; then
    L=2 C=64 NH=4 V=1000 VP=1024 MAXT=64
    MODEL="gpt2:L=2,C=64,NH=4,V=1000,T=64"
    [ "$CONFIGS" = "4x64 4x256" ] && CONFIGS="4x32 4x64"
    : "${WARMUP:=1}" "${STEPS:=3}"
else
    L=12 C=768 NH=12 V=50257 VP=50304 MAXT=1024
    MODEL="gpt2-124m"
fi
# Steps: 2 warm-up steps (first-touch of activations, AdamW's state) then enough timed steps
# for a median, within ~10 minutes: T=64 ~2-4 s a step for PyTorch, T=256 ~8-14 s.
warmup_for() { echo "${WARMUP:-2}"; }
steps_for() {
    if [ -n "$STEPS" ]; then echo "$STEPS"; elif [ "${1#*x}" -ge 256 ]; then echo 4; else echo 6; fi
}

[ -x "$PY" ] || die "$PY not found (Debian's python3 with python3-torch)"
"$PY" -c 'import torch' 2>/dev/null || die "$PY cannot import torch (apt-get install python3-torch)"

# ---- PyTorch's BLAS: OpenBLAS, installed if missing ------------------------------------------
# Debian's python3-torch alone brings the reference BLAS (libblas3), about 20x slower than
# OpenBLAS; installing libopenblas0-pthread switches the libblas.so.3 alternative to it.
if ! dpkg -s libopenblas0-pthread >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    note "installing OpenBLAS for PyTorch (Debian package 'libopenblas0-pthread')"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1; } ||
        note "could not install libopenblas0-pthread: PyTorch's figures will be the reference BLAS's"
fi
# The BLAS the python process mapped after a matmul (as /proc/self/maps names it: links resolved).
TORCH_BLAS=$("$PY" - 2>/dev/null <<'PYBLAS'
import torch
torch.mm(torch.ones(64, 64), torch.ones(64, 64))
names = {l.split()[-1] for l in open("/proc/self/maps") if len(l.split()) >= 6}
libs = sorted(n for n in names if any(k in n.rsplit("/", 1)[-1] for k in ("blas", "mkl")))
print(" ".join(libs) or "none mapped (linked into torch?)")
PYBLAS
)
note "PyTorch's BLAS: ${TORCH_BLAS:-unknown}"
case "$TORCH_BLAS" in
*openblas* | *mkl*) ;;
*) note "warning: PyTorch is not on OpenBLAS or MKL: its times will be far slower than it can do" ;;
esac

[ -n "$OUT" ] || OUT="$ROOT/build/bench/run-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hpt-bench.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$TMP"' EXIT
note "results in $OUT"

# ---- the external timer: GNU time, installed if missing; else a Python stand-in ----------
TIME_FMT="%M %e %U %S %x" # maxrss KiB, wall s, user s, sys s, exit status
if [ ! -x /usr/bin/time ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    note "installing GNU time (Debian package 'time')"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q time >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q time >/dev/null 2>&1; }
fi
# timed OUTFILE CMD...: runs CMD (stdout and stderr as they are) under a timeout; writes
# "maxrss_KiB wall user sys exit" to OUTFILE; returns CMD's exit status.
timed() {
    local tf=$1; shift
    if [ -x /usr/bin/time ]; then
        timeout -k 10 "$TIMEOUT" /usr/bin/time -o "$tf" -f "$TIME_FMT" "$@"
    else
        timeout -k 10 "$TIMEOUT" "$PY" -c '
import os, resource, subprocess, sys, time
t0 = time.time(); p = subprocess.Popen(sys.argv[2:]); _, st, ru = os.wait4(p.pid, 0)
rc = os.waitstatus_to_exitcode(st)
with open(sys.argv[1], "w") as f:
    f.write("%d %.2f %.2f %.2f %d\n" % (ru.ru_maxrss, time.time() - t0, ru.ru_utime,
                                         ru.ru_stime, rc))
sys.exit(rc if rc >= 0 else 128 - rc)' "$tf" "$@"
    fi
    local rc=$?
    # a timeout kills /usr/bin/time too: leave a line that says so
    if [ $rc = 124 ] || [ $rc = 137 ]; then echo "0 $TIMEOUT 0 0 $rc" >>"$tf"; fi
    return $rc
}

# ---- build: hptrain and gemm_peak ---------------------------------------------------------
if [ $RUN_HPT = 1 ] && [ $BUILD = 1 ] && [ "$HPTRAIN" = "$ROOT/build/hptrain" ]; then
    if [ ! -f "$ROOT/build/CMakeCache.txt" ]; then
        note "configuring build/ (Release, no sanitizer variant)"
        cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release -DHPT_SANITIZE=OFF \
            >"$OUT/build.log" 2>&1 || note "cmake configure failed (see $OUT/build.log)"
    fi
    if [ -f "$ROOT/build/CMakeCache.txt" ]; then
        bt=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$ROOT/build/CMakeCache.txt")
        [ "$bt" = Release ] || note "warning: build/ is configured as '$bt', not Release"
        note "building hptrain"
        cmake --build "$ROOT/build" -j"$THREADS" --target hptrain_cli >>"$OUT/build.log" 2>&1 || {
            note "build failed (see $OUT/build.log); using the existing binary if any"
            HPT_NOTE="build failed (build.log)"
        }
    fi
fi
if [ $RUN_HPT = 1 ] && [ ! -x "$HPTRAIN" ]; then
    note "no hptrain binary at $HPTRAIN: the hptrain side is n/a"
    HPT_NOTE="no binary at $HPTRAIN${HPT_NOTE:+: $HPT_NOTE}"
    RUN_HPT=0
fi

GEMM_BIN="$ROOT/build/bench/gemm_peak"
mkdir -p "$ROOT/build/bench"
if [ ! -x "$GEMM_BIN" ] || [ "$ROOT/bench/gemm_peak.c" -nt "$GEMM_BIN" ]; then
    cc -O2 -std=c11 -fopenmp "$ROOT/bench/gemm_peak.c" -ldnnl -o "$GEMM_BIN" 2>"$OUT/gemm_build.log" ||
        note "gemm_peak did not build (see $OUT/gemm_build.log): MFU is n/a"
fi

# ---- data: one llm.c shard of random tokens in [0, V) --------------------------------------
"$PY" - "$TMP/data" "$V" <<'EOF' || die "could not write the token shard"
import array, os, random, struct, sys
d, V = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
n = 1 << 20                                     # 1 Mi tokens: 2 MiB, more than any run reads
rng = random.Random(1337)
tok = array.array("H", (rng.randrange(V) for _ in range(n)))
if sys.byteorder != "little":
    tok.byteswap()
hdr = [0] * 256
hdr[0], hdr[1], hdr[2] = 20240520, 1, n         # magic, version, token count
with open(os.path.join(d, "bench_train_000000.bin"), "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(tok.tobytes())
EOF
DATA="$TMP/data/bench_train_*.bin"

# ---- the GEMM peak --------------------------------------------------------------------------
if [ -x "$GEMM_BIN" ]; then
    note "gemm_peak ($THREADS threads, ~15 s)"
    gq=""; [ $QUICK = 1 ] && gq="--quick --budget 0.2"
    # shellcheck disable=SC2086
    "$GEMM_BIN" --threads "$THREADS" $gq >"$OUT/gemm_peak.json" 2>"$OUT/gemm_peak.txt" ||
        note "gemm_peak failed"
    cat "$OUT/gemm_peak.txt" >&2
fi
# gemm_check NAME: a 2-3 s GEMM measurement (model shapes, 0.2 s each) between runs. A shared
# machine's speed drifts (by up to 3x on the development VM); these checks say how fast the
# machine was around each run, and their best also counts towards the peak, so a slow period
# during the full measurement cannot inflate MFU. report.py reads gemm_checks.txt in order.
: >"$OUT/gemm_checks.txt"
gemm_check() {
    [ -x "$GEMM_BIN" ] || return 0
    "$GEMM_BIN" --threads "$THREADS" --quick --budget 0.2 >"$OUT/gemm_check_$1.json" 2>/dev/null &&
        echo "$1" >>"$OUT/gemm_checks.txt"
}

# ---- PyTorch's best configuration ---------------------------------------------------------
# Measured on the development machine (docs/benchmarks.md has the figures):
#  - OMP_WAIT_POLICY=PASSIVE: Debian's OpenBLAS is the pthread build, with its own thread
#    pool beside torch's OpenMP pool; with both spinning on 2 cores a step takes ~1.8x as long.
#  - glibc malloc tunables: by default every tensor over the dynamic mmap threshold is
#    mmapped and unmapped each step, ~500k page faults (zeroing) a step; a 32 MiB threshold, a
#    high trim threshold and transparent huge pages cut them ~80x.
#  - OPENBLAS_CORETYPE: Debian's OpenBLAS (DYNAMIC_ARCH) may take a CPU for an older one
#    (5x slower on the AVX-512 CI machines); the probe below picks the fastest core type.
#  - OPENBLAS_NUM_THREADS and OMP_NUM_THREADS = --threads, as torch.set_num_threads only
#    sets OpenMP's count.
#  - AdamW foreach (1.13 has no fused CPU AdamW); faster than the for-loop here but holds
#    ~0.6 GB more at the peak.
TORCH_ENV=(OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:glibc.malloc.hugetlb=1)
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
cands=("")
case " $flags " in *" avx2 "*) cands+=(Haswell) ;; esac
grep -qm1 AuthenticAMD /proc/cpuinfo 2>/dev/null && case " $flags " in *" avx2 "*) cands+=(Zen) ;; esac
case " $flags " in *" avx512f "*) cands+=(SkylakeX) ;; esac
case " $flags " in *" avx512_bf16 "*) cands+=(Cooperlake) ;; esac
case " $flags " in *" avx512_fp16 "*) cands+=(SapphireRapids) ;; esac
note "probing OpenBLAS core types for PyTorch: default ${cands[*]:1}"
: >"$OUT/blas_probe.jsonl"
# Two rounds, interleaved, each candidate's best kept: a shared machine's speed drifts.
for round in 1 2; do
    for c in "${cands[@]}"; do
        line=$(env "${TORCH_ENV[@]}" ${c:+OPENBLAS_CORETYPE=$c} timeout 120 "$PY" \
            "$ROOT/bench/torch_gpt2.py" --probe-blas --threads "$THREADS" 2>/dev/null | tail -1)
        case "$line" in "{"*) ;; *) continue ;; esac
        echo "$line" >>"$OUT/blas_probe.jsonl"
        echo "   round $round OPENBLAS_CORETYPE=${c:-(unset)}: $line" >&2
    done
done
# Keep the default unless a forced core type is more than 10% faster (the probe's noise).
read -r best_core best_gf < <("$PY" - "$OUT/blas_probe.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
default = max([r["gflops"] for r in rows if not r["coretype_env"]], default=0.0)
forced = max((r for r in rows if r["coretype_env"]), key=lambda r: r["gflops"], default=None)
if forced and forced["gflops"] > 1.10 * default:
    print(forced["coretype_env"], forced["gflops"])
else:
    print("-", default)
EOF
)
[ "${best_core:--}" = - ] && best_core=""
[ -n "$best_core" ] && TORCH_ENV+=(OPENBLAS_CORETYPE="$best_core")
TORCH_DESC="${TORCH_ENV[*]}; AdamW foreach; OpenBLAS core ${best_core:-as detected} (probe ${best_gf} GFLOP/s)"
note "torch best config: $TORCH_DESC"

# ---- meta ----------------------------------------------------------------------------------
wjson=""
for cfg in $CONFIGS; do wjson="$wjson\"$cfg\": $(warmup_for "$cfg"),"; done
sjson=""
for cfg in $CONFIGS; do sjson="$sjson\"$cfg\": $(steps_for "$cfg"),"; done
"$PY" - "$OUT/meta.json" <<EOF
import json, platform, subprocess, sys
def sh(c):
    try:
        return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""
json.dump({"L": $L, "C": $C, "NH": $NH, "V": $V, "Vp": $VP, "maxT": $MAXT,
           "model": "$MODEL", "threads": $THREADS, "configs": "$CONFIGS".split(),
           "warmup": {${wjson%,}}, "steps": {${sjson%,}}, "quick": bool($QUICK),
           "torch_best_env": $(printf '%s\n' "${TORCH_ENV[@]}" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read().split()))'),
           "torch_best_desc": """$TORCH_DESC""", "hptrain_note": """$HPT_NOTE""",
           "torch_blas": """$TORCH_BLAS""",
           "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"),
           "nproc": sh("nproc"), "kernel": platform.release(),
           "git": sh("git -C '$ROOT' rev-parse --short HEAD"), "date": sh("date -Is")},
          open(sys.argv[1], "w"), indent=1)
EOF

# ---- the runs -------------------------------------------------------------------------------
ran_any=0
gemm_check start
for cfg in $CONFIGS; do
    B=${cfg%x*} T=${cfg#*x}
    W=$(warmup_for "$cfg") S=$(steps_for "$cfg")
    tag="B${B}_T${T}"
    if [ $RUN_HPT = 1 ]; then
        note "hptrain B=$B T=$T: $W warm-up + $S timed steps"
        rm -f "$OUT/hptrain_$tag.jsonl"
        if timed "$OUT/hptrain_$tag.time" "$HPTRAIN" train --model "$MODEL" --data "$DATA" \
            --batch "$B" --seq "$T" --steps $((W + S)) --threads "$THREADS" \
            --log "$OUT/hptrain_$tag.jsonl" >"$OUT/hptrain_$tag.out" 2>&1; then
            ran_any=1
        else
            note "hptrain train failed (exit $?); last lines of its output:"
            tail -5 "$OUT/hptrain_$tag.out" >&2
        fi
        gemm_check "hptrain_$tag"
    fi
    for which in best default; do
        [ $which = default ] && [ $RUN_TORCH_DEFAULT = 0 ] && continue
        note "pytorch ($which config) B=$B T=$T: $W warm-up + $S timed steps"
        # default: nothing set but the thread count (OpenBLAS would take every core)
        envs=(OPENBLAS_NUM_THREADS="$THREADS"); [ $which = best ] && envs=("${TORCH_ENV[@]}")
        if timed "$OUT/torch_${which}_$tag.time" env "${envs[@]}" "$PY" "$ROOT/bench/torch_gpt2.py" \
            --L $L --C $C --NH $NH --V $V --maxT $MAXT --batch "$B" --seq "$T" \
            --warmup "$W" --steps "$S" --threads "$THREADS" --label "$which" \
            >"$OUT/torch_${which}_$tag.json" 2>"$OUT/torch_${which}_$tag.err"; then
            ran_any=1
        else
            note "pytorch ($which) failed (exit $?); see $OUT/torch_${which}_$tag.err"
        fi
        gemm_check "torch_${which}_$tag"
    done
done

echo
"$PY" "$ROOT/bench/report.py" "$OUT" || die "report failed"
[ $ran_any = 1 ] || exit 1
