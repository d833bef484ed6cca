#!/usr/bin/python3
"""eval_torch_ref.py OUTDIR L C NH V Vp maxT B T NB SEED [masked]: PyTorch's mean loss of a random GPT-2
over the first NB batches of a token shard, read as hptrain's data loader reads them (window k
is tokens[k*B*T : (k+1)*B*T + 1]; inputs its first B*T tokens as (B, T), targets the same
shifted by one). Writes OUTDIR/model.bin (llm.c checkpoint v3), OUTDIR/data_000000.bin (llm.c
shard: uint32, magic 20240801 version 7, when V > 65536; else uint16) and prints the mean loss
(%.9g). The weights are drawn wider than GPT-2's init (std 0.3) so that the loss is far from
ln V and depends on every weight. The model is bench/torch_gpt2.py's GPT2 (the one
tests/make_ref_state.py uses); the shard is written here from the format, not by hptrain.
masked: the shard is a masked one (version 2, or 8 when V > 65536: docs/formats.md) with about
40% of the tokens targets; a target whose flag is 0 is ignore_index (-100), and the loss is the
mean over every target of the NB batches (the sum of the batches' sums over their targets
divided by their number), printed with the number of targets."""
import os
import struct
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "bench"))
from make_ref_state import flat  # noqa: E402
from torch_gpt2 import GPT2  # noqa: E402


def main():
    out, L, C, NH, V, Vp, maxT, B, T, NB, seed = sys.argv[1], *map(int, sys.argv[2:12])
    masked = sys.argv[12:] == ["masked"]
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = GPT2(L, C, NH, V, maxT)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.bin"), "wb") as f:
        f.write(struct.pack("<256i", *([20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248)))
        f.write(flat(model, L, C, V, Vp, maxT, False).numpy().tobytes())
    n = NB * B * T + 1 + 17  # a few tokens past the last window
    tokens = torch.randint(0, V, (n,))
    wide = V > 65536
    flags = (torch.rand(n) < 0.4).to(torch.uint8)
    starts = [0, n // 5, n // 2]
    with open(os.path.join(out, "data_000000.bin"), "wb") as f:
        if masked:
            f.write(struct.pack("<256i", *([20240801, 8, n, 3] if wide else [20240520, 2, n, 3]) + [0] * 252))
        else:
            f.write(struct.pack("<256i", *([20240801, 7, n] if wide else [20240520, 1, n]) + [0] * 253))
        f.write(struct.pack("<%d%s" % (n, "I" if wide else "H"), *tokens.tolist()))
        if masked:
            f.write(flags.numpy().tobytes())
            f.write(struct.pack("<3I", *starts))
    total, count = 0.0, 0
    with torch.no_grad():
        for k in range(NB):
            w = tokens[k * B * T: (k + 1) * B * T + 1]
            y = w[1:].clone()
            if masked:
                y[flags[k * B * T + 1: (k + 1) * B * T + 1] == 0] = -100
            c = int((y >= 0).sum())
            if c:  # cross_entropy's mean over the targets that are not ignore_index
                total += float(model(w[:-1].view(B, T), y.view(B, T))) * (c if masked else 1)
            count += c
    if masked:
        print("%.9g %d" % (total / count, count))
    else:
        print("%.9g" % (total / NB))


if __name__ == "__main__":
    main()
