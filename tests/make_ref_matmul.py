#!/usr/bin/python3
"""make_ref_matmul.py OUTDIR: PyTorch's reference for --matmul bf16 (docs/design.md, "Matmul
precision"): every linear layer (nn.Linear and F.linear: the blocks' projections and the head)
through a function whose forward is out = bf16(x) @ bf16(w)^T + b and whose backward is
dx = bf16(dout) @ bf16(w), dw = bf16(dout)^T @ bf16(x), db = sum(dout), bf16(t) being torch's
t.bfloat16().float() (round to nearest even), the products and sums fp32; and attention through
Bf16Flash, the flash pair's bf16 rule (backend.h's flash_attention_forward_bf16): S = bf16(q)
bf16(k)^T scaled after the sum, the online softmax over key tiles of 64 with P relative to the
running max, O += bf16(P) bf16(v), O / l; backward P = exp(S - lse), dP = bf16(dO) bf16(v)^T,
D = rowsum(dO * O), dS = P (dP - D) scale, dq = bf16(dS) bf16(k), dk = bf16(dS)^T bf16(q),
dv = bf16(P)^T bf16(dO). The batch, models and file layout are make_ref_pack.py's (packed
examples, a block-diagonal causal mask, positions per example): OUTDIR/matmul_gpt2.bin and
OUTDIR/matmul_llama.bin. And OUTDIR/matmul_attn.bin: the attention alone (causal,
grouped-query, several key tiles):
  256 int32: 20261130, cases, 0...; per case 8 int32: B, T, NH, NKV, hd, 0, 0, 0; then
  qkv (B,T,(NH+2 NKV) hd), dout (B,T,NH hd), out (B,T,NH hd), lse (B,NH,T), dqkv (as qkv), fp32.
Debian's /usr/bin/python3.
make_ref_matmul.py --spread OUTDIR: no files kept; prints how far the reference's gradients move
when only its sums change (the same bf16 operands, the products and sums in fp64, then fp32):
a bf16-operand model is discontinuous (a last-bit change before a rounding can move a value by
one bf16 step), so this is the scale at which two correct implementations may differ."""
import math
import os
import struct
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


FA_BC = 64  # the key tile of the online softmax (flash_attention.c's FA_BC, the CUDA kernels')


class Bf16Flash(torch.autograd.Function):
    """attention of q, k, v (B, NH, T, hd; k, v repeated per query head) under allowed
    (B or 1, 1, T, T) with the flash pair's bf16 rule; returns O"""
    @staticmethod
    def forward(ctx, q, k, v, allowed, scale):
        qr, kr, vr = bf16(q), bf16(k), bf16(v)
        S = (qr @ kr.transpose(-2, -1)) * scale
        S = S.masked_fill(~allowed, float("-inf"))
        T = S.shape[-1]
        m = torch.full(S.shape[:-1], float("-inf"))
        l = torch.zeros(S.shape[:-1])
        O = torch.zeros(q.shape)
        for k0 in range(0, T, FA_BC):
            st = S[..., k0:k0 + FA_BC]
            mnew = torch.maximum(m, st.amax(-1))
            seen = mnew > float("-inf")  # rows with a key so far: the others stay as they are
            mm = torch.where(seen, mnew, torch.zeros_like(mnew))
            corr = torch.where(seen, torch.exp(m - mm), torch.ones_like(m))
            p = torch.where(seen[..., None], torch.exp(st - mm[..., None]), torch.zeros_like(st))
            l = l * corr + p.sum(-1)
            O = O * corr[..., None] + bf16(p) @ vr[..., k0:k0 + FA_BC, :]
            m = mnew
        O = O / l[..., None]
        lse = m + torch.log(l)
        ctx.save_for_backward(q, k, v, O, lse, S)
        ctx.scale = scale
        return O, lse

    @staticmethod
    def backward(ctx, dO, dlse):
        q, k, v, O, lse, S = ctx.saved_tensors
        P = torch.exp(S - lse[..., None])  # masked: exp(-inf) = 0
        dP = bf16(dO) @ bf16(v).transpose(-2, -1)
        D = (dO * O).sum(-1)
        dS = P * (dP - D[..., None]) * ctx.scale
        dq = bf16(dS) @ bf16(k)
        dk = bf16(dS).transpose(-2, -1) @ bf16(q)
        dv = bf16(P).transpose(-2, -1) @ bf16(dO)
        return dq, dk, dv, None, None


def bf16_attend(q, k, v, allowed, scale):
    return Bf16Flash.apply(q, k, v, allowed, scale)[0]


ATTN_CASES = [(2, 200, 4, 2, 64), (1, 150, 4, 1, 128), (1, 70, 2, 2, 32)]


def attn_run(dtype=torch.float32):
    """each case's tensors (qkv, dout, out, lse, dqkv); dtype float64: the same fp32 inputs and
    bf16 operands with the sums in fp64 (--spread), the results back in fp32"""
    torch.manual_seed(2913)
    res = []
    for B, T, NH, NKV, hd in ATTN_CASES:
        qkv = torch.randn(B, T, (NH + 2 * NKV) * hd, dtype=torch.float32)
        dout = torch.randn(B, T, NH * hd, dtype=torch.float32)
        x = qkv.clone().to(dtype).requires_grad_(True)
        q, k, v = x.split([NH * hd, NKV * hd, NKV * hd], dim=2)
        q = q.view(B, T, NH, hd).transpose(1, 2)
        k = k.view(B, T, NKV, hd).transpose(1, 2).repeat_interleave(NH // NKV, dim=1)
        v = v.view(B, T, NKV, hd).transpose(1, 2).repeat_interleave(NH // NKV, dim=1)
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None]
        o, lse = Bf16Flash.apply(q, k, v, allowed, 1.0 / math.sqrt(hd))
        out = o.transpose(1, 2).reshape(B, T, NH * hd)
        out.backward(dout.to(dtype))
        res.append([t.detach().float() for t in (qkv, dout, out, lse, x.grad)])
    return res


def attn_cases(path):
    """matmul_attn.bin: the attention alone, causal and grouped-query, against the kernels"""
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20261130, len(ATTN_CASES)] + [0] * 254)))
        for case, ts in zip(ATTN_CASES, attn_run()):
            f.write(struct.pack("<8i", *case, 0, 0, 0))
            for t in ts:
                f.write(t.contiguous().numpy().tobytes())


def spread_attn():
    global bf16
    r32 = attn_run()
    bf16 = lambda t: t.to(torch.bfloat16).to(t.dtype)  # noqa: E731 (fp64 stays fp64)
    torch.set_default_dtype(torch.float64)
    r64 = attn_run(torch.float64)
    torch.set_default_dtype(torch.float32)
    for case, a, b in zip(ATTN_CASES, r32, r64):
        print("attention B=%d T=%d NH=%d NKV=%d hd=%d: fp32 vs fp64 sums of the same bf16 "
              "operands: out rel %.1e, lse rel %.1e, dqkv rel %.1e" % (case + tuple(
                  float((x - y).norm() / y.norm()) for x, y in zip(a[2:], b[2:]))))


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
    rp.attend = bf16_attend
    for fn in (Bf16Linear, Bf16LinearF64):
        torch.nn.functional.linear = lambda x, w, b=None, fn=fn: fn.apply(x, w, b)
        rp.main("spread")
    spread_attn()
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
    rp.attend = bf16_attend
    rp.main("matmul")
    attn_cases(os.path.join(sys.argv[1], "matmul_attn.bin"))


if __name__ == "__main__":
    main()
