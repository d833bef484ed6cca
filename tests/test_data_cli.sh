#!/usr/bin/env bash
# test_data_cli.sh HPTRAIN: the data's order and validation split through the real binary
# (issue 34 item 5, docs/data.md): --val-split holds out whole documents and says how many and
# how much; a single document, --val with --val-split and bad values are refused in one line;
# a run stopped and resumed with shuffled rows and a split ends with the bits of the
# uninterrupted run, and a resume with the other --shuffle is refused; the progress line shows
# the raw loss and its bias-corrected EMA (0.9) as the log's losses give it, and no phase.
set -u
bin=$1
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=PASSIVE
python3 - "$tmp" <<'PY'
import random, struct, sys
random.seed(9)
def shard(path, t):
    open(path, "wb").write(struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)) +
                           struct.pack("<%dH" % len(t), *t))
# 40 documents, each opened by token 63 (the end-of-text of this V=64 vocabulary), 50..400 tokens
docs = [[63] + [random.randrange(63) for _ in range(random.randrange(50, 400))] for _ in range(40)]
a, b = sum(docs[:25], []), sum(docs[25:], [])
shard(sys.argv[1] + "/train_000.bin", a[:len(a) - 30])   # the cut falls inside a document
shard(sys.argv[1] + "/train_001.bin", a[len(a) - 30:] + b)
shard(sys.argv[1] + "/one_000.bin", docs[0] + docs[1][1:]) # one document
shard(sys.argv[1] + "/two_000.bin", [63] + [1] * 199 + [63] + [2] * 29) # 200 and 30 tokens
# a masked shard (version 2): 60 examples of 4..13 tokens, the first token context only
toks, flags, starts = [], [], []
for e in range(60):
    starts.append(len(toks))
    n = 4 + (e * 7) % 10
    toks += [random.randrange(63) for _ in range(n)]
    flags += [0] + [1] * (n - 1)
open(sys.argv[1] + "/chat_000.bin", "wb").write(
    struct.pack("<256i", *([20240520, 2, len(toks), len(starts)] + [0] * 252)) +
    struct.pack("<%dH" % len(toks), *toks) + bytes(flags) + struct.pack("<%dI" % len(starts), *starts))
PY
shape="gpt2:L=2,C=32,NH=4,V=64,T=32"
run() { "$bin" train --model "$shape" --data "$tmp/train_*.bin" --batch 4 --seq 16 "$@"; }

# --- the split: whole documents, counted; refusals ---
run --steps 2 --val-split 0.2 >/dev/null 2>"$tmp/e" || bad "val-split run: $(cat "$tmp/e")"
grep -qE "^hptrain: data: validation [0-9]+ of 40 documents, (19|2[0-9])\.[0-9]% of the tokens \(--val-split 0.2, --data-seed 1234\)$" "$tmp/e" &&
  grep -qE "^done: .*\| val loss [0-9.]+" "$tmp/e" && ok || bad "--val-split 0.2: $(grep -E '^(hptrain: data|done)' "$tmp/e")"
run --steps 2 --val-split 0.2 --data-seed 5 >/dev/null 2>"$tmp/e2"
[ "$(grep 'validation' "$tmp/e")" != "$(grep 'validation' "$tmp/e2" | sed 's/--data-seed 5/--data-seed 1234/')" ] && ok ||
  bad "--data-seed 5 chose what 1234 chose: $(grep validation "$tmp/e2")"
expect_error "one document" "holds 1 document .*--val" "$bin" train --model "$shape" --data "$tmp/one_*.bin" \
  --batch 4 --seq 16 --steps 1 --val-split 0.1
expect_error "val and val-split" "give .-val or .-val-split, not both" run --steps 1 --val "$tmp/train_*.bin" --val-split 0.1
expect_error "val-split range" "val-split" run --steps 1 --val-split 1.5
expect_error "shuffle value" "shuffle: on or off" run --steps 1 --shuffle yes
# two documents, of 200 and 30 tokens: one set holds fewer than a batch's 4 rows of 16 tokens
expect_error "a set under a batch" "documents hold .* fewer than a batch" "$bin" train --model "$shape" \
  --data "$tmp/two_*.bin" --batch 4 --seq 16 --steps 1 --val-split 0.05

# packed examples (a document each): the split by example, its rows shuffled
"$bin" train --model "$shape" --data "$tmp/chat_*.bin" --batch 2 --seq 16 --steps 3 --pack on \
  --val-split 0.25 >/dev/null 2>"$tmp/e" || bad "--pack on --val-split: $(tail -1 "$tmp/e")"
grep -qE "^hptrain: data: validation [0-9]+ of 60 documents, 2[5-9]\.[0-9]% of the tokens" "$tmp/e" &&
  grep -qE "^done: .*\| val loss" "$tmp/e" && ok || bad "--pack on --val-split: $(grep -E '^(hptrain: data|done)' "$tmp/e")"

# --- resume with shuffled rows and a split: the uninterrupted run's bits ---
run --steps 30 --val-split 0.2 --eval-every 10 --lr 3e-3 --quiet --save "$tmp/full" 2>/dev/null
run --steps 30 --val-split 0.2 --eval-every 10 --lr 3e-3 --quiet --save "$tmp/part" --stop-at 13 2>/dev/null
"$bin" train --resume "$tmp/part" --data "$tmp/train_*.bin" --batch 4 --seq 16 --steps 30 --val-split 0.2 \
  --eval-every 10 --lr 3e-3 --quiet --save "$tmp/part" 2>"$tmp/e" || bad "resume: $(cat "$tmp/e")"
cmp -s "$tmp/full/state.bin" "$tmp/part/state.bin" && cmp -s "$tmp/full/model.bin" "$tmp/part/model.bin" && ok ||
  bad "a run stopped at 13 and resumed (shuffled, split) differs from the uninterrupted one"
run --steps 30 --quiet --save "$tmp/s" --stop-at 3 2>/dev/null
expect_error "resume, other shuffle (the run record)" "shuffle: the run in .* was saved with its default, given off" \
  "$bin" train --resume "$tmp/s" --data "$tmp/train_*.bin" --batch 4 --seq 16 --steps 30 --shuffle off
rm "$tmp/s/run.json" # a state without its record (saved before records): the state's own check
expect_error "resume, other shuffle" "resume with the run's --shuffle" "$bin" train --resume "$tmp/s" \
  --data "$tmp/train_*.bin" --batch 4 --seq 16 --steps 30 --shuffle off
# a walk's checkpoint (--shuffle off, or one written before shuffling) resumed without --shuffle
# continues the walk: the bits of the uninterrupted --shuffle off run
run --steps 10 --shuffle off --quiet --save "$tmp/wfull" 2>/dev/null
run --steps 10 --shuffle off --quiet --save "$tmp/wpart" --stop-at 4 2>/dev/null
rm "$tmp/wpart/run.json" # without its record (whose --shuffle off a resume would take)
"$bin" train --resume "$tmp/wpart" --data "$tmp/train_*.bin" --batch 4 --seq 16 --steps 10 \
  --save "$tmp/wpart" >/dev/null 2>"$tmp/e" || bad "walk resume: $(cat "$tmp/e")"
grep -q "^hptrain: data: the checkpoint's position is the walk in order" "$tmp/e" &&
  cmp -s "$tmp/wfull/state.bin" "$tmp/wpart/state.bin" && ok ||
  bad "a walk's checkpoint resumed with the default --shuffle: $(grep 'data:' "$tmp/e")"

# --- the progress line: raw loss, its EMA, no phase ---
run --steps 12 --log "$tmp/log.jsonl" >/dev/null 2>"$tmp/e" || bad "progress run: $(cat "$tmp/e")"
python3 - "$tmp/log.jsonl" "$tmp/e" <<'PY' && ok || bad "progress line: $(grep '^step' "$tmp/e" | head -3)"
import json, re, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
lines = [l for l in open(sys.argv[2]) if l.startswith("step ")]
assert len(lines) == 12, len(lines)
ema = w = 0.0
for i, (loss, line) in enumerate(zip(losses, lines)):
    ema, w = 0.9 * ema + 0.1 * loss, 0.9 * w + 0.1
    m = re.match(r"step (\d+)/12 \| loss ([0-9.]+) \(ema ([0-9.]+)\) \| val - \| lr ", line)
    assert m, line
    assert int(m.group(1)) == i + 1 and abs(float(m.group(2)) - loss) < 6e-5, line
    assert abs(float(m.group(3)) - ema / w) < 6e-5, (line, ema / w)
PY
finish test_data_cli
