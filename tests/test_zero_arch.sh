#!/usr/bin/env bash
# test_zero_arch.sh HPTRAIN ARCH: ZeRO's exactness for one registered architecture (ctest runs
# it for each name of HPT_TEST_ARCHS, as the C technique tests): two processes give one process's
# bits with --accum 2, at stage 0 in memory, stages 1 and 2 (sharded checkpoints put together),
# stage 3 in the offload engine's host and disk homes, and stage 3 with 8-bit state; each
# rank's accounted device peak equals `estimate --procs 2`'s for that rank (stages 1 and 2).
# A family without a case below fails, so a new one adds its small shape here.
set -u
bin=$1
arch=$2
. "$(dirname "$0")/lib.sh"      # $tmp, bad, fail
. "$(dirname "$0")/mpi_lib.sh"  # SKIP without mpirun; $mpi, mpi_shard
. "$(dirname "$0")/zero_lib.sh" # same_run
case $arch in
  gpt2) shape="gpt2:L=3,C=64,NH=4,V=64,T=32" ;;
  llama) shape="llama:L=3,C=64,NH=4,NKV=2,FF=96,V=64,T=32,tied=0" ;;
  qwen2) shape="qwen2:L=3,C=64,NH=4,NKV=2,FF=96,V=64,T=32,tied=0" ;;
  qwen3) shape="qwen3:L=3,C=64,NH=4,NKV=2,hd=20,FF=96,V=64,T=32,tied=0" ;;
  gemma3) shape="gemma3:L=3,C=64,NH=4,NKV=2,hd=20,FF=96,V=64,T=32,window=9,pattern=2,tied=0" ;;
  *) echo "test_zero_arch: no ZeRO case for architecture '$arch': add its shape here" >&2; exit 1 ;;
esac
mpi_shard "$tmp/train_000.bin"
export TMPDIR="$tmp/scratch"
mkdir -p "$TMPDIR" "$tmp/disk"
args=(--model "$shape" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --warmup 2 --quiet)
same() { local f0=$fail; same_run "$@"; [ "$fail" -eq "$f0" ] && ok; } # counted
one() { local n=$1; shift
  "$bin" train "${args[@]}" "$@" --save "$tmp/$n" 2>"$tmp/$n.err" || { bad "$arch $n"; tail -3 "$tmp/$n.err"; }; }
np2() { local n=$1; shift
  "${mpi[@]}" -np 2 "$bin" train "${args[@]}" "$@" --save "$tmp/$n" --log "$tmp/$n.%r.jsonl" 2>"$tmp/$n.err" ||
    { bad "$arch $n"; tail -3 "$tmp/$n.err"; }; }

one one --steps 4 --batch 2 --accum 2 --zero 0
for z in 0 1 2; do
  np2 z$z --steps 4 --batch 2 --zero $z
  same "$tmp/one" "$tmp/z$z" "$arch: np 2 --zero $z vs accum 2"
done
np2 z3 --steps 4 --batch 2 --zero 3 --offload host
same "$tmp/one" "$tmp/z3" "$arch: np 2 --zero 3 (host homes) vs accum 2"
np2 z3d --steps 4 --batch 2 --zero 3 --offload disk --offload-dir "$tmp/disk"
same "$tmp/one" "$tmp/z3d" "$arch: np 2 --zero 3 (disk homes) vs accum 2"
one one8 --steps 3 --batch 2 --accum 2 --zero 0 --state-bits 8 --offload host
np2 z38 --steps 3 --batch 2 --zero 3 --state-bits 8 --offload host
same "$tmp/one8" "$tmp/z38" "$arch: np 2 --zero 3 8-bit vs accum 2 8-bit"
for z in 1 2; do
  est=$("$bin" estimate --model "$shape" --seq 32 --batch 2 --zero $z --procs 2 --json |
        python3 -c "import json,sys; print(' '.join(map(str, json.load(sys.stdin)['per_process_peak_bytes'])))")
  got=$(for r in 0 1; do tail -1 "$tmp/z$z.$r.jsonl" | python3 -c "import json,sys; print(json.load(sys.stdin)['mem_peak_bytes'])"; done | xargs)
  echo "$arch np 2 --zero $z: device bytes per process measured $got, estimated $est"
  if [ -n "$est" ] && [ "$est" = "$got" ]; then ok; else bad "$arch np 2 --zero $z: measured $got, estimated $est"; fi
done
finish "test_zero_arch $arch"
