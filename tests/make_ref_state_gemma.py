#!/usr/bin/python3
"""make_ref_state_gemma.py OUTDIR SHAPE B T SEED: a PyTorch reference for a Gemma 3 SHAPE
(hptrain's "gemma3:L=..,C=..,NH=..,NKV=..,hd=..,FF=..,V=..[,Vp=..],T=..[,window=..][,pattern=..]
[,theta=..][,ltheta=..][,factor=..][,qscalar=..][,eps=..][,tied=0|1][,attn_bias=0|1]"), written
as tests/make_ref_state_llama.py writes a llama's (its write_reference: state.bin, steps.json).
The model is written here by hand from Hugging Face's Gemma3ForCausalLM (modeling_gemma3.py;
transformers is not needed), its modules named as the hub's files name them (model.layers.{l}.
self_attn.q_proj, ...: tests/hf_write.py writes its state dict):
  embeddings times sqrt(C) (the activations' dtype); RMSNorm times (1 + w), w initialised 0; per
  layer input_layernorm, q/k/v projections, q_norm and k_norm over each head's hd values,
  rotary embeddings (rotate_half) with the local base (ltheta) on sliding layers and the global
  one (theta, linear scaling factor) on full layers, scores times qscalar^-1/2, the sliding
  layers' queries seeing their last `window` keys (t - j < window), o_proj, post_attention_
  layernorm, residual; pre_feedforward_layernorm, gelu_tanh(gate) * up, down, post_feedforward_
  layernorm, residual; layer l full when (l + 1) % pattern == 0 (pattern 0: all full); the final
  norm; a tied or untied head. fp32 throughout, the rotary tables computed in float64 then
  rounded. Run with Debian's /usr/bin/python3 (python3-torch)."""
import sys

import torch
import torch.nn.functional as F

from make_ref_state_llama import (hf_init, inv_freq, parse_keys, rope_from_inv, rotate_half,
                                  table_parts, write_reference)
from make_ref_state_qwen import perturb


def parse_shape(shape):
    assert shape.startswith("gemma3:"), shape
    c = {"NKV": None, "V": 262208, "Vp": None, "T": 131072, "theta": 1e6, "ltheta": 1e4,
         "factor": 0.0, "qscalar": 0.0, "window": 4096, "pattern": 6, "eps": 1e-6, "tied": 1,
         "attn_bias": 0, "range": 0.02, "hd": None}
    parse_keys(c, shape[7:], ("theta", "ltheta", "factor", "qscalar", "eps", "range"))
    if not c["qscalar"]:
        c["qscalar"] = float(c["hd"])
    return c


def is_sliding(c, l):
    return c["pattern"] > 0 and (l + 1) % c["pattern"] != 0


def rope_tables(hd, theta, T, factor):
    """cos, sin (T, hd) of the default rotation, frequencies divided by factor (linear)"""
    inv = inv_freq(hd, theta)
    return rope_from_inv(inv / factor if factor > 0 else inv, T)


class RMSNorm(torch.nn.Module):
    """Gemma3RMSNorm: x / rms(x) * (1 + weight), weight initialised 0"""
    def __init__(self, n, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


class Attention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        C, NH, NKV, hd, bias = c["C"], c["NH"], c["NKV"], c["hd"], bool(c["attn_bias"])
        self.q_proj = torch.nn.Linear(C, NH * hd, bias=bias)
        self.k_proj = torch.nn.Linear(C, NKV * hd, bias=bias)
        self.v_proj = torch.nn.Linear(C, NKV * hd, bias=bias)
        self.o_proj = torch.nn.Linear(NH * hd, C, bias=bias)
        self.q_norm = RMSNorm(hd, c["eps"])
        self.k_norm = RMSNorm(hd, c["eps"])


class MLP(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = torch.nn.Linear(c["C"], c["FF"], bias=False)
        self.up_proj = torch.nn.Linear(c["C"], c["FF"], bias=False)
        self.down_proj = torch.nn.Linear(c["FF"], c["C"], bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class Layer(torch.nn.Module):
    def __init__(self, c, l):
        super().__init__()
        self.c, self.sliding = c, is_sliding(c, l)
        C, eps = c["C"], c["eps"]
        self.input_layernorm = RMSNorm(C, eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.pre_feedforward_layernorm = RMSNorm(C, eps)
        self.mlp = MLP(c)
        self.post_feedforward_layernorm = RMSNorm(C, eps)

    def attend(self, x, cos, sin):
        B, T, C = x.shape
        NH, NKV, hd = self.c["NH"], self.c["NKV"], self.c["hd"]
        a = self.self_attn
        q = a.q_norm(a.q_proj(x).view(B, T, NH, hd)).transpose(1, 2)
        k = a.k_norm(a.k_proj(x).view(B, T, NKV, hd)).transpose(1, 2)
        v = a.v_proj(x).view(B, T, NKV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)  # repeat_kv
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) * self.c["qscalar"] ** -0.5
        t = torch.arange(T)
        mask = t[None, :] > t[:, None]  # keys after the query
        if self.sliding:  # and keys `window` or more behind it
            mask = mask | (t[:, None] - t[None, :] >= self.c["window"])
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return a.o_proj((att @ v).transpose(1, 2).reshape(B, T, NH * hd))

    def forward(self, x, rope):
        cos, sin = rope[self.sliding]
        x = x + self.post_attention_layernorm(self.attend(self.input_layernorm(x), cos, sin))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Body(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(c["V"], c["C"])
        self.layers = torch.nn.ModuleList([Layer(c, l) for l in range(c["L"])])
        self.norm = RMSNorm(c["C"], c["eps"])


class Gemma(torch.nn.Module):
    """Gemma3ForCausalLM: model (embed_tokens, layers, norm) and lm_head"""
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Body(c)
        self.layers = self.model.layers  # table_parts' per-layer view
        if not c["tied"]:
            self.lm_head = torch.nn.Linear(c["C"], c["V"], bias=False)
        hf_init(self, c["range"])  # the norms' weights stay 0

    def head(self):
        return self.model.embed_tokens.weight if self.c["tied"] else self.lm_head.weight

    def forward(self, x, y=None):
        c, T = self.c, x.shape[1]
        rope = {False: rope_tables(c["hd"], c["theta"], T, c["factor"]),
                True: rope_tables(c["hd"], c["ltheta"], T, 0.0)}
        h = self.model.embed_tokens(x) * torch.tensor(c["C"] ** 0.5, dtype=torch.float32)
        for layer in self.model.layers:
            h = layer(h, rope)
        logits = F.linear(self.model.norm(h), self.head())
        if y is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, c["V"]), y.view(-1))


def flat(model, grads):
    """hptrain's gemma3 table in checkpoint order: wte, ln1w, qkvw, [qkvb], qknw, attprojw,
    [attprojb], ln2w (pre_feedforward), fcw, fcprojw, postw ([post_attention |
    post_feedforward]) stacked over L, lnfw, [lm_head]; wte and lm_head padded to Vp rows."""
    c = model.c
    get, padded, stack = table_parts(model, grads)
    cat = torch.cat
    parts = [padded(model.model.embed_tokens.weight),
             stack(lambda b: get(b.input_layernorm.weight)),
             stack(lambda b: cat([get(b.self_attn.q_proj.weight), get(b.self_attn.k_proj.weight),
                                  get(b.self_attn.v_proj.weight)]))]
    if c["attn_bias"]:
        parts.append(stack(lambda b: cat([get(b.self_attn.q_proj.bias), get(b.self_attn.k_proj.bias),
                                          get(b.self_attn.v_proj.bias)])))
    parts.append(stack(lambda b: cat([get(b.self_attn.q_norm.weight), get(b.self_attn.k_norm.weight)])))
    parts.append(stack(lambda b: get(b.self_attn.o_proj.weight)))
    if c["attn_bias"]:
        parts.append(stack(lambda b: get(b.self_attn.o_proj.bias)))
    parts.append(stack(lambda b: get(b.pre_feedforward_layernorm.weight)))
    parts.append(stack(lambda b: cat([get(b.mlp.gate_proj.weight), get(b.mlp.up_proj.weight)])))
    parts.append(stack(lambda b: get(b.mlp.down_proj.weight)))
    parts.append(stack(lambda b: cat([get(b.post_attention_layernorm.weight),
                                      get(b.post_feedforward_layernorm.weight)])))
    parts.append(get(model.model.norm.weight))
    if not c["tied"]:
        parts.append(padded(model.lm_head.weight))
    return cat(parts)


def build(shape, seed):
    """the model of SHAPE from SEED, its norm weights and biases perturbed (make_ref_state_qwen's
    perturb: their gradients are tested too)"""
    c = parse_shape(shape)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = Gemma(c)
    perturb(model)
    return c, model


def main():
    out, shape, B, T, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    c, model = build(shape, seed)
    x = torch.randint(0, c["V"], (B, T))
    y = torch.randint(0, c["V"], (B, T))
    write_reference(out, model, flat, x, y)


if __name__ == "__main__":
    main()
