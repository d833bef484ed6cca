# tests/zero_engine_lib.sh: the runs the ZeRO engine tests share (test_zero_engine8.sh,
# test_zero_engine16.sh, test_zero_ckpt_engine.sh, test_zero_emb.sh); sourcing it sources
# lib.sh ($tmp, bad, fail), mpi_lib.sh (SKIP without mpirun; $mpi, mpi_shard, same_but_norm,
# state_of) and zero_lib.sh (same_run) first. Its functions read the caller's $bin, $tmp,
# ${args[@]} and ${mpi[@]} when
# called. one NAME ARGS...: one process, saved in $tmp/NAME, logged in $tmp/NAME.jsonl; np N NAME
# ARGS...: N processes, each rank logging $tmp/NAME.<rank>.jsonl; check_mem RUN N WHAT
# ESTIMATE-ARGS...: every rank's accounted peak per tier (its log's last line) equals
# `hptrain estimate --procs N --rank r ESTIMATE-ARGS...`. A failed run or check calls bad().
# Sourcing it also writes the token file $tmp/train_000.bin (mpi_shard), makes $tmp/disk and the
# ranks' $TMPDIR ($tmp/scratch), and passes ASAN_OPTIONS to the ranks: a sanitizer build given as
# the binary sees Open MPI's own allocations outlive MPI_Finalize (not leaks of ours).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/mpi_lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/zero_lib.sh"
mpi_shard "$tmp/train_000.bin"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
mpi+=(-x ASAN_OPTIONS)
export TMPDIR="$tmp/scratch"
mkdir -p "$TMPDIR" "$tmp/disk"
one() { local n=$1; shift
    "$bin" train "${args[@]}" "$@" --save "$tmp/$n" --log "$tmp/$n.jsonl" 2>"$tmp/$n.err" || { bad "$n"; tail -3 "$tmp/$n.err"; }
}
np() { local N=$1 n=$2; shift 2
    "${mpi[@]}" -np "$N" "$bin" train "${args[@]}" "$@" --save "$tmp/$n" --log "$tmp/$n.%r.jsonl" 2>"$tmp/$n.err" ||
        { bad "$n"; tail -3 "$tmp/$n.err"; }
}
check_mem() { # RUN N WHAT ESTIMATE-ARGS...
    local run=$1 N=$2 what=$3; shift 3
    python3 - "$tmp/$run" "$N" "$what" "$bin" "$@" <<'PY' || bad "$what: measured != estimated"
import json, subprocess, sys
run, N, what, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ok = True
for r in range(N):
    e = json.loads(subprocess.check_output([b, "estimate", "--json", "--procs", str(N), "--rank", str(r)] + sys.argv[5:]))
    got = json.loads(open("%s.%d.jsonl" % (run, r)).readlines()[-1])
    est = e["peak_bytes_by_tier"]
    m = {"device": got["mem_peak_bytes"], "host": got["host_peak_bytes"], "disk": got["disk_peak_bytes"]}
    print("%s, rank %d: measured %s, estimated %s" % (what, r, m, est))
    ok = ok and all(m[t] == est[t] for t in m)
sys.exit(0 if ok else 1)
PY
}
