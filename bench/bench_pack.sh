#!/bin/bash
# bench/bench_pack.sh: packed examples against padded rows (docs/packing.md) on a generated
# chat-like dataset: N examples {"prompt", "completion"} of random English-like words whose
# lengths follow log-normal spreads (prompt median ~50 words, completion median ~80, sigma 0.9:
# most examples short, a long tail up to --seq, as instruction data such as Alpaca or
# ShareGPT), tokenized by `hptrain tokenize` (GPT-2's BPE, --max-tokens T truncating the tail),
# then `hptrain train` for S steps with --pack on and with --pack off, alternating R rounds on
# the same data, model and batch (B x T). Reported per mode: real tokens/s (the trainer's
# tok/s, which counts real tokens only; the median over each run's steps after the first 2),
# examples/s, the share of each row that is real, and the loss on the targets at the end.
#
# usage: bench/bench_pack.sh [--shape SHAPE] [--batch B] [--seq T] [--steps S] [--rounds R]
#                            [--examples N] [--threads N] [--hptrain PATH] [--attention K]
#   defaults: gpt2:L=4,C=256,NH=4,T=512 (V 50257), B=8, T=512, 12 steps, 2 rounds, 4000
#   examples, 2 threads, flash attention.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
SHAPE="gpt2:L=4,C=256,NH=4,T=512" B=8 T=512 STEPS=12 ROUNDS=2 N=4000 THREADS=2
HPTRAIN="$ROOT/build/hptrain" ATTN=flash
while [ $# -gt 0 ]; do
    case "$1" in
    --shape) SHAPE=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --examples) N=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --hptrain) HPTRAIN=$2; shift 2 ;;
    --attention) ATTN=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_pack.sh: unknown option '$1'" >&2; exit 1 ;;
    esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" - "$tmp/chat.jsonl" "$N" <<'PY'
import json, random, sys
random.seed(36)
words = ("the of and to in is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her she there would their we him been has when who will "
         "more no if out so said what up its about into than them can only other new some could "
         "time these two may then do first any my now such like our over man me even most made "
         "after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see "
         "men work long get here between both life being under never day same another know while "
         "last might us great old year off come since against go came right used take three").split()
def text(n):
    return " ".join(random.choice(words) for _ in range(max(1, n)))
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        p = int(random.lognormvariate(3.9, 0.9))   # median ~50 words
        c = int(random.lognormvariate(4.4, 0.9))   # median ~80 words
        f.write(json.dumps({"prompt": "User: " + text(p) + "\nAssistant:",
                            "completion": " " + text(c)}) + "\n")
PY
"$HPTRAIN" tokenize --output "$tmp/d" --val-fraction 0 --max-tokens "$T" "$tmp/chat.jsonl" 2>"$tmp/tok" ||
    { cat "$tmp/tok"; exit 1; }
tail -1 "$tmp/tok" | sed 's/^/data: /'
"$PY" - "$tmp/d" "$T" <<'PY'
import glob, struct, sys
lens = []
for fn in sorted(glob.glob(sys.argv[1] + "/train_*.bin")):
    b = open(fn, "rb").read()
    h = struct.unpack("<256i", b[:1024])
    n, e, w = h[2], h[3], 2 if h[0] == 20240520 else 4
    st = list(struct.unpack(f"<{e}I", b[1024 + (w + 1) * n:])) + [n]
    lens += [st[k + 1] - st[k] for k in range(e)]
lens.sort()
q = lambda f: lens[min(len(lens) - 1, int(f * len(lens)))]
print(f"examples: {len(lens)}, tokens per example: median {q(0.5)}, p10 {q(0.1)}, p90 {q(0.9)}, "
      f"max {lens[-1]}, mean {sum(lens) / len(lens):.0f} (rows of {sys.argv[2]})")
PY
run() { # mode round
    local log="$tmp/$1_$2.jsonl"
    OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE "$HPTRAIN" train --model "$SHAPE" \
        --data "$tmp/d/train_*.bin" --batch "$B" --seq "$T" --steps "$STEPS" --lr 1e-3 \
        --attention "$ATTN" --pack "$1" --threads "$THREADS" --log "$log" --quiet \
        >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
}
for r in $(seq 1 "$ROUNDS"); do
    for mode in on off; do run $mode "$r"; done
done
"$PY" - "$tmp" "$ROUNDS" "$B" "$T" "$SHAPE" "$ATTN" "$THREADS" <<'PY'
import json, statistics, sys
tmp, rounds, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"model {sys.argv[5]}, {sys.argv[6]} attention, B={B} T={T}, {sys.argv[7]} threads")
res = {}
for mode in ("on", "off"):
    tps, ms, loss = [], [], []
    for r in range(1, rounds + 1):
        steps = [json.loads(l) for l in open(f"{tmp}/{mode}_{r}.jsonl") if l.startswith("{")]
        steps = [s for s in steps if "tokens_per_s" in s]
        tps += [s["tokens_per_s"] for s in steps[2:]]
        ms += [s["step_ms"] for s in steps[2:]]
        loss.append(steps[-1]["loss"])
    res[mode] = (statistics.median(tps), statistics.median(ms), statistics.mean(loss))
for mode, (tps, ms, loss) in res.items():
    real = tps * ms / 1e3 / (B * T)
    print(f"--pack {mode:3}: {tps:8.0f} real tokens/s, step {ms:7.1f} ms, {real * 100:5.1f}% of "
          f"each row real, final loss {loss:.3f}")
print(f"packed / padded: {res['on'][0] / res['off'][0]:.2f}x real tokens/s")
PY
