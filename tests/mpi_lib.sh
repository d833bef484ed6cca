# tests/mpi_lib.sh: what the MPI tests share; source it after lib.sh. Exits 77 (ctest: SKIP)
# without mpirun; Open MPI's settings for root, more ranks than cores and shared memory without
# the single-copy mechanism (absent in containers); one thread per process; $mpi, the launcher;
# mpi_shard FILE writes the token shard the tests train on (V=64: a 37-token pattern, 20% noise,
# 30,000 tokens).
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
