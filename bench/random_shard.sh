# bench/random_shard.sh: sourced by the benchmarks that time steps on random tokens.
# random_shard DIR N: DIR/train_000.bin, an llm.c token shard of N tokens drawn uniformly
# below 50257 (seed 1), so runs compare on the same data. mean_ms LOG: the mean step_ms of
# steps 2.. of a --log JSONL file (the first step pays for warm-up).
random_shard() {
  python3 - "$1" "$2" <<'PY'
import random, struct, sys
random.seed(1)
n = int(sys.argv[2])
hdr = [20240520, 1, n] + [0] * 253
toks = [random.randrange(50257) for _ in range(n)]
open(sys.argv[1] + "/train_000.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % n, *toks))
PY
}

mean_ms() { python3 -c '
import json, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1])][1:]
print("%.1f" % (sum(ms) / len(ms)) if ms else "nan")' "$1"; }
