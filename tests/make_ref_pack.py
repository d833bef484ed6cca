#!/usr/bin/python3
"""make_ref_pack.py OUTDIR: PyTorch's reference for packed examples (docs/packing.md): several
examples per row, attention through an explicit block-diagonal causal mask (query t of row b
sees key j iff j <= t and both belong to the same example), positions restarting at each
example (GPT-2's wpe, Llama's rotary tables), the loss cross_entropy(ignore_index=-100) over the
targets (an example's last token and its context tokens ignored), padding at a row's end.
For each architecture, OUTDIR/pack_<arch>.bin:
  256 int32: 20261129, 1, arch (0 GPT-2, 1 Llama), B, T, n (parameters with padding), 0...;
  the shape string (128 bytes, NUL-padded), hptrain's;
  x, y, pos (B*T int32 each; y -1 where ignored; pos each token's position in its example);
  the parameters in hptrain's checkpoint order (n fp32, padding rows zero);
  the loss (fp32); the gradients (n fp32, same order).
The models are the tests' own (bench/torch_gpt2.py's GPT2, tests/make_ref_state_llama.py's
Llama), run by hand here with the mask and positions. Debian's /usr/bin/python3."""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "bench"))
import make_ref_state as rg  # noqa: E402
import make_ref_state_llama as rl  # noqa: E402
from torch_gpt2 import GPT2  # noqa: E402

B, T = 2, 48
# row 0: examples of 5, 1, 20, 22 tokens; row 1: 30 and 10, then 8 of padding
LENS = [[5, 1, 20, 22], [30, 10]]
GPT2_SHAPE = "gpt2:L=2,C=64,NH=4,V=1000,T=64"
LLAMA_SHAPE = "llama:L=2,C=64,NH=4,NKV=2,FF=96,V=1000,T=64,theta=10000,eps=1e-5,factor=8,orig=16"


def batch(V):
    """x, y (ignored: -100), pos, and the (B, 1, T, T) mask of keys a query may see"""
    x = torch.randint(0, V, (B, T))
    y = torch.full((B, T), -100, dtype=torch.long)
    pos = torch.zeros(B, T, dtype=torch.long)
    seg = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        t, s = 0, 0
        for n in LENS[b] + ([T - sum(LENS[b])] if sum(LENS[b]) < T else []):
            pad = t >= sum(LENS[b])
            for q in range(n):
                pos[b, t + q] = q
                seg[b, t + q] = s
                # the next token of the example is a target 3 times in 4 (never for padding)
                if not pad and q + 1 < n and torch.rand(()) < 0.75:
                    y[b, t + q] = x[b, t + q + 1]
            if pad:
                x[b, t:t + n] = 0
            t, s = t + n, s + 1
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    allowed = (seg[:, :, None] == seg[:, None, :]) & causal  # (B, T query, T key)
    return x, y, pos, allowed[:, None]


def attend(q, k, v, allowed, scale):
    """softmax(scale q k^T masked) v, (B, NH, T, hd) each (k, v repeated per query head);
    make_ref_matmul.py replaces it by its bf16-operand flash attention"""
    att = (q @ k.transpose(-2, -1)) * scale
    return att.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v


def gpt2_loss(model, x, y, pos, allowed):
    h = model.wte(x) + model.wpe(pos)
    for blk in model.blocks:
        n = blk.ln1(h)
        Bq, Tq, C = n.shape
        hs = C // blk.NH
        q, k, v = blk.qkv(n).split(C, dim=2)
        q, k, v = (u.view(Bq, Tq, blk.NH, hs).transpose(1, 2) for u in (q, k, v))
        y_att = attend(q, k, v, allowed, 1.0 / math.sqrt(hs))
        h = h + blk.proj(y_att.transpose(1, 2).reshape(Bq, Tq, C))
        h = h + blk.fcproj(F.gelu(blk.fc(blk.ln2(h)), approximate="tanh"))
    logits = F.linear(model.lnf(h), model.wte.weight)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1), ignore_index=-100)


def llama_loss(model, x, y, pos, allowed):
    c = model.c
    cos_t, sin_t = rl.rope_tables(c, c["T"])
    cos, sin = cos_t[pos][:, None], sin_t[pos][:, None]  # (B, 1, T, hd): each token's position
    h = model.embed_tokens(x)
    NH, NKV, C = c["NH"], c["NKV"], c["C"]
    hd = C // NH
    for blk in model.layers:
        n = blk.input_layernorm(h)
        q = blk.q_proj(n).view(B, T, NH, hd).transpose(1, 2)
        k = blk.k_proj(n).view(B, T, NKV, hd).transpose(1, 2)
        v = blk.v_proj(n).view(B, T, NKV, hd).transpose(1, 2)
        q = q * cos + rl.rotate_half(q) * sin
        k = k * cos + rl.rotate_half(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)
        v = v.repeat_interleave(NH // NKV, dim=1)
        y_att = attend(q, k, v, allowed, 1.0 / math.sqrt(hd))
        h = h + blk.o_proj(y_att.transpose(1, 2).reshape(B, T, NH * hd))
        n = blk.post_attention_layernorm(h)
        h = h + blk.down_proj(F.silu(blk.gate_proj(n)) * blk.up_proj(n))
    logits = F.linear(model.norm(h), model.head())
    return F.cross_entropy(logits.view(-1, c["V"]), y.view(-1), ignore_index=-100)


def write(path, arch, shape, x, y, pos, params, loss, grads):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20261129, 1, arch, B, T, params.numel()] + [0] * 250)))
        f.write(shape.encode().ljust(128, b"\0"))
        yt = torch.where(y < 0, torch.full_like(y, -1), y)
        for t in (x, yt, pos):
            f.write(t.to(torch.int32).numpy().tobytes())
        f.write(params.numpy().tobytes())
        f.write(struct.pack("<f", float(loss)))
        f.write(grads.numpy().tobytes())


def main(prefix="pack"):
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    # GPT-2
    torch.manual_seed(2911)
    L, C, NH, V, Vp, maxT = 2, 64, 4, 1000, 1024, 64
    model = GPT2(L, C, NH, V, maxT)
    x, y, pos, allowed = batch(V)
    params = rg.flat(model, L, C, V, Vp, maxT, False)
    loss = gpt2_loss(model, x, y, pos, allowed)
    loss.backward()
    write(os.path.join(out, prefix + "_gpt2.bin"), 0, GPT2_SHAPE, x, y, pos, params, loss,
          rg.flat(model, L, C, V, Vp, maxT, True))
    # Llama (grouped-query, Llama 3's rotary scaling, untied head)
    torch.manual_seed(2912)
    c = rl.parse_shape(LLAMA_SHAPE)
    model = rl.Llama(c)
    with torch.no_grad():  # norm weights away from 1, as make_ref_state_llama.py
        for name, p in model.named_parameters():
            if "layernorm" in name or name.startswith("norm"):
                p.add_(0.1 * torch.randn_like(p))
    x, y, pos, allowed = batch(c["V"])
    params = rl.flat(model, False)
    loss = llama_loss(model, x, y, pos, allowed)
    loss.backward()
    write(os.path.join(out, prefix + "_llama.bin"), 1, LLAMA_SHAPE, x, y, pos, params, loss,
          rl.flat(model, True))


if __name__ == "__main__":
    main()
