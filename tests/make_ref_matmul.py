#!/usr/bin/python3
"""make_ref_matmul.py OUTDIR: PyTorch's reference for --matmul bf16 (docs/design.md, "Matmul
precision"): every linear layer (nn.Linear and F.linear: the blocks' projections and the head)
through a function whose forward is out = bf16(x) @ bf16(w)^T + b and whose backward is
dx = bf16(dout) @ bf16(w), dw = bf16(dout)^T @ bf16(x), db = sum(dout), bf16(t) being torch's
t.bfloat16().float() (round to nearest even), the products and sums fp32. Attention's own
products are untouched. The batch, models and file layout are make_ref_pack.py's (packed
examples, a block-diagonal causal mask, positions per example): OUTDIR/matmul_gpt2.bin and
OUTDIR/matmul_llama.bin. Debian's /usr/bin/python3.
make_ref_matmul.py --spread OUTDIR: no files kept; prints how far the reference's gradients move
when only its sums change (the same bf16 operands, the products and sums in fp64, then fp32):
a bf16-operand model is discontinuous (a last-bit change before a rounding can move a value by
one bf16 step), so this is the scale at which two correct implementations may differ."""
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import make_ref_pack as rp  # noqa: E402

fp32_linear = F.linear


def bf16(t):
    return t.bfloat16().float()


class Bf16Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_b = b is not None
        y = fp32_linear(bf16(x), bf16(w))
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gr = bf16(g)
        dx = gr @ bf16(w)
        dw = gr.reshape(-1, g.shape[-1]).t() @ bf16(x).reshape(-1, x.shape[-1])
        db = g.reshape(-1, g.shape[-1]).sum(0) if ctx.has_b else None
        return dx, dw, db


def bf16_linear(x, w, b=None):
    return Bf16Linear.apply(x, w, b)


class Bf16LinearF64(torch.autograd.Function):
    """Bf16Linear with the sums in fp64 (--spread)"""
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_b = b is not None
        y = (bf16(x).double() @ bf16(w).double().t()).float()
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gr = bf16(g).double()
        dx = (gr @ bf16(w).double()).float()
        dw = (gr.reshape(-1, g.shape[-1]).t() @ bf16(x).double().reshape(-1, x.shape[-1])).float()
        db = g.reshape(-1, g.shape[-1]).sum(0) if ctx.has_b else None
        return dx, dw, db


def spread():
    got = {}
    rp.write = lambda path, arch, shape, x, y, pos, params, loss, grads: \
        got.setdefault(arch, []).append((float(loss), grads))
    for fn in (Bf16Linear, Bf16LinearF64):
        torch.nn.functional.linear = lambda x, w, b=None, fn=fn: fn.apply(x, w, b)
        rp.main("spread")
    for arch, ((l32, g32), (l64, g64)) in sorted(got.items()):
        print("%s: fp32 vs fp64 sums of the same bf16 operands: loss rel %.1e, gradients rel %.1e"
              % (("gpt2", "llama")[arch], abs(l32 - l64) / abs(l64),
                 float((g32 - g64).norm() / g64.norm())))


def main():
    if sys.argv[1] == "--spread":
        sys.argv.pop(1)
        spread()
        return
    torch.nn.functional.linear = bf16_linear  # nn.Linear and the scripts' F.linear
    rp.main("matmul")


if __name__ == "__main__":
    main()
