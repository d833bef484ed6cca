#!/usr/bin/env bash
# tests/test_dist_transport.sh BIN HAVE_NCCL HAVE_MPI: the communication layer's transport choice
# (HPT_DIST_TRANSPORT=mpi|nccl; docs/zero.md, "NCCL") through the command line: mpi and unset run;
# an unknown name, nccl in a build without NCCL, nccl without --device cuda are each refused in
# one line before anything is allocated or written (no --save directory, no log); with mpirun,
# the same refusal on every rank of two (the layer's configuration check passes first); ranks whose
# HPT_UNVERIFIED_NCCL differ refused by the configuration check; mpi named on one rank and unset on
# the other run (the same transport).
bin=$1
have_nccl=${2:-0}
have_mpi=${3:-0}
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
python3 - "$tmp" <<'PY'
import struct, sys, random
random.seed(5)
t = [random.randrange(64) for _ in range(3000)]
open(sys.argv[1] + "/train_000.bin", "wb").write(
    struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)) + struct.pack("<%dH" % len(t), *t))
PY
args=(train --model "gpt2:L=1,C=32,NH=4,V=64,T=16" --data "$tmp/train_*.bin" --batch 2 --seq 16 --steps 1 --quiet)
run() { env "$@" "$bin" "${args[@]}" --save "$tmp/save" --log "$tmp/log.jsonl"; }
nothing_written() { # WHAT
  if [ -e "$tmp/save" ] || [ -e "$tmp/log.jsonl" ]; then bad "$1: wrote $tmp/save or the log"; else ok; fi
}

for t in "" mpi; do
  rm -rf "$tmp/save" "$tmp/log.jsonl"
  if env HPT_DIST_TRANSPORT=$t "$bin" "${args[@]}" >"$tmp/out" 2>"$tmp/err"; then ok
  else bad "HPT_DIST_TRANSPORT='$t': $(head -c 400 "$tmp/err")"; fi
done
rm -rf "$tmp/save" "$tmp/log.jsonl"
expect_error "unknown transport" "^.*HPT_DIST_TRANSPORT=tcp: the transports are mpi and nccl$" run HPT_DIST_TRANSPORT=tcp
nothing_written "unknown transport"
if [ "$have_nccl" = 1 ]; then
  expect_error "nccl on the CPU" "HPT_DIST_TRANSPORT=nccl needs --device cuda" run HPT_DIST_TRANSPORT=nccl
else
  expect_error "nccl without NCCL" "HPT_DIST_TRANSPORT=nccl: this build has no NCCL" run HPT_DIST_TRANSPORT=nccl
fi
nothing_written "nccl refused"

if [ "$have_mpi" = 1 ] && command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
  rm -rf "$tmp/save" "$tmp/log.jsonl"
  mpirun --oversubscribe --bind-to none -np 2 -x HPT_DIST_TRANSPORT=nccl "$bin" "${args[@]}" --zero 1 \
    --save "$tmp/save" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  pat="HPT_DIST_TRANSPORT=nccl( needs --device cuda|: this build has no NCCL)"
  if [ $rc -ne 0 ] && [ "$(grep -cE "$pat" "$tmp/err")" -eq 2 ]; then ok
  else bad "2 ranks, nccl on the CPU: status $rc, stderr: $(head -c 600 "$tmp/err")"; fi
  nothing_written "2 ranks, nccl refused"
  # the transport's switches differ between the ranks: the configuration check names them
  mpirun --oversubscribe --bind-to none -np 1 "$bin" "${args[@]}" --zero 1 : \
    -np 1 env HPT_UNVERIFIED_NCCL=1 "$bin" "${args[@]}" --zero 1 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] && grep -q "HPT_UNVERIFIED_NCCL is 1 on rank 1 but unset on rank 0" "$tmp/err"; then ok
  else bad "2 ranks, HPT_UNVERIFIED_NCCL on one: status $rc, stderr: $(head -c 600 "$tmp/err")"; fi
  # the mpi transport named on one rank, unset on the other: the same choice, the run of 2 ranks
  rm -rf "$tmp/save"
  if mpirun --oversubscribe --bind-to none -np 1 "$bin" "${args[@]}" --zero 1 : \
      -np 1 env HPT_DIST_TRANSPORT=mpi "$bin" "${args[@]}" --zero 1 >"$tmp/out" 2>"$tmp/err"; then ok
  else bad "2 ranks, HPT_DIST_TRANSPORT=mpi on one: $(head -c 600 "$tmp/err")"; fi
  # the mpi transport named: the run of 2 ranks as before
  rm -rf "$tmp/save"
  if mpirun --oversubscribe --bind-to none -np 2 -x HPT_DIST_TRANSPORT=mpi "$bin" "${args[@]}" --zero 1 \
      >"$tmp/out" 2>"$tmp/err"; then ok
  else bad "2 ranks, HPT_DIST_TRANSPORT=mpi: $(head -c 600 "$tmp/err")"; fi
fi
finish test_dist_transport
