# tests/zero_lib.sh: what the ZeRO tests share (test_zero.sh, test_zero_fault.sh); source it
# after lib.sh. same_run DIR_A DIR_B WHAT: state.bin and model.bin byte for byte. shards_are DIR
# STATE WHAT: DIR's shards (its zero.manifest's), their weights and state buffers concatenated in
# rank order, are STATE's (a stage-0 state.bin) byte for byte (each shard holds a contiguous run
# of units, so concatenation is the whole layout), and the manifest's header fields are STATE's.
same_run() {
    cmp -s "$1/state.bin" "$2/state.bin" || bad "$3: state.bin differs"
    cmp -s "$1/model.bin" "$2/model.bin" || bad "$3: model.bin differs"
}
shards_are() {
    python3 - "$1" "$2" <<'PY' || bad "$3: the shards are not the one-process state"
import struct, sys, os
d, state = sys.argv[1], open(sys.argv[2], "rb").read()
man = open(d + "/zero.manifest").read().split("\n")
fields = [int(x) for x in next(l for l in man if l.startswith("fields")).split()[1:]]
shards = [l.split() for l in man if l.startswith("shard ")]
params, bufs = b"", [b""] * 6
for sh in shards:
    f = open(os.path.join(d, sh[2]), "rb").read()
    assert f[:8] == b"HPTZERO1"
    h = struct.unpack("<8q", f[8:72]); nb = struct.unpack("<6Q", f[72:120])
    o = 120 + (h[5] - h[4]) * 4
    params += f[120:o]
    for i in range(6):
        bufs[i] += f[o:o + nb[i]]; o += nb[i]
body = params + b"".join(bufs)
ok = list(struct.unpack("<32q", state[16:272])) == fields and state[272:272 + len(body)] == body
print("%s: %d shards, %d bytes of weights and state: %s" % (sys.argv[2], len(shards), len(body), "same" if ok else "DIFFERENT"))
sys.exit(0 if ok else 1)
PY
}
