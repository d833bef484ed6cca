#!/usr/bin/python3
"""make_ref_mask.py OUTDIR: PyTorch's reference for the loss on targets only (docs/targets.md).
The tiny GPT-2 of make_ref_state.py (L=2 C=64 NH=4 V=1000 Vp=1024 maxT=64, seed 4242) in
OUTDIR/mask_model.bin, and OUTDIR/mask_state.bin: 256 int32 (20261128, 1, B=2, T=16, the
targets of row 0, of row 1), x (B*T int32), y (B*T int32: x shifted by one, as one window of
a shard; -1 where the token is not a target, the last one included),
the loss of cross_entropy(ignore_index=-100) on y with -1 read as -100 (fp32), then the
gradients in checkpoint order with wte padded to Vp rows. Row 0 has 4 targets, row 1 11: two
micro-batches of one row each have different target counts. Debian's /usr/bin/python3."""
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from make_ref_state import flat, logits_of, write_checkpoint  # noqa: E402
from torch_gpt2 import GPT2  # noqa: E402


def main():
    out = sys.argv[1]
    L, C, NH, V, Vp, maxT, B, T = 2, 64, 4, 1000, 1024, 64, 2, 16
    torch.manual_seed(4242)
    torch.set_num_threads(1)
    model = GPT2(L, C, NH, V, maxT)
    # as llm.c's loader makes a batch: one window of B*T+1 tokens, y is x shifted by one
    tok = torch.randint(0, V, (B * T + 1,))
    x = tok[:-1].view(B, T)
    y = tok[1:].view(B, T)
    # a prompt, then a response: row 0 the last 4 positions, row 1 positions 3..13
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[0, T - 4:] = True
    mask[1, 3:14] = True
    y = torch.where(mask, y, torch.full_like(y, -1))
    os.makedirs(out, exist_ok=True)
    write_checkpoint(os.path.join(out, "mask_model.bin"), model, L, C, NH, V, Vp, maxT)
    logits = logits_of(model, x, T)
    yt = torch.where(y < 0, torch.full_like(y, -100), y)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), yt.view(-1), ignore_index=-100)
    loss.backward()
    counts = [int(mask[b].sum()) for b in range(B)]
    with open(os.path.join(out, "mask_state.bin"), "wb") as f:
        f.write(struct.pack("<256i", *([20261128, 1, B, T] + counts + [0] * 250)))
        f.write(x.to(torch.int32).numpy().tobytes())
        f.write(y.to(torch.int32).numpy().tobytes())
        f.write(struct.pack("<f", float(loss)))
        f.write(flat(model, L, C, V, Vp, maxT, True).numpy().tobytes())


if __name__ == "__main__":
    main()
