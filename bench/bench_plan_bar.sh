#!/usr/bin/env bash
# bench_plan_bar.sh [HPTRAIN] [OUT_DIR]: the planner's two bars in one coherent series
# (docs/planner.md, "The bar"): one calibration and the engine's recorded disk rates taken once
# at the start, then every part reuses them (REUSE=1), each part one command under the shared
# benchmark lock (flock /work/bench.lock, LOCK to change it), each under ~5 minutes
# (timeout 330 s), at normal priority; the load average is printed beside every row.
#   part 0  calibrate --quick; train --record-rates of gpt2-124m all on disk (layout 7) and of
#           gpt2-1558m T=128 with weights and gradients on the host, the state on disk (layout 4)
#   A1..F   bench_plan_auto.sh rows: predicted against measured (B=1; T=64, 128 for the 1558m
#           and llama3.2-1b rows), gpt2-124m to gpt2-1558m and Llama shapes, every tier
#   G, H    bench_plan_budgets.sh: gpt2-1558m at 2, 4 and 8 GB, lossless (with the person's plan,
#           --offload disk --fused-update) and lossy; llama3.2-1b at 2 and
#           4 GB (lossy: no lossless plan fits) and 8 GB (lossless and lossy), the person's plan
#           (docs/offload.md: --offload disk --fused-update) and the slowest plan of the search
#           that fits 8 GB (--offload disk --recompute full, 2 steps)
#   GRID    bench_plan_auto.sh's hand grid (the second bar): gpt2-124m B=1 T=64, --plan auto's
#           plan at 4 device budgets against the fastest fitting plan of the grid
# PARTS (a regex over the part names, default all) runs some of them; each part's output goes to
# OUT_DIR/NAME.txt and is printed.
set -u
bin=$(realpath "${1:-build/hptrain}")
out=$(realpath -m "${2:-$(mktemp -d)}")
here=$(cd "$(dirname "$0")" && pwd)
lock=${LOCK:-/work/bench.lock}
mkdir -p "$out/disk"
want() { [[ "$1" =~ ${PARTS:-.} ]]; }

if want 0; then
  flock "$lock" timeout 330 bash -c "export out='$out' bin='$bin' STEPS=3 CAL_FLAGS=--quick \
    HPT_CALIBRATION='$out/calibration.json'; . '$here/plan_lib.sh'; plan_data; echo \"uptime: \$(uptime)\"; \
    plan_calibrate && plan_record gpt2-124m 64 '--offload disk --fused-update' && \
    plan_record gpt2-1558m 128 '--offload params=host,grads=host,optim=disk --fused-update'" \
    >"$out/0.txt" 2>&1
  cat "$out/0.txt"
fi

part() { # NAME T CONFIGS
  want "$1" || return 0
  flock "$lock" timeout 330 env REUSE=1 STEPS=3 SKIP_GRID=1 T="$2" CONFIGS="$3" \
    bash "$here/bench_plan_auto.sh" "$bin" "$out" >"$out/$1.txt" 2>&1
  grep -v "^    offload" "$out/$1.txt"
}
part A1 64 '^124m-(device|recompute|actoff|host|host-fused|host-fused-thread|8bit-fused|bf16-host-fused)$'
part A2 64 '^124m-(disk-fused|disk-exact|host-homes-optim-disk)$'
part B 64 '^350m-(device|recompute|host|host-fused|disk-fused)$'
part C 64 '^llama-small(|-recompute|-host|-actoff)$|^llama-mid(|-host-fused)$'
part D 64 '^774m-(host-fused|disk-fused)$'
part E 128 '^1558m-(host-plan|lossy-host|host-homes-optim-disk)$'
part F 128 '^llama3.2-1b-(disk|host-lossy)$'

bud() { # NAME MODEL BUDGETS LOSSY PLANS [STEPS]
  want "$1" || return 0
  flock "$lock" timeout 330 env REUSE=1 STEPS="${6:-3}" MODEL="$2" T=128 HOST=10GB BUDGETS="$3" \
    LOSSY="$4" PLANS="$5" bash "$here/bench_plan_budgets.sh" "$bin" "$out" >"$out/$1.txt" 2>&1
  grep -v "^    offload" "$out/$1.txt"
}
bud G0a gpt2-1558m "2GB 4GB" "" ""
bud G0b gpt2-1558m "8GB" "" "--offload disk --fused-update"
bud G1 gpt2-1558m "2GB 4GB" 1 ""
bud G2 gpt2-1558m "8GB" 1 ""
bud H1 llama3.2-1b "2GB 4GB" 1 ""
bud H2 llama3.2-1b "8GB" "" ""
bud H2L llama3.2-1b "8GB" 1 ""
bud H3 llama3.2-1b " " "" "--offload disk --fused-update"
bud H4 llama3.2-1b " " "" "--offload disk --recompute full" 2
if want GRID; then
  flock "$lock" timeout 330 env REUSE=1 STEPS=3 T=64 CONFIGS='^$' \
    bash "$here/bench_plan_auto.sh" "$bin" "$out" >"$out/GRID.txt" 2>&1
  cat "$out/GRID.txt"
fi
