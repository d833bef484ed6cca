# bench/plan_lib.sh: what the planner's benches share (bench_plan_auto.sh, bench_plan_budgets.sh);
# source it after setting $bin and $out (with $out/disk), and HPT_CALIBRATION exported.
# plan_data: a random-token shard $out/train_000000.bin (40,000 tokens below 1000, seed 1).
# plan_calibrate: a standalone calibration into $HPT_CALIBRATION (calibrate keeps rates recorded
#   by earlier runs, so the file goes first), copied to $out/calibration_standalone.json.
# plan_record MODEL T FLAGS: a training run with --record-rates (the engine's own disk rates and
#   the compute's loss beside them into the calibration), its step times and the load printed.
plan_data() {
  python3 - "$out" <<'PY'
import struct, sys, random
random.seed(1)
toks = [random.randrange(1000) for _ in range(40000)]
h = [20240520, 1, len(toks)] + [0] * 253
open(sys.argv[1] + '/train_000000.bin', 'wb').write(struct.pack('<256i', *h) + struct.pack('<%dH' % len(toks), *toks))
PY
}

plan_calibrate() {
  rm -f "$HPT_CALIBRATION"
  "$bin" calibrate ${CAL_FLAGS:-} --offload-dir "$out/disk" 2>&1 | grep -E "disk|measured" || return 1
  cp "$HPT_CALIBRATION" "$out/calibration_standalone.json"
}

plan_record() { # MODEL T FLAGS
  echo "record run: $1 $3"
  # shellcheck disable=SC2086
  "$bin" train --model "$1" --data "$out/train_*.bin" --batch 1 --seq "$2" --steps "$STEPS" \
    --quiet $3 --offload-dir "$out/disk" --record-rates --log "$out/record.jsonl" 2>&1 |
    grep -E "^offload: per step: disk read|engine rates recorded" || return 1
  python3 -c "
import json
ms = [json.loads(l)['step_ms'] for l in open('$out/record.jsonl')]
print('record run: step ms', ' '.join('%.0f' % m for m in ms), '| load', open('/proc/loadavg').read().split()[0])"
}
