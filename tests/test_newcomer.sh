#!/usr/bin/env bash
# test_newcomer.sh HPTRAIN: a newcomer's path without surprises (issue 34), through the real
# binary, no reference data: every --help true for every registered family and for model
# directories; a plain run's progress lines name no phase (the hybrid schedule's do); --quiet
# prints the summary only; a refusal names the budget that binds, where each budget came from
# and the flag that changes it, and points to --plan auto (with --offload-dir or --allow lossy
# when they would help); printed flags hold only the budgets given, in the units given; a
# step time is predicted only from a calibration of the device it is for.
set -u
bin=$1
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
export HPT_CALIBRATION=$tmp/cal.json
cp "$(dirname "$0")/calibration_fake.json" "$HPT_CALIBRATION" # made-up rates: nothing is timed
python3 - "$tmp" <<'PY'
import struct, sys, random
random.seed(5)
toks = [random.randrange(64) for _ in range(4000)]
h = [20240520, 1, len(toks)] + [0] * 253
for name, part in (("train_000000.bin", toks[:3500]), ("val_000000.bin", toks[3500:])):
    open(sys.argv[1] + "/" + name, "wb").write(struct.pack("<256i", *h[:2], len(part), *h[3:]) +
                                              struct.pack("<%dH" % len(part), *part))
PY
shape="gpt2:L=2,C=32,NH=4,V=64,T=32"
run() { "$bin" train --model "$shape" --data "$tmp/train_*.bin" --batch 4 --seq 16 "$@"; }

# --- item 6: every --help true for both families and for model directories ---
"$bin" --help >"$tmp/h" 2>&1
! grep -q "Trains GPT-2 models" "$tmp/h" && grep -q "GPT-2" "$tmp/h" && grep -qi "llama" "$tmp/h" &&
  grep -q "Hugging Face model directories" "$tmp/h" && ok || bad "hptrain --help: $(head -4 "$tmp/h")"
for c in train estimate; do
  "$bin" $c --help >"$tmp/h" 2>&1
  grep -q -- "--model PATH|DIR|SHAPE" "$tmp/h" && grep -q "Hugging Face model directory" "$tmp/h" &&
    ! grep -q "llm.c checkpoint or shape" "$tmp/h" && ok || bad "$c --help: $(grep -- --model "$tmp/h")"
done
"$bin" sample --help >"$tmp/h" 2>&1
! grep -q "llm.c GPT-2 checkpoint" "$tmp/h" && grep -q "Hugging" "$tmp/h" && ok || bad "sample --help: $(sed -n 3,4p "$tmp/h")"

# --- item 6: the phase is named only under the hybrid schedule; --quiet: the summary only ---
run --steps 3 >/dev/null 2>"$tmp/e" || bad "plain run: $(cat "$tmp/e")"
grep -qE "^step 3/3 \| loss" "$tmp/e" && ! grep -qE "^step .*(full|warmup)" "$tmp/e" && ok ||
  bad "a plain run's progress names a phase: $(grep '^step' "$tmp/e" | head -2)"
run --steps 6 --val "$tmp/val_*.bin" --schedule hybrid --warmup-steps 2 --full-steps 2 \
  --max-predict-steps 2 --confidence 0 --predictor linear >/dev/null 2>"$tmp/e" || bad "hybrid run: $(cat "$tmp/e")"
grep -qE "^step 1/6 warmup +\| loss" "$tmp/e" && grep -qE "^step [0-9]/6 full +\| loss" "$tmp/e" && ok ||
  bad "a hybrid run's progress does not name its phases: $(grep '^step' "$tmp/e" | head -3)"
run --steps 3 --quiet >"$tmp/o" 2>"$tmp/e" || bad "quiet run: $(cat "$tmp/e")"
[ "$(wc -l <"$tmp/e")" -eq 2 ] && grep -q "^done: 3 steps" "$tmp/e" && grep -q "^memory: device peak" "$tmp/e" &&
  [ ! -s "$tmp/o" ] && ok || bad "--quiet printed more than the summary: $(cat "$tmp/e")"

finish test_newcomer.sh
