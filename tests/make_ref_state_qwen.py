#!/usr/bin/python3
"""make_ref_state_qwen.py OUTDIR SHAPE B T SEED: a PyTorch reference for a Qwen SHAPE (hptrain's
"qwen2:L=..,C=..,NH=..,NKV=..,FF=..,V=..[,Vp=..],T=..,theta=..,eps=..[,tied=0|1]" or
"qwen3:...[,hd=..][,attn_bias=0|1]"), written as tests/make_ref_state_llama.py writes a llama's:
  OUTDIR/state.bin   reference state version 3: header (20240327, 3, B, T), x and y (B, T) int32,
                     the initial parameters in hptrain's checkpoint order (fp32, padding rows
                     zero), the logits (B, T, V), the loss, the gradients in checkpoint order;
  OUTDIR/steps.json  the loss before each of 10 AdamW steps (weight decay on every tensor).
The model is written here by hand from Hugging Face's Qwen2ForCausalLM and Qwen3ForCausalLM
(modeling_qwen2.py, modeling_qwen3.py; transformers is not needed):
  Qwen2: q, k, v projections with biases, o_proj without; head width C/NH;
  Qwen3: no biases (attention_bias: q, k, v and o), q_norm and k_norm (RMSNorm over each head's
         head_dim values, rms_norm_eps) applied to the projections before the rotation; head_dim
         independent of C/NH (q_proj (NH hd, C), o_proj (C, NH hd));
  both: RMSNorm, default rotary embeddings (rotate_half), grouped-query attention (K/V heads
  repeated as repeat_kv), SwiGLU without biases, tied or untied head. fp32 throughout, the rotary
  tables computed in float64 then rounded. Run with Debian's /usr/bin/python3 (python3-torch)."""
import math
import sys

import torch
import torch.nn.functional as F

from make_ref_state_llama import (hf_init, inv_freq, parse_keys, rope_from_inv, rotate_half,
                                  table_parts, write_reference)


def parse_shape(shape):
    fam, _, rest = shape.partition(":")
    assert fam in ("qwen2", "qwen3"), shape
    c = {"fam": fam, "NKV": None, "V": 151936, "Vp": None, "T": 32768, "theta": 10000.0,
         "eps": 1e-6, "tied": 0, "attn_bias": 1 if fam == "qwen2" else 0, "range": 0.02,
         "hd": None}
    parse_keys(c, rest, ("theta", "eps", "range"))
    c["qk_norm"] = fam == "qwen3"
    c["o_bias"] = bool(c["attn_bias"]) and fam == "qwen3"
    return c


def rope_tables(c, T):
    """cos, sin (T, hd) as the default rotary embedding's (cat(freqs, freqs))."""
    hd = c["hd"]
    return rope_from_inv(inv_freq(hd, c["theta"]), T)


class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        C, NH, NKV, FF, hd = c["C"], c["NH"], c["NKV"], c["FF"], c["hd"]
        self.c = c
        qkv_bias = bool(c["attn_bias"])
        self.input_layernorm = RMSNorm(C, c["eps"])
        self.q_proj = torch.nn.Linear(C, NH * hd, bias=qkv_bias)
        self.k_proj = torch.nn.Linear(C, NKV * hd, bias=qkv_bias)
        self.v_proj = torch.nn.Linear(C, NKV * hd, bias=qkv_bias)
        self.o_proj = torch.nn.Linear(NH * hd, C, bias=c["o_bias"])
        if c["qk_norm"]:
            self.q_norm = RMSNorm(hd, c["eps"])
            self.k_norm = RMSNorm(hd, c["eps"])
        self.post_attention_layernorm = RMSNorm(C, c["eps"])
        self.gate_proj = torch.nn.Linear(C, FF, bias=False)
        self.up_proj = torch.nn.Linear(C, FF, bias=False)
        self.down_proj = torch.nn.Linear(FF, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        NH, NKV, hd = self.c["NH"], self.c["NKV"], self.c["hd"]
        n = self.input_layernorm(x)
        q = self.q_proj(n).view(B, T, NH, hd)
        k = self.k_proj(n).view(B, T, NKV, hd)
        if self.c["qk_norm"]:  # over each head's hd values, before the transpose and rotation
            q = self.q_norm(q)
            k = self.k_norm(k)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = self.v_proj(n).view(B, T, NKV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)  # repeat_kv
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) * hd ** -0.5
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * hd)
        x = x + self.o_proj(y)
        n = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class Qwen(torch.nn.Module):
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
        cos, sin = rope_tables(self.c, x.shape[1])
        h = self.embed_tokens(x)
        for blk in self.layers:
            h = blk(h, cos, sin)
        logits = F.linear(self.norm(h), self.head())
        if y is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, self.c["V"]), y.view(-1))


def perturb(model):
    """norm weights away from 1 and biases away from 0, so that their gradients are tested"""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))


def flat(model, grads):
    """hptrain's qwen table in checkpoint order: wte, ln1w, qkvw, [qkvb], [qknw], attprojw,
    [attprojb], ln2w, fcw, fcprojw stacked over L, lnfw, [lm_head]; wte and lm_head padded to
    Vp rows with zeros."""
    c = model.c
    get, padded, stack = table_parts(model, grads)

    parts = [padded(model.embed_tokens.weight),
             stack(lambda b: get(b.input_layernorm.weight)),
             stack(lambda b: torch.cat([get(b.q_proj.weight), get(b.k_proj.weight),
                                        get(b.v_proj.weight)]))]
    if c["attn_bias"]:
        parts.append(stack(lambda b: torch.cat([get(b.q_proj.bias), get(b.k_proj.bias),
                                                get(b.v_proj.bias)])))
    if c["qk_norm"]:
        parts.append(stack(lambda b: torch.cat([get(b.q_norm.weight), get(b.k_norm.weight)])))
    parts.append(stack(lambda b: get(b.o_proj.weight)))
    if c["o_bias"]:
        parts.append(stack(lambda b: get(b.o_proj.bias)))
    parts.append(stack(lambda b: get(b.post_attention_layernorm.weight)))
    parts.append(stack(lambda b: torch.cat([get(b.gate_proj.weight), get(b.up_proj.weight)])))
    parts.append(stack(lambda b: get(b.down_proj.weight)))
    parts.append(get(model.norm.weight))
    if not c["tied"]:
        parts.append(padded(model.lm_head.weight))
    return torch.cat(parts)


def main():
    out, shape, B, T, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    c = parse_shape(shape)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = Qwen(c)
    perturb(model)
    x = torch.randint(0, c["V"], (B, T))
    y = torch.randint(0, c["V"], (B, T))
    write_reference(out, model, flat, x, y)


if __name__ == "__main__":
    main()
