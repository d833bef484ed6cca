#!/usr/bin/env python3
"""torch_gpu_8b.py: PyTorch 2.x's side of bench/bench_gpu_8b.sh (docs/cuda.md). WRITTEN, NEVER RUN.

A Llama shape (llama3.1-8b by default) trained on one GPU whose memory PyTorch may use is capped
with torch.cuda.set_per_process_memory_fraction(cap / total), so that an 80 GB card behaves as a
--cap-gb card for PyTorch's caching allocator (the CUDA context is outside the cap, as hptrain's
measured overhead is inside its budget: the comparison favours PyTorch by the context's size).

  --mode plain         fp32 master weights, bf16 autocast, fused AdamW, SDPA (causal, grouped
                       query), activation checkpointing per block: how people train when it fits
  --mode fsdp-offload  the same model wrapped in FSDP on a process group of one with
                       CPUOffload(offload_params=True): parameters, gradients and AdamW state on
                       the host, each block's parameters brought to the GPU for its compute

Random tokens, B=1. W warm-up steps, then S timed steps (CUDA events). Prints one JSON line:
tokens/s, step time, FLOPs per token (6 per weight of the matmuls, the head included, plus
causal attention: hptrain's estimator's count), MFU against --peak-tflops, max_memory_allocated
and _reserved; or {"oom": true, ...} when the step does not fit under the cap.

  torch_gpu_8b.py --model llama3.1-8b --T 2048 --steps 5 --cap-gb 24 --mode plain --peak-tflops X

Needs PyTorch >= 2.5 (nn.RMSNorm, scaled_dot_product_attention's enable_gqa).
"""
import argparse
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SHAPES = {  # L, C, NH, NKV, FF, V
    "llama3.1-8b": (32, 4096, 32, 8, 14336, 128256),
    "llama3.2-1b": (16, 2048, 32, 8, 8192, 128256),
}


class Block(nn.Module):
    def __init__(self, C, NH, NKV, FF):
        super().__init__()
        self.NH, self.NKV, self.hd = NH, NKV, C // NH
        self.n1, self.n2 = nn.RMSNorm(C, eps=1e-5), nn.RMSNorm(C, eps=1e-5)
        self.q = nn.Linear(C, C, bias=False)
        self.kv = nn.Linear(C, 2 * NKV * self.hd, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * FF, bias=False)
        self.down = nn.Linear(FF, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.n1(x)
        q = self.q(h).view(B, T, self.NH, self.hd).transpose(1, 2)
        k, v = self.kv(h).view(B, T, 2, self.NKV, self.hd).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


def rope(x, cos, sin):
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class Llama(nn.Module):
    def __init__(self, L, C, NH, NKV, FF, V, T, ckpt):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(Block(C, NH, NKV, FF) for _ in range(L))
        self.norm = nn.RMSNorm(C, eps=1e-5)
        self.head = nn.Linear(C, V, bias=False)
        hd = C // NH
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))
        f = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((f, f), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.ckpt = ckpt

    def forward(self, idx, targets):
        x = self.wte(idx)
        for b in self.blocks:
            x = checkpoint(b, x, self.cos, self.sin, use_reentrant=False) if self.ckpt else b(x, self.cos, self.sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def flops_per_token(L, C, NH, NKV, FF, V, T):
    hd = C // NH
    per_block = C * (C + 2 * NKV * hd) + C * C + 3 * C * FF
    return 6 * (L * per_block + V * C) + 6 * L * T * C


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3.1-8b", choices=sorted(SHAPES))
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--cap-gb", type=float, default=24.0)
    ap.add_argument("--mode", choices=["plain", "fsdp-offload"], default="plain")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    a = ap.parse_args()
    L, C, NH, NKV, FF, V = SHAPES[a.model]
    dev = torch.device("cuda", 0)
    total = torch.cuda.get_device_properties(dev).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gb * 1e9 / total), dev)
    out = {"system": "pytorch", "torch": torch.__version__, "mode": a.mode, "model": a.model,
           "T": a.T, "cap_gb": a.cap_gb, "gpu": torch.cuda.get_device_name(dev)}
    try:
        base = Llama(L, C, NH, NKV, FF, V, a.T, ckpt=True)
        # weight decay on the 2-D weights, named before any wrapping: FSDP flattens parameters
        # into 1-D FlatParameters (all of them would look like biases), so it keeps the
        # original parameters (use_orig_params) and the groups go by name
        decay_names = {n for n, p in base.named_parameters() if p.dim() >= 2}
        if a.mode == "plain":
            model = base.to(dev)
        else:
            import torch.distributed as dist
            from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29517")
            dist.init_process_group("nccl", rank=0, world_size=1)
            model = FSDP(base, auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True,
                         cpu_offload=CPUOffload(offload_params=True), device_id=dev)
        named = [(n.replace("_fsdp_wrapped_module.", ""), p) for n, p in model.named_parameters()]
        decay = [p for n, p in named if n in decay_names]
        rest = [p for n, p in named if n not in decay_names]
        out.update(decay_tensors=len(decay), no_decay_tensors=len(rest))
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": rest, "weight_decay": 0.0}], lr=3e-4,
                                betas=(0.9, 0.95), eps=1e-8, fused=a.mode == "plain")
        g = torch.Generator(device="cpu").manual_seed(1)
        times = []
        for s in range(a.warmup + a.steps):
            idx = torch.randint(0, V, (1, a.T), generator=g).to(dev)
            tgt = torch.randint(0, V, (1, a.T), generator=g).to(dev)
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(idx, tgt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t1.record()
            torch.cuda.synchronize()
            if s >= a.warmup:
                times.append(t0.elapsed_time(t1) / 1e3)
        step_s = sum(times) / len(times)
        tps = a.T / step_s
        fpt = flops_per_token(L, C, NH, NKV, FF, V, a.T)
        out.update(oom=False, tokens_per_s=tps, step_s=step_s, flops_per_token=fpt,
                   mfu=tps * fpt / (a.peak_tflops * 1e12) if a.peak_tflops else None,
                   max_memory_allocated=torch.cuda.max_memory_allocated(dev),
                   max_memory_reserved=torch.cuda.max_memory_reserved(dev), loss=float(loss))
    except torch.cuda.OutOfMemoryError as e:
        out.update(oom=True, error=str(e).splitlines()[0],
                   max_memory_allocated=torch.cuda.max_memory_allocated(dev))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
