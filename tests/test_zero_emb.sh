#!/usr/bin/env bash
# test_zero_emb.sh HPTRAIN: ZeRO stages 1-3 in the offload engine with wte's, wpe's and the final
# layernorm's optimizer state cut among the owners (src/offload/engine_zemb.c; docs/
# zero_engine.md, "wte, wpe and the final layernorm"): their gradients reduce-scattered onto the
# owners, the norm from the owners' chunk sums, the updated ranges all-gathered into every rank's
# weights. On this shape (C=64, V=64, T=32) the cut at N = 2 falls inside wte and rank 1 owns
# the rest of wte, wpe and the layernorm; at N = 3 rank 2 owns wpe's tail and the layernorm.
#  1. each run writes the state.bin and model.bin of its one-process twin (--accum N --zero 0,
#     same flags) byte for byte, with clipping on (so the norm's bits): fp32 AdamW at stage 2
#     (N = 2), 8-bit AdamW with fp32 embeddings' state at stage 3 (N = 3); (stage 1 and more:
#     tests/test_zero_engine.sh and test_zero_engine8.sh, whose runs cut the same state);
#  2. fused with clipping (the previous step's norm, from the chunk sums) at stage 2 writes what
#     fused stage 0 writes (N = 2);
#  3. a stage-2 checkpoint (the non-block moments gathered from their owners into one process's
#     file) resumes in one process (--accum 2 --zero 0) with the uninterrupted run's bits;
#  5. --embeddings chunked with 2 processes (wte's chunks summed over them in the backward before
#     their norm and update, each owner updating its part of a chunk): stage 3 writes stage 0's
#     bits, its bytes per rank are the estimate's, and both stay within 1e-4 of one
#     process with the whole batch (the order of the sums differs; without the chunks' sum the
#     weights were 3.5e-3 apart);
#  4. every rank's device bytes = `hptrain estimate --procs N --rank r`, and the non-block m and
#     v left out on each rank sum to what is derived from the shape: stage 0's device bytes minus
#     stage 2's, summed over the N ranks, = 2 moments x 4 bytes x (N - 1) x (Vp C + T C + 2 C).
# Skips (exit 77 as SKIP) where mpirun is not installed or the build has no MPI.
set -u
bin=$1
. "$(dirname "$0")/zero_engine_lib.sh" # lib.sh, mpi_lib.sh, zero_lib.sh; one, np, check_mem; the tokens, $tmp/disk, $TMPDIR
shape="gpt2:L=2,C=64,NH=4,V=64,T=32"
args=(--model "$shape" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --warmup 2 --grad-clip 0.5 --quiet)
host=(--offload host)

# ---- 1. the one-process twin's bits, clipping on -----------------------------------------------
one o2 --steps 4 --batch 2 --accum 2 --zero 0 "${host[@]}"
np 2 z0 --steps 4 --batch 2 --zero 0 "${host[@]}"
np 2 z2 --steps 4 --batch 2 --zero 2 "${host[@]}"
same_run "$tmp/o2" "$tmp/z2" "zero 2 fp32 np 2 vs accum 2"
one o3q --steps 3 --batch 1 --accum 3 --zero 0 --state-bits 8 --state-32bit-embeddings "${host[@]}"
np 3 z3q --steps 3 --batch 1 --zero 3 --state-bits 8 --state-32bit-embeddings "${host[@]}"
same_run "$tmp/o3q" "$tmp/z3q" "zero 3 8-bit (fp32 embeddings' state) np 3 vs accum 3"

# ---- 2. fused, clipping by the previous step's norm --------------------------------------------
np 2 z0f --steps 4 --batch 2 --zero 0 "${host[@]}" --fused-update
np 2 z2f --steps 4 --batch 2 --zero 2 "${host[@]}" --fused-update
same_run "$tmp/z0f" "$tmp/z2f" "zero 2 fused np 2 vs zero 0 fused np 2 (clipping on)"

# ---- 3. a stage-2 checkpoint: one process's files ------------------------------------------------
np 2 z2s --steps 2 --batch 2 --zero 2 "${host[@]}"
one r1 --steps 4 --batch 2 --accum 2 --zero 0 "${host[@]}" --resume "$tmp/z2s"
same_run "$tmp/o2" "$tmp/r1" "zero 2 np 2 saved at step 2, resumed in one process vs accum 2"

# ---- 4. bytes: measured = estimated per rank; the cut non-block state from the shape ----------
check_mem z2 2 "zero 2 fp32 np 2" --model "$shape" --seq 32 --batch 2 --zero 2 "${host[@]}"
check_mem z3q 3 "zero 3 8-bit np 3" --model "$shape" --seq 32 --batch 1 --zero 3 --state-bits 8 --state-32bit-embeddings "${host[@]}"
python3 - "$tmp" "$bin" "$shape" <<'PY' || bad "the non-block state left out of stage 2's ranks is not (N-1) x theirs"
import json, subprocess, sys
tmp, b, shape = sys.argv[1:4]
m = json.loads(subprocess.check_output([b, "estimate", "--json", "--model", shape, "--seq", "32"]))["model"]
C, Vp, T, N = m["C"], m["Vp"], m["maxT"], 2
nf = Vp * C + T * C + 2 * C # wte, wpe, lnfw, lnfb
dev = lambda run, r: json.loads(open("%s/%s.%d.jsonl" % (tmp, run, r)).readlines()[-1])["mem_peak_bytes"]
left = sum(dev("z0", r) - dev("z2", r) for r in range(N))
print("stage 0 - stage 2 device bytes summed over %d ranks: %d; 2 x 4 x (N-1) x %d non-block floats = %d" % (N, left, nf, 8 * (N - 1) * nf))
sys.exit(0 if left == 8 * (N - 1) * nf and all(dev("z2", r) < dev("z0", r) for r in range(N)) else 1)
PY
# ---- 5. chunked embeddings: wte's chunks summed over the processes in the backward ------------
ch=(--offload host --fused-update --embeddings chunked --steps 3)
one c1 "${ch[@]}" --batch 4
np 2 c0 "${ch[@]}" --batch 2 --zero 0
np 2 c3 "${ch[@]}" --batch 2 --zero 3
same_run "$tmp/c0" "$tmp/c3" "chunked embeddings fused np 2: zero 3 vs zero 0"
check_mem c3 2 "chunked zero 3 np 2" --model "$shape" --seq 32 --batch 2 --zero 3 "${ch[@]}"
python3 - "$tmp/c1/model.bin" "$tmp/c0/model.bin" <<'PY' || bad "chunked np 2 is not one process's batch 4 up to the sums' order"
import struct, sys
a, b = (open(p, "rb").read()[1024:] for p in sys.argv[1:3])
x, y = (struct.unpack("<%df" % (len(d) // 4), d) for d in (a, b))
d = max(abs(p - q) for p, q in zip(x, y))
print("chunked embeddings: np 2 x batch 2 against one process x batch 4, largest weight difference %.3g" % d)
sys.exit(0 if len(a) == len(b) and d < 1e-4 else 1) # unsummed chunks: 3.5e-3 (about lr)
PY
ls "$TMPDIR" | grep -q "hpt-zero3-rank" && bad "a rank's scratch checkpoint was left behind"

[ $fail = 0 ] && echo "test_zero_emb: all passed"
exit $((fail > 0))
