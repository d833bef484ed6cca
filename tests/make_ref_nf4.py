#!/usr/bin/env python3
"""make_ref_nf4.py OUT: NF4 reference for test_nf4 (src/model/nf4.h, docs/lora.md).

Written from the QLoRA paper (Dettmers et al. 2023, section 3 and appendix E), not from
bitsandbytes: the 4-bit NormalFloat data type is the quantiles of N(0, 1) with an exact zero,
the quantiles at linspace(1 - d, 0.5, 9) (8 positive values) and linspace(1 - d, 0.5, 8) (7
negative), d = (1/32 + 1/30) / 2 (the paper's offset, the mean of 1/(2*16) and 1/(2*15)),
normalised to [-1, 1];
block-wise absmax quantisation over blocks of 64; double quantisation of the absmax constants
(their mean subtracted) to 8-bit floats in blocks of 256 with one fp32 scale a block (FP8 E4M3,
scale = absmax / 448: the nearest of the format's values, enumerated from its definition, ties
to an even mantissa). Two codes a byte, the first in the high nibble.

The file: b"NF4R", int32 cases; per case int64 n, float32 x[n], int64 bytes, the storage (fp32
mean, fp32 scales, FP8 constants, packed codes), float32 dequantised x[n].
"""
import struct
import sys
from statistics import NormalDist

import numpy as np

BLOCK, GROUP = 64, 256


def normal_float4():
    """The paper's NF4: quantiles of N(0,1), asymmetric so that 0 is exact, normalised."""
    offset = 0.5 * (1.0 / 32.0 + 1.0 / 30.0)  # (1 - offset) is the outermost quantile
    p = 1.0 - offset
    q = NormalDist().inv_cdf
    pos = [q(v) for v in np.linspace(p, 0.5, 9)[:-1]]
    neg = [-q(v) for v in np.linspace(p, 0.5, 8)[:-1]]
    v = np.array(sorted(pos + [0.0] + neg))
    return v / np.abs(v).max()


# the table the paper's appendix (and bitsandbytes) print, as fp32; checked against the
# construction above
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float32)


# FP8 E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; code 0x7f is NaN, 448 the largest
E4M3 = np.array([(m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
                 for e in range(16) for m in range(8)][:127])  # codes 0..126, ascending


def fp8(v):
    """fp32 values (|v| <= 448) to E4M3 codes: the nearest value, ties to the even code."""
    a = np.abs(v.astype(np.float64))
    hi = np.clip(np.searchsorted(E4M3, a, side="left"), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    dl, dh = a - E4M3[lo], E4M3[hi] - a  # exact in double
    code = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
    return (code | np.where(v < 0, 0x80, 0)).astype(np.uint8)


def quantize(x):
    x = np.asarray(x, dtype=np.float32)
    n = x.size
    nb = -(-n // BLOCK)
    ng = -(-nb // GROUP)
    xp = np.zeros(nb * BLOCK, np.float32)
    xp[:n] = x
    a = np.abs(xp.reshape(nb, BLOCK)).max(axis=1).astype(np.float32)
    arep = np.repeat(a, BLOCK)[:n]
    xn = np.zeros(n, np.float32)
    nz = arep > 0
    xn[nz] = x[nz] / arep[nz]
    mids = ((NF4[:-1] + NF4[1:]) * np.float32(0.5)).astype(np.float32)
    codes = np.searchsorted(mids, xn, side="left").astype(np.uint8)  # mids strictly below
    codes[~nz] = 7
    mean = np.float32(np.cumsum(a.astype(np.float64))[-1] / nb)  # summed in order
    c = (a - mean).astype(np.float32)
    cp = np.zeros(ng * GROUP, np.float32)
    cp[:nb] = c
    m = np.abs(cp.reshape(ng, GROUP)).max(axis=1).astype(np.float32)
    s = (m / np.float32(448.0)).astype(np.float32)
    srep = np.repeat(s, GROUP)[:nb]
    r = np.zeros(nb, np.float32)
    pos = srep > 0
    r[pos] = c[pos] / srep[pos]
    q = fp8(np.clip(r, -448, 448))
    qv = E4M3[q & 0x7f] * np.where(q & 0x80, -1.0, 1.0)
    cc = np.zeros(2 * (-(-n // 2)), np.uint8)
    cc[:n] = codes
    packed = ((cc[0::2] << 4) | cc[1::2]).astype(np.uint8)
    store = (np.array([mean], np.float32).tobytes() + s.tobytes() + q.tobytes() + packed.tobytes())
    a2 = (qv * srep.astype(np.float64) + np.float64(mean)).astype(np.float32)
    deq = (NF4[codes] * np.repeat(a2, BLOCK)[:n]).astype(np.float32)
    return store, deq


def cases():
    r = np.random.default_rng(35)
    out = [r.normal(0, 0.02, 64 * 300 + 37),  # two groups, a short last block
           np.concatenate([r.standard_t(3, 2048) * 0.01, np.zeros(64),
                           r.normal(0, 1, 1984) * np.where(r.random(1984) < 0.01, 50, 1)]),
           r.normal(0, 1, 7),  # one short block, an odd count
           r.uniform(-3, 3, 64 * 256 * 2),  # whole groups
           np.full(130, -0.25),  # equal absmaxes: the constants all the mean
           r.normal(0, 0.02, 64 * 1100 + 5) * np.repeat(r.uniform(0.5, 2, 1101), 64)[:64 * 1100 + 5]]
    # (the last: over 65536 values, the codec's threaded path; five groups, absmaxes that vary)
    mids = (NF4[:-1] + NF4[1:]) * np.float32(0.5)
    ties = np.concatenate([[1.0], mids, -mids[::-1], [0.0] * (64 - 31)]).astype(np.float32)
    out.append(np.concatenate([ties, ties * 0.5, r.normal(0, 0.1, 3 * 64)]))  # ties: lower code
    return [np.asarray(c, dtype=np.float32) for c in out]


def main():
    ref = normal_float4()
    assert np.abs(ref - NF4.astype(np.float64)).max() < 1e-6, (ref, NF4)
    cs = cases()
    with open(sys.argv[1], "wb") as f:
        f.write(b"NF4R" + struct.pack("<i", len(cs)))
        for x in cs:
            store, deq = quantize(x)
            f.write(struct.pack("<q", x.size) + x.tobytes() + struct.pack("<q", len(store)) + store
                    + deq.tobytes())
    print(f"{sys.argv[1]}: {len(cs)} cases, NF4 table within "
          f"{np.abs(ref - NF4.astype(np.float64)).max():.1e} of the paper's construction")


if __name__ == "__main__":
    main()
