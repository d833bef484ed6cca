#!/usr/bin/env bash
# test_netns.sh HPTRAIN: two hosts for real, on one machine. Two network namespaces joined by a
# veth pair (10.77.N.1 and 10.77.N.2, N from this shell's pid) are the hosts; mpirun runs in the
# first and starts the second host's Open MPI daemon through a launch agent that enters the
# namespace (in place of ssh: plm_rsh_agent), and the ranks talk TCP over the veth only
# (btl self,tcp and oob restricted to the pair's subnet: no shared memory, no loopback between
# them). Checks: each rank sees its own host's address, and `hptrain train` on the two hosts
# writes the bits of one process with --accum 2 --zero 0 at ZeRO stages 0, 1, 2 (the shards
# put together) and 3 (--offload host), each host's device bytes at stages 1-3 = the estimate for
# its rank. The namespaces, the pair and the
# agent are removed on exit. SKIP (77) where mpirun is missing or `ip netns` is not permitted
# (no root, a container without CAP_NET_ADMIN).
set -u
bin=$1
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: ip (iproute2) not found"; exit 77; }
id=$(( $$ % 250 + 1 ))
nsa=hpt_a_$$ nsb=hpt_b_$$ va=hva$$ vb=hvb$$
ipa=10.77.$id.1 ipb=10.77.$id.2
tmp=$(mktemp -d)
cleanup() {
    ip netns del "$nsa" 2>/dev/null
    ip netns del "$nsb" 2>/dev/null # deleting a namespace deletes its end of the pair, and so both
    rm -rf "$tmp"
}
trap cleanup EXIT
if ! ip netns add "$nsa" 2>/dev/null; then echo "SKIP: ip netns add is not permitted here"; exit 77; fi
must() { "$@" || { echo "FAIL: setting up the hosts: $* (status $?)"; exit 1; }; }
must ip netns add "$nsb"
must ip link add "$va" type veth peer name "$vb"
must ip link set "$va" netns "$nsa"
must ip link set "$vb" netns "$nsb"
must ip -n "$nsa" addr add "$ipa/24" dev "$va"
must ip -n "$nsb" addr add "$ipb/24" dev "$vb"
for ns in "$nsa" "$nsb"; do must ip -n "$ns" link set lo up; done
must ip -n "$nsa" link set "$va" up
must ip -n "$nsb" link set "$vb" up
cat >"$tmp/agent.sh" <<EOF
#!/bin/bash
# Open MPI's launch agent: "agent HOST COMMAND..." runs COMMAND on HOST (its namespace here)
host=\$1; shift
case "\$host" in $ipa) ns=$nsa ;; $ipb) ns=$nsb ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$tmp/agent.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(ip netns exec "$nsa" mpirun --mca plm_rsh_agent "$tmp/agent.sh" --host "$ipa:1,$ipb:1" -np 2
     --mca btl self,tcp --mca btl_tcp_if_include "10.77.$id.0/24" --mca oob_tcp_if_include "10.77.$id.0/24"
     --mca plm_rsh_no_tree_spawn 1 --bind-to none)
fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

where=$(timeout 120 "${mpi[@]}" sh -c 'echo "rank $OMPI_COMM_WORLD_RANK $(ip -o -4 addr show scope global | awk "{print \$4}")"' 2>"$tmp/where.err" | sort)
# (Open MPI's warnings, e.g. a setpgid race in its launcher, go to stderr: shown, not compared)
[ -s "$tmp/where.err" ] && echo "mpirun said: $(head -c 300 "$tmp/where.err")"
echo "$where"
[ "$where" = "$(printf 'rank 0 %s/24\nrank 1 %s/24' "$ipa" "$ipb")" ] || bad "the ranks are not on the two hosts: $where"

python3 - "$tmp" <<'PY'
import random, struct, sys
random.seed(7)
pat = [random.randrange(64) for _ in range(41)]
t = [pat[i % 41] if random.random() < 0.8 else random.randrange(64) for i in range(20000)]
open(sys.argv[1] + "/train_000.bin", "wb").write(
    struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)) + struct.pack("<%dH" % len(t), *t))
PY
args=(--model "gpt2:L=2,C=64,NH=4,V=64,T=32" --data "$tmp/train_000.bin" --seq 32 --lr 3e-3 --steps 5
      --batch 2 --quiet)
"$bin" train "${args[@]}" --accum 2 --zero 0 --save "$tmp/one" 2>/dev/null || bad "one process"
timeout 300 "${mpi[@]}" "$bin" train "${args[@]}" --save "$tmp/two" 2>"$tmp/two.err" ||
    { bad "two hosts: hptrain train failed"; tail -20 "$tmp/two.err"; }
cmp -s "$tmp/one/state.bin" "$tmp/two/state.bin" || bad "two hosts: state.bin differs from one process's"
cmp -s "$tmp/one/model.bin" "$tmp/two/model.bin" || bad "two hosts: model.bin differs from one process's"
# ZeRO over the two hosts: stages 1 and 2 (sharded optimizer state and gradients: the shards put
# together are one process's state.bin) and 3 in the engine's host homes (its shards too)
. "$(dirname "$0")/zero_lib.sh" # same_run, shards_are
# each host's device bytes (its own log: --log 'F.%r.jsonl') = the estimate for its rank
per_host() { # per_host NAME ZERO_ARGS...
    local n=$1 est got; shift
    est=$("$bin" estimate --model "gpt2:L=2,C=64,NH=4,V=64,T=32" --seq 32 --batch 2 "$@" --procs 2 --json |
          python3 -c "import json,sys; print(' '.join(map(str, json.load(sys.stdin)['per_process_peak_bytes'])))")
    got=$(for r in 0 1; do tail -1 "$tmp/$n.$r.jsonl" | python3 -c "import json,sys; print(json.load(sys.stdin)['mem_peak_bytes'])"; done | xargs)
    echo "two hosts $*: device bytes per host measured $got, estimated $est"
    [ "$est" = "$got" ] || bad "two hosts $*: measured $got, estimated $est"
}
for z in 1 2; do
    timeout 300 "${mpi[@]}" "$bin" train "${args[@]}" --zero $z --save "$tmp/two$z" --log "$tmp/two$z.%r.jsonl" 2>"$tmp/two.err" ||
        { bad "two hosts --zero $z: hptrain train failed"; tail -20 "$tmp/two.err"; }
    cmp -s "$tmp/one/model.bin" "$tmp/two$z/model.bin" || bad "two hosts --zero $z: model.bin differs from one process's"
    shards_are "$tmp/two$z" "$tmp/one/state.bin" "two hosts --zero $z"
    per_host two$z --zero $z
done
timeout 300 "${mpi[@]}" "$bin" train "${args[@]}" --zero 3 --offload host --save "$tmp/two3" --log "$tmp/two3.%r.jsonl" 2>"$tmp/two.err" ||
    { bad "two hosts --zero 3 --offload host: hptrain train failed"; tail -20 "$tmp/two.err"; }
same_run "$tmp/one" "$tmp/two3" "two hosts --zero 3 --offload host"
per_host two3 --zero 3 --offload host
[ $fail -eq 0 ] && echo "test_netns: all passed (2 hosts as network namespaces, TCP over a veth pair; ZeRO stages 0-3)" ||
    echo "test_netns: $fail failure(s)"
[ $fail -eq 0 ]
