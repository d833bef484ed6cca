# tests/mpi_lib.sh: what the MPI tests share; source it after lib.sh. Exits 77 (ctest: SKIP)
# without mpirun; Open MPI's settings for root, more ranks than cores and shared memory without
# the single-copy mechanism (absent in containers); one thread per process; $mpi, the launcher;
# mpi_shard FILE writes the token shard the tests train on (V=64: a 37-token pattern, 20% noise,
# 30,000 tokens). same_but_norm DIR_A DIR_B WHAT: the two runs' model.bin equal and their state.bin
# equal up to the header's previous-step norm (bytes 216..219) and the checksum over it (4 bytes
# after the tensors); calls the caller's bad(). state_of DIR: DIR's state.bin, or for a sharded
# checkpoint (zero.manifest: ZeRO's stages 1-2 in memory, 1-3 in the offload engine) one
# process's state.bin put together from its shards (tests/zero_state.py, which checks that they
# hold every byte once), as DIR.state.bin; same_but_norm compares through it.
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found"; exit 77; fi
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
# shellcheck disable=SC2034 # used by the scripts that source this
mpi=(mpirun --oversubscribe --bind-to none)
mpi_shard() {
  python3 - "$1" <<'PY'
import random, struct, sys
random.seed(5)
pat = [random.randrange(64) for _ in range(37)]
t = [pat[i % 37] if random.random() < 0.8 else random.randrange(64) for i in range(30000)]
open(sys.argv[1], "wb").write(
    struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)) + struct.pack("<%dH" % len(t), *t))
PY
}
. "$(dirname "${BASH_SOURCE[0]}")/zero_state.sh" # state_of
same_but_norm() { # DIR_A DIR_B WHAT
    python3 - "$(state_of "$1")" "$(state_of "$2")" <<'PY' || bad "$3: state.bin differs beyond the previous-step norm"
import sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
d = [i for i in range(len(a)) if a[i] != b[i] and not 216 <= i < 220] if len(a) == len(b) else [0, 9]
sys.exit(0 if not d or d[-1] - d[0] < 4 else 1)
PY
    cmp -s "$1/model.bin" "$2/model.bin" || bad "$3: model.bin differs"
}
