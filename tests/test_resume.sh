#!/usr/bin/env bash
# test_resume.sh HPTRAIN: `train --resume DIR` alone continues the run as DIR/run.json recorded
# it (issue 34, item 3; docs/formats.md, "The run record"). A run with many flags away from their
# defaults, split by --stop-at and by a shorter --steps, resumed with --resume DIR only (and
# --steps extended), gives the uninterrupted run's losses and state.bin bit for bit; a flag
# that may not change (--lr, --batch, --fused-update) is refused naming the saved and given
# values, one that may (--steps) is taken, the same value spelt otherwise is accepted; data
# that is gone, a damaged record and a state saved without one are refused in one line; a
# --plan auto run resumes on the plan it chose.
set -u
bin=$(readlink -f "$1")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh" # $tmp, ok, bad, expect_error, finish
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$tmp/data"
python3 - "$tmp/data" <<'PY'
import struct, sys, random
d = sys.argv[1]
random.seed(5)
def shard(path, toks):
    h = [20240520, 1, len(toks)] + [0] * 253
    open(path, 'wb').write(struct.pack('<256i', *h) + struct.pack('<%dH' % len(toks), *toks))
pattern = [random.randrange(64) for _ in range(40)]
toks = [pattern[i % 40] if random.random() < 0.9 else random.randrange(64) for i in range(6000)]
shard(d + '/train_000000.bin', toks[:5000])
shard(d + '/val_000000.bin', toks[5000:])
PY
cd "$tmp" || exit 1
# relative paths (recorded absolute); --min-lr = --lr: the rate after warmup does not depend on
# --steps, so a run extended by --steps is the longer run
flags=(--model "gpt2:L=2,C=32,NH=4,V=64,T=32" --data "data/train_*.bin" --val "data/val_*.bin"
       --batch 2 --seq 16 --accum 2 --lr 2e-3 --min-lr 2e-3 --warmup 3 --weight-decay 0.05
       --grad-clip 0.5 --seed 7 --optimizer lion --state-bits 8 --recompute full --head-chunk 8
       --eval-every 4 --val-batches 2 --threads 2 --quiet)
losses() { python3 -c 'import json,sys; print(" ".join("%.6f" % json.loads(l)["loss"] for f in sys.argv[1:] for l in open(f)))' "$@"; }

"$bin" train "${flags[@]}" --steps 12 --log full.jsonl --save full 2>err || bad "full run: $(cat err)"
full=$(losses full.jsonl)
# split by --stop-at: --resume DIR alone
"$bin" train "${flags[@]}" --steps 12 --stop-at 5 --log a1.jsonl --save a 2>err || [ $? -eq 0 ] || bad "stop-at: $(tail -1 err)"
[ -s a/run.json ] && ok || bad "no run.json beside state.bin"
cp -r a a0 # at step 5, for the resumes below
"$bin" train --resume a --log a2.jsonl >out 2>err || bad "--resume a alone: $(tail -2 err)"
[ "$(losses a1.jsonl a2.jsonl)" = "$full" ] && ok || bad "split by --stop-at: $(losses a1.jsonl a2.jsonl) vs $full"
cmp -s full/state.bin a/state.bin && ok || bad "split by --stop-at: state.bin differs"
# a save writes the weights' files first and state.bin last (the commit): a kill between the two
# leaves the state of step 11 beside the weights of step 12, and the resume does step 12 again
[ "$(stat -c %.9Y full/model.bin)" \< "$(stat -c %.9Y full/state.bin)" ] && ok ||
  bad "state.bin was not written after model.bin: $(stat -c '%.9Y %n' full/model.bin full/state.bin)"
"$bin" train "${flags[@]}" --steps 12 --stop-at 11 --save torn 2>err || [ $? -eq 0 ] || bad "stop-at 11: $(tail -1 err)"
cp full/model.bin torn/model.bin
"$bin" train --resume torn >out 2>err || bad "--resume torn: $(tail -2 err)"
cmp -s full/state.bin torn/state.bin && cmp -s full/model.bin torn/model.bin && ok ||
  bad "a save torn between model.bin and state.bin: the resume does not end as the full run"
# 6 steps, then --resume DIR --steps 12 (the one flag given): --steps is taken
"$bin" train "${flags[@]}" --steps 6 --log b1.jsonl --save b 2>err || bad "6 steps: $(cat err)"
"$bin" train --resume b --steps 12 --log b2.jsonl >out 2>err || bad "--resume b --steps 12: $(tail -2 err)"
[ "$(wc -l <b2.jsonl)" -eq 6 ] && ok || bad "--steps 12 not taken: $(wc -l <b2.jsonl) steps"
[ "$(losses b1.jsonl b2.jsonl)" = "$full" ] && ok || bad "extended by --steps: $(losses b1.jsonl b2.jsonl) vs $full"
cmp -s full/state.bin b/state.bin && ok || bad "extended by --steps: state.bin differs"
grep -q "resuming the run recorded in b/run.json at its step 6" err && ok || bad "no resume line: $(cat err)"
# the record now holds --steps 12: a resume from it is at its end
expect_error "before the end" "b/state.bin is at step 12, beyond --steps 10" "$bin" train --resume b --steps 10
"$bin" train --resume b >out 2>err && grep -q "b is at step 12, the run's last (--steps 12): nothing to do" err &&
  ok || bad "a resume at the run's end: $(cat err)"
# flags that may not change: refused with the saved and the given value
expect_error "--lr changed" "error: --lr: the run in a was saved with 2e-3, given 1e-3; a resume may change only --steps," \
  "$bin" train --resume a --lr 1e-3
expect_error "--batch changed" "error: --batch: the run in a was saved with 2, given 4" "$bin" train --resume a --batch 4
expect_error "--fused-update added" "error: --fused-update: the run in a was saved without it, given on" \
  "$bin" train --resume a --fused-update
expect_error "--schedule added" "error: --schedule: the run in a was saved with its default, given hybrid" \
  "$bin" train --resume a --schedule hybrid
expect_error "--plan auto of a given plan" "saved with its plan given as flags" "$bin" train --resume a --plan auto
# the same values spelt otherwise (and the paths relative again) are the same run
cp -r a0 a3
"$bin" train --resume a3 --lr 0.002 --batch 2 --data "./data/train_*.bin" --model "gpt2:L=2,C=32,NH=4,V=64,T=32" \
  --log a3.jsonl --quiet 2>err || bad "the same flags again refused: $(cat err)"
[ "$(losses a1.jsonl a3.jsonl)" = "$full" ] && ok || bad "resumed with the flags again: $(losses a1.jsonl a3.jsonl)"
# exact techniques may change (where the bytes live, not what is computed): the same bits
cp -r a0 a8
"$bin" train --resume a8 --recompute none --offload host --log a8.jsonl --quiet 2>err ||
  bad "--recompute none --offload host on resume: $(cat err)"
[ "$(losses a1.jsonl a8.jsonl)" = "$full" ] && ok || bad "resumed with other exact techniques: $(losses a1.jsonl a8.jsonl)"
cmp -s full/state.bin a8/state.bin && ok || bad "resumed with other exact techniques: state.bin differs"
# --save elsewhere: the new directory gets the record too, and resumes alone
cp -r a0 a4
"$bin" train --resume a4 --steps 8 --save a5 --quiet 2>err || bad "--save elsewhere: $(cat err)"
"$bin" train --resume a5 --steps 12 --log a5.jsonl --quiet 2>err || bad "resume of a5: $(cat err)"
cmp -s full/state.bin a5/state.bin && ok || bad "resumed through --save elsewhere: state.bin differs"
# the data gone: refused, naming the path as recorded and as given
cp -r a0 a6
mv data data.moved
expect_error "data gone" "the run's --data $tmp/data/train_\*.bin \(given as data/train_\*.bin\) matches no file now" \
  "$bin" train --resume a6
"$bin" train --resume a6 --data "data.moved/train_*.bin" --val "data.moved/val_*.bin" --log a6.jsonl --quiet 2>err ||
  bad "data at its new place: $(cat err)"
[ "$(losses a1.jsonl a6.jsonl)" = "$full" ] && ok || bad "resumed from the moved data: $(losses a1.jsonl a6.jsonl)"
mv data.moved data
# a damaged record; a state saved without one (before records): the flags again, as before
cp -r a0 a7
sed -i 's/"2e-3"/"3e-3"/' a7/run.json
expect_error "damaged record" "run.json: checksum mismatch" "$bin" train --resume a7
rm a7/run.json
expect_error "no record" "a7/run.json is missing .*give the run's flags again" "$bin" train --resume a7
"$bin" train "${flags[@]}" --steps 12 --resume a7 --log a7.jsonl 2>err || bad "no record, flags given: $(cat err)"
[ "$(losses a1.jsonl a7.jsonl)" = "$full" ] && ok || bad "resume without a record: $(losses a1.jsonl a7.jsonl)"
# a new run saving into another run's directory removes that run's record first
"$bin" train "${flags[@]}" --seed 8 --steps 2 --save a7 2>err || bad "new run into a7: $(cat err)"
grep -q '"seed", "8"' a7/run.json && ok || bad "a7's record is not the new run's"

# --plan auto: the plan chosen is recorded and resumed, never searched again (fake rates)
export HPT_CALIBRATION=$tmp/cal.json
cp "$here/calibration_fake.json" "$HPT_CALIBRATION" # made-up rates: nothing is timed
auto=(--model "gpt2:L=4,C=64,NH=4,V=64,T=32" --data "data/train_*.bin" --batch 4 --seq 32 --plan auto
      --memory 3500KB --host-memory 1GB --quiet)
"$bin" train "${auto[@]}" --steps 4 --log p.jsonl --save p 2>err || bad "auto run: $(cat err)"
plan=$(grep "^plan auto:" err | sed 's/^plan auto: //')
"$bin" train "${auto[@]}" --steps 4 --stop-at 2 --log q1.jsonl --save q 2>/dev/null
"$bin" train --resume q --log q2.jsonl 2>err || bad "--resume of an auto run: $(cat err)"
[ "$(losses q1.jsonl q2.jsonl)" = "$(losses p.jsonl)" ] && ok || bad "auto run resumed: $(losses q1.jsonl q2.jsonl) vs $(losses p.jsonl)"
cmp -s p/state.bin q/state.bin && ok || bad "auto run resumed: state.bin differs"
"$bin" train --resume q --plan auto --steps 5 2>err || bad "--resume with --plan auto: $(cat err)"
grep -qE '"plan_auto":\s*true' q/run.json && ok || bad "plan_auto not recorded"
expect_error "auto plan's flag changed" "error: --weight-decay: the run in q was saved with its default, given 0.2" \
  "$bin" train --resume q --weight-decay 0.2
# --accum may change with the number of processes; the state holds their product
expect_error "--accum changed" "trained with --accum 1 on one process.*got --accum 3 x 1" "$bin" train --resume q --accum 3
[ -n "$plan" ] && ok || bad "no plan line"
finish test_resume
