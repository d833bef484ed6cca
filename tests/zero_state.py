#!/usr/bin/env python3
"""zero_state.py DIR OUT: one process's state.bin put together from DIR's sharded ZeRO checkpoint
(zero.manifest and the shards it names; src/train/zero.c's format, version 2), written to OUT.

Independent of the C code's geometry: each shard's piece records say where its bytes lie in the
whole layout (the weights' first value, each state buffer's byte offset and length, the Kahan
compensation's first half); this puts every piece there, checks that the pieces of all shards
cover every byte of the weights, of each state buffer and of the compensation exactly once, and
checks each shard's CRC-32C against its own and the manifest's. The state.bin written is version 3
(state.c): the manifest's header fields, the weights, the six buffers, the sections (the loss
scaler's, then "bf16_comp"), its CRC-32C and end marker; so a sharded run and its one-process
twin compare byte for byte. With --body: only the header fields, the weights and the six buffers
(what tests/zero_lib.sh's shards_are compares). Exits 1 with a message on any inconsistency."""
import os
import struct
import sys

_T = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _T.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    t = _T
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def fail(msg):
    sys.stderr.write("zero_state.py: %s\n" % msg)
    sys.exit(1)


def pad8(n):
    return (n + 7) // 8 * 8


def place(whole, cover, at, data, what):
    if at + len(data) > len(whole):
        fail("%s: a piece at %d (+%d) beyond the whole (%d)" % (what, at, len(data), len(whole)))
    whole[at:at + len(data)] = data
    cover.append((at, at + len(data)))


def tiled(cover, total, what):
    at = 0
    for a, b in sorted(cover):
        if a != at:
            fail("%s: bytes %d..%d %s" % (what, at, a, "missing" if a > at else "held twice"))
        at = b
    if at != total:
        fail("%s: ends at %d of %d" % (what, at, total))


def main():
    d, out = sys.argv[1], sys.argv[2]
    man = open(os.path.join(d, "zero.manifest")).read().split("\n")
    if man[0] != "hptrain-zero 2":
        fail("not a version-2 manifest")
    fields, comp_s, ls, shards = None, 0, None, []
    for line in man[1:]:
        w = line.split()
        if not w:
            continue
        if w[0] == "fields":
            fields = [int(x) for x in w[1:]]
        elif w[0] == "comp":
            comp_s = int(w[1])
        elif w[0] == "loss_scale":
            ls = [int(x) for x in w[1:4]]
        elif w[0] == "shard":
            shards.append((w[2], int(w[4]), int(w[6]), int(w[8]), int(w[10], 16)))
    nparams, L = fields[20], fields[0]
    files = []
    for name, npieces, nvalues, nbytes, crc in shards:
        f = open(os.path.join(d, name), "rb").read()
        if len(f) != nbytes or f[:8] != b"HPTZERO2" or f[-8:] != b"HPTEND\0\0":
            fail("%s: not the shard the manifest names" % name)
        got = crc32c(f[:-12])
        if got != struct.unpack("<I", f[-12:-8])[0] or got != crc:
            fail("%s: checksum mismatch" % name)
        h = struct.unpack("<8q", f[8:72])
        nb = struct.unpack("<6Q", f[72:120])
        if h[2] != npieces or h[4] != nvalues:
            fail("%s: header differs from the manifest" % name)
        recs = [struct.unpack("<17Q", f[120 + 136 * k:256 + 136 * k]) for k in range(npieces)]
        files.append((name, f, h, nb, recs))
    totals = [sum(x[3][b] for x in files) for b in range(6)]
    params, bufs, comp = bytearray(nparams * 4), [bytearray(t) for t in totals], bytearray(L * comp_s * 2)
    cp, cb, cc = [], [[] for _ in range(6)], []
    for name, f, h, nb, recs in files:
        w0 = 120 + 136 * len(recs)
        b0 = [0] * 6
        o = w0 + pad8(h[4] * 4)
        for b in range(6):
            b0[b] = o
            o += pad8(nb[b])
        c0 = o
        cw, cbb, ccc = 0, [0] * 6, 0
        for r in recs:
            u, a, z, woff, coff = r[:5]
            n = z - a
            place(params, cp, woff * 4, f[w0 + cw * 4:w0 + (cw + n) * 4], "weights")
            cw += n
            for b in range(6):
                off, ln = r[5 + b], r[11 + b]
                if ln:
                    place(bufs[b], cb[b], off, f[b0[b] + cbb[b]:b0[b] + cbb[b] + ln], "state buffer %d" % b)
                cbb[b] += ln
            if coff != 0xFFFFFFFFFFFFFFFF:
                place(comp, cc, coff * 2, f[c0 + ccc * 2:c0 + (ccc + n) * 2], "compensation")
                ccc += n
    tiled(cp, len(params), "weights")
    for b in range(6):
        tiled(cb[b], totals[b], "state buffer %d" % b)
    if comp_s:  # each block's values; the padding to comp_s halves stays 0, as eng_comp's
        bnb = sum(b - a for a, b in cc) // L  # bytes of a block's values
        tiled(cc + [(l * comp_s * 2 + bnb, (l + 1) * comp_s * 2) for l in range(L)], len(comp), "compensation")
    secs = []
    if ls is not None:
        secs.append((b"loss_scale", struct.pack("<3q", *ls)))
    if comp_s:
        secs.append((b"bf16_comp", bytes(comp)))
    if len(sys.argv) > 3 and sys.argv[3] == "--body":
        open(out, "wb").write(struct.pack("<32q", *fields) + bytes(params) + b"".join(bytes(x) for x in bufs))
        return
    body = b"HPTSTATE" + struct.pack("<II", 3, 32) + struct.pack("<32q", *fields) + bytes(params)
    body += b"".join(bytes(x) for x in bufs) + struct.pack("<I", len(secs))
    for n, data in secs:
        body += n.ljust(16, b"\0") + struct.pack("<Q", len(data)) + data
    open(out, "wb").write(body + struct.pack("<I", crc32c(body)) + b"HPTEND\0\0")


main()
