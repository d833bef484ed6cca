#!/usr/bin/python3
"""make_ref_state_llama.py OUTDIR SHAPE B T SEED: a PyTorch reference for a llama SHAPE
(hptrain's "llama:L=..,C=..,NH=..,NKV=..,FF=..,V=..,Vp=..,T=..,theta=..,eps=..[,factor=..,low=..,
high=..,orig=..][,tied=0|1][,attn_bias=1][,mlp_bias=1][,window=W]"), written as:
  OUTDIR/state.bin   reference state version 3 (hptrain's, any architecture): a header of 256
                     int32 (20240327, 3, B, T), x and y (B, T) int32, the initial parameters in
                     hptrain's checkpoint order (fp32, padding rows zero), the logits (B, T, V)
                     fp32, the loss fp32, the gradients in checkpoint order (fp32, padded);
  OUTDIR/steps.json  the loss before each of 10 AdamW steps (weight decay on every tensor).
The model is written here by hand from Hugging Face's LlamaForCausalLM maths (transformers is
not needed): RMSNorm, rotary embeddings with the rotate_half convention and Llama 3's
frequency scaling, grouped-query attention (K/V heads repeated, as HF's repeat_kv), SwiGLU,
tied or untied head; window=W: Mistral's sliding window (MistralForCausalLM's sliding_window),
an explicit mask keeping key j for query i when i - W < j <= i (transformers' kv_idx > q_idx -
sliding_window). fp32 throughout, the rotary tables computed in float64 then rounded.
Run with Debian's /usr/bin/python3 (python3-torch)."""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F


def parse_keys(c, keys, floats):
    """KEY=VALUE,... (keys: a shape after its family's colon) into the defaults c: floats for the
    keys named, integers for the others; then NKV (NH), Vp (V rounded up to 128) and hd (C/NH)
    where unset (the qwen and gemma scripts' too)"""
    for kv in keys.split(","):
        k, v = kv.split("=")
        c[k] = float(v) if k in floats else int(v)
    if c.get("NKV") is None:
        c["NKV"] = c["NH"]
    if c.get("Vp") is None:
        c["Vp"] = (c["V"] + 127) // 128 * 128
    if c.get("hd") is None:
        c["hd"] = c["C"] // c["NH"]
    return c


def parse_shape(shape):
    assert shape.startswith("llama:"), shape
    c = {"NKV": None, "V": 32000, "Vp": None, "T": 2048, "theta": 10000.0, "eps": 1e-6,
         "factor": 0.0, "low": 1.0, "high": 4.0, "orig": 0, "tied": 0, "attn_bias": 0,
         "mlp_bias": 0, "range": 0.02, "window": 0}
    return parse_keys(c, shape[6:], ("theta", "eps", "factor", "low", "high", "range"))


def inv_freq(hd, theta):
    """the default rotation's frequencies theta^(-2i/hd), float64"""
    return 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))


def rope_from_inv(inv, T):
    """cos, sin (T, hd) of frequencies inv as HF's (cat(freqs, freqs)), rounded from float64"""
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().float(), emb.sin().float()


def hf_init(model, std):
    """Hugging Face's _init_weights: N(0, std) for linear weights and embeddings, zero biases
    (norm weights keep their own initial values); the qwen and gemma scripts' too"""
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=std)
            if getattr(m, "bias", None) is not None:
                torch.nn.init.zeros_(m.bias)


def rope_tables(c, T):
    """cos, sin (T, hd) as HF's (cat(freqs, freqs)), Llama 3 scaling as _compute_llama3_parameters."""
    hd = c["C"] // c["NH"]
    inv = inv_freq(hd, c["theta"])
    if c["factor"] > 0:
        orig, lo, hi, factor = c["orig"], c["low"], c["high"], c["factor"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > orig / lo, inv / factor, inv)
        smooth = (orig / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < orig / hi) & ~(wavelen > orig / lo)
        inv = torch.where(medium, smoothed, scaled)
    return rope_from_inv(inv, T)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class RMSNorm(torch.nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        C, NH, NKV, FF = c["C"], c["NH"], c["NKV"], c["FF"]
        hd = C // NH
        self.c = c
        self.input_layernorm = RMSNorm(C, c["eps"])
        self.q_proj = torch.nn.Linear(C, NH * hd, bias=bool(c["attn_bias"]))
        self.k_proj = torch.nn.Linear(C, NKV * hd, bias=bool(c["attn_bias"]))
        self.v_proj = torch.nn.Linear(C, NKV * hd, bias=bool(c["attn_bias"]))
        self.o_proj = torch.nn.Linear(NH * hd, C, bias=bool(c["attn_bias"]))
        self.post_attention_layernorm = RMSNorm(C, c["eps"])
        self.gate_proj = torch.nn.Linear(C, FF, bias=bool(c["mlp_bias"]))
        self.up_proj = torch.nn.Linear(C, FF, bias=bool(c["mlp_bias"]))
        self.down_proj = torch.nn.Linear(FF, C, bias=bool(c["mlp_bias"]))

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        NH, NKV = self.c["NH"], self.c["NKV"]
        hd = C // NH
        n = self.input_layernorm(x)
        q = self.q_proj(n).view(B, T, NH, hd).transpose(1, 2)
        k = self.k_proj(n).view(B, T, NKV, hd).transpose(1, 2)
        v = self.v_proj(n).view(B, T, NKV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)  # HF's repeat_kv
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # keys after the query
        if self.c["window"] > 0:  # keys j <= i - W: outside the sliding window
            mask |= torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-self.c["window"])
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * hd)
        x = x + self.o_proj(y)
        n = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class Llama(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = torch.nn.Embedding(c["V"], c["C"])
        self.layers = torch.nn.ModuleList([Block(c) for _ in range(c["L"])])
        self.norm = RMSNorm(c["C"], c["eps"])
        if not c["tied"]:
            self.lm_head = torch.nn.Linear(c["C"], c["V"], bias=False)
        hf_init(self, c["range"])  # norm weights stay 1

    def head(self):
        return self.embed_tokens.weight if self.c["tied"] else self.lm_head.weight

    def forward(self, x, y=None):
        T = x.shape[1]
        cos, sin = rope_tables(self.c, T)
        h = self.embed_tokens(x)
        for blk in self.layers:
            h = blk(h, cos, sin)
        logits = F.linear(self.norm(h), self.head())
        if y is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, self.c["V"]), y.view(-1))


def table_parts(model, grads):
    """get, padded, stack: a tensor's values (or gradient, grads) flat; an embedding's padded to
    Vp rows with zeros; fn(layer)'s over model.layers, concatenated (the qwen and gemma scripts'
    flat too)"""
    c = model.c

    def get(t):
        t = t.grad if grads else t.data
        return t.detach().float().contiguous().view(-1)

    def padded(w):
        t = torch.zeros(c["Vp"], c["C"])
        t[: c["V"]] = w.grad if grads else w.data
        return t.view(-1)

    def stack(fn):
        return torch.cat([fn(b) for b in model.layers])

    return get, padded, stack


def flat(model, grads):
    """hptrain's llama table in checkpoint order: wte, ln1w, qkvw, [qkvb], attprojw, [attprojb],
    ln2w, fcw, [fcb], fcprojw, [fcprojb] stacked over L, lnfw, [lm_head]; wte and lm_head
    padded to Vp rows with zeros."""
    c = model.c
    get, padded, stack = table_parts(model, grads)

    parts = [padded(model.embed_tokens.weight),
             stack(lambda b: get(b.input_layernorm.weight)),
             stack(lambda b: torch.cat([get(b.q_proj.weight), get(b.k_proj.weight),
                                        get(b.v_proj.weight)]))]
    if c["attn_bias"]:
        parts.append(stack(lambda b: torch.cat([get(b.q_proj.bias), get(b.k_proj.bias),
                                                get(b.v_proj.bias)])))
    parts.append(stack(lambda b: get(b.o_proj.weight)))
    if c["attn_bias"]:
        parts.append(stack(lambda b: get(b.o_proj.bias)))
    parts.append(stack(lambda b: get(b.post_attention_layernorm.weight)))
    parts.append(stack(lambda b: torch.cat([get(b.gate_proj.weight), get(b.up_proj.weight)])))
    if c["mlp_bias"]:
        parts.append(stack(lambda b: torch.cat([get(b.gate_proj.bias), get(b.up_proj.bias)])))
    parts.append(stack(lambda b: get(b.down_proj.weight)))
    if c["mlp_bias"]:
        parts.append(stack(lambda b: get(b.down_proj.bias)))
    parts.append(get(model.norm.weight))
    if not c["tied"]:
        parts.append(padded(model.lm_head.weight))
    return torch.cat(parts)


def write_reference(out, model, flat, x, y):
    """OUT/state.bin (hptrain verify's reference: header, tokens x and targets y, the parameters
    flat(model, False), logits, loss, the gradients flat(model, True)) and OUT/steps.json (the
    losses of 10 AdamW steps on the same batch); tests/make_ref_state_qwen.py's too"""
    B, T = x.shape
    os.makedirs(out, exist_ok=True)
    params = flat(model, False)
    logits, loss = model(x, y)
    loss.backward()
    with open(os.path.join(out, "state.bin"), "wb") as f:
        f.write(struct.pack("<256i", *([20240327, 3, B, T] + [0] * 252)))
        f.write(x.to(torch.int32).numpy().tobytes())
        f.write(y.to(torch.int32).numpy().tobytes())
        f.write(params.numpy().tobytes())
        f.write(logits.detach().float().contiguous().numpy().tobytes())
        f.write(struct.pack("<f", float(loss)))
        f.write(flat(model, True).numpy().tobytes())
    model.zero_grad(set_to_none=True)
    cfg = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    losses = []
    for _ in range(10):
        _, l = model(x, y)
        losses.append(float(l))
        opt.zero_grad(set_to_none=True)
        l.backward()
        opt.step()
    with open(os.path.join(out, "steps.json"), "w") as f:
        json.dump({"adamw": cfg, "losses": losses}, f)


def main():
    out, shape, B, T, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    c = parse_shape(shape)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = Llama(c)
    # norm weights away from 1 and biases away from 0, so that their gradients are tested
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name or name.startswith("norm") or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    x = torch.randint(0, c["V"], (B, T))
    y = torch.randint(0, c["V"], (B, T))
    write_reference(out, model, flat, x, y)


if __name__ == "__main__":
    main()
