#!/usr/bin/env python3
"""torch_cuda.py: PyTorch 2.x's side of bench/bench_cuda.sh (docs/cuda.md). WRITTEN, NEVER RUN.

One training step of GPT-2 or a Llama shape on one GPU, the way people train today: bf16
autocast over fp32 master weights, fused AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight
decay 0.1 on 2-D weights), F.scaled_dot_product_attention (causal), eager or torch.compile.
Random tokens. W warm-up steps, then S timed steps (CUDA events around each step). Prints one
JSON line: tokens/s, step time, FLOPs per token (the same count as hptrain's estimator:
6 per weight of the matmuls including the lm head, plus causal attention as computed), MFU
against --peak-tflops (the bf16 GEMM peak bench_cuda measured in the same run), and
torch.cuda.max_memory_allocated / max_memory_reserved.

  torch_cuda.py --arch gpt2 --L 12 --C 768 --NH 12 --B 8 --T 1024 [--compile] [--peak-tflops X]
  torch_cuda.py --arch llama --L 16 --C 2048 --NH 32 --NKV 8 --FF 8192 --V 128256 --B 4 --T 2048
"""
import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPT2Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(GPT2Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.ones(C)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * self.w


def rope(x, cos, sin):  # rotate_half convention
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, NKV, FF):
        super().__init__()
        hd = C // NH
        self.n1, self.n2 = RMSNorm(C), RMSNorm(C)
        self.qkv = nn.Linear(C, (NH + 2 * NKV) * hd, bias=False)
        self.o = nn.Linear(NH * hd, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * FF, bias=False)
        self.down = nn.Linear(FF, C, bias=False)
        self.NH, self.NKV, self.hd = NH, NKV, hd

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.NH * self.hd, self.NKV * self.hd, self.NKV * self.hd], dim=2)
        q = rope(q.view(B, T, self.NH, self.hd).transpose(1, 2), cos, sin)
        k = rope(k.view(B, T, self.NKV, self.hd).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.NKV, self.hd).transpose(1, 2)
        rep = self.NH // self.NKV
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.o(y)
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, L, C, NH, NKV, FF, V, T, theta=500000.0):
        super().__init__()
        self.emb = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(LlamaBlock(C, NH, NKV, FF) for _ in range(L))
        self.norm = RMSNorm(C)
        hd = C // NH
        inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
        f = torch.outer(torch.arange(T).float(), inv)
        self.register_buffer("cos", torch.cat((f.cos(), f.cos()), -1), persistent=False)
        self.register_buffer("sin", torch.cat((f.sin(), f.sin()), -1), persistent=False)

    def forward(self, idx, tgt):
        x = self.emb(idx)
        T = idx.shape[1]
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T])
        logits = F.linear(self.norm(x), self.emb.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    for k, d in [("L", 12), ("C", 768), ("NH", 12), ("NKV", 0), ("FF", 0), ("V", 50257), ("B", 8), ("T", 1024),
                 ("warmup", 3), ("steps", 10)]:
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    a = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(1234)
    if a.arch == "gpt2":
        model = GPT2(a.L, a.C, a.NH, a.V, a.T)
        mm = 12 * a.L * a.C * a.C
    else:
        NKV, FF = a.NKV or a.NH, a.FF or 4 * a.C
        model = Llama(a.L, a.C, a.NH, NKV, FF, a.V, a.T)
        hd = a.C // a.NH
        mm = a.L * (a.C * (a.NH + 2 * NKV) * hd + a.NH * hd * a.C + 3 * a.C * FF)
    model = model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_fn = torch.compile(model) if a.compile else model
    idx = torch.randint(0, a.V, (a.B, a.T), device=dev)
    tgt = torch.randint(0, a.V, (a.B, a.T), device=dev)
    times = []
    for i in range(a.warmup + a.steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        e1.record()
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(e0.elapsed_time(e1))
    step_ms = sum(times) / len(times)
    tps = a.B * a.T / (step_ms * 1e-3)
    fpt = 3 * (2 * (mm + a.V * a.C) + 2 * a.L * a.C * (a.T + 1))
    print(json.dumps({
        "impl": "torch-" + ("compile" if a.compile else "eager") + "-bf16-autocast",
        "torch": torch.__version__, "arch": a.arch, "L": a.L, "C": a.C, "NH": a.NH, "B": a.B, "T": a.T,
        "params": n_params, "step_ms": round(step_ms, 3), "tokens_per_s": round(tps, 1),
        "flops_per_token": fpt, "mfu": round(fpt * tps / (a.peak_tflops * 1e12), 4) if a.peak_tflops else None,
        "max_memory_allocated": torch.cuda.max_memory_allocated(), "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "loss": round(float(loss), 4), "finite": math.isfinite(float(loss)),
    }))


if __name__ == "__main__":
    main()
