#!/usr/bin/python3
"""torch_gpt2.py: the PyTorch side of hptrain's training benchmark (bench/run.sh).

A plain GPT-2 in PyTorch 1.13 (CPU, fp32): learned position embedding, pre-norm blocks,
layernorm eps 1e-5, causal self-attention as an explicit masked softmax (1.13 has no
F.scaled_dot_product_attention), GELU in its tanh form, lm head tied to wte. Trained with
AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights only, as hptrain's
defaults) on random tokens. Runs W warm-up steps, then S timed steps, and prints one JSON line.

Which AdamW implementation: torch 1.13's AdamW has `foreach` (multi-tensor) but no `fused`
(fused came in 2.0, CUDA only at first). foreach=True is the default here (--optim-impl
for-loop selects the other): measured faster on the 2-core development machine, at the cost of
~0.5 GiB more peak memory for its temporaries. The JSON says which ran.

The vocabulary is the real one, V = 50257 (PyTorch has no reason to pad); hptrain pads wte to
Vp = 50304 rows. The padding is ~0.04% of the lm-head FLOPs, which we neglect.

Run with /usr/bin/python3 (Debian's python3-torch), not a pyenv python. BLAS: Debian's torch
calls libblas.so.3, which is OpenBLAS 0.3.21 (DYNAMIC_ARCH). OpenBLAS picks its kernels when
the library loads, so OPENBLAS_CORETYPE must be in the environment before this process starts;
bench/run.sh runs this script once per configuration. The script reports the core OpenBLAS
chose, so a reader can see which kernels ran.
"""
import argparse
import ctypes
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, maxT):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)
        # (1, 1, maxT, maxT) bool, True where a query may not see a key (the future)
        mask = torch.triu(torch.ones(maxT, maxT, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask.view(1, 1, maxT, maxT), persistent=False)

    def attn(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(x).split(C, dim=2)                    # (B, T, C) each
        q = q.view(B, T, self.NH, hs).transpose(1, 2)            # (B, NH, T, hs)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, NH, T, T)
        att = att.masked_fill(self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v                                              # (B, NH, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class GPT2(nn.Module):
    def __init__(self, L, C, NH, V, maxT):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList([Block(C, NH, maxT) for _ in range(L)])
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        # GPT-2 initialisation (same as hptrain_gpt2_init_random, up to the RNG)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            elif name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)                        # (B, T, C)
        for blk in self.blocks:
            x = blk(x)
        x = self.lnf(x)
        logits = F.linear(x, self.wte.weight)                    # (B, T, V), tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def openblas_info():
    """The core OpenBLAS dispatched to, and its config string; None if not loaded."""
    for name in ("libopenblas.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            continue
        try:
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            lib.openblas_get_num_threads.restype = ctypes.c_int
            return {"core": lib.openblas_get_corename().decode(),
                    "config": lib.openblas_get_config().decode(),
                    "threads": lib.openblas_get_num_threads()}
        except AttributeError:
            continue
    return None


def probe_blas():
    """GFLOP/s of torch.nn.functional.linear (what the model calls) on three GPT-2 124M
    shapes, best of 5 after one untimed call each; bench/run.sh runs this once per candidate
    OPENBLAS_CORETYPE and keeps the fastest. About two seconds."""
    shapes = [(1024, 3072, 768), (1024, 768, 3072), (256, 50257, 768)]  # (BT, out, in)
    total_flop, total_s = 0.0, 0.0
    for M, N, K in shapes:
        x, w = torch.randn(M, K), torch.randn(N, K)
        F.linear(x, w)
        best = min(timed(lambda: F.linear(x, w)) for _ in range(5))
        total_flop += 2.0 * M * N * K
        total_s += best
    ob = openblas_info()
    return {"probe": "blas", "core": ob["core"] if ob else "unknown",
            "coretype_env": os.environ.get("OPENBLAS_CORETYPE", ""),
            "gflops": round(total_flop / total_s / 1e9, 1)}


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def check_reference(ref_dir):
    """Loads ref_dir/gpt2_tiny_* (llm.c formats; tests/make_reference.sh writes them into a build
    tree's reference/), runs the 10 AdamW steps of
    gpt2_tiny_steps.json with this file's model, and compares the losses. Proves that the
    benchmarked model is the GPT-2 that hptrain computes. Returns the worst relative error."""
    import struct
    with open(os.path.join(ref_dir, "gpt2_tiny_steps.json")) as f:
        ref = json.load(f)
    with open(os.path.join(ref_dir, "gpt2_tiny_model.bin"), "rb") as f:
        hdr = struct.unpack("<256i", f.read(1024))
        assert hdr[0] == 20240326 and hdr[1] == 3, "expected an fp32 llm.c checkpoint"
        maxT, V, L, NH, C, Vp = hdr[2:8]
        flat = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    model = GPT2(L, C, NH, V, maxT)
    sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C),
             ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C), ("attprojw", L * C * C),
             ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C),
             ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C),
             ("lnfw", C), ("lnfb", C)]
    t, off = {}, 0
    for name, n in sizes:
        t[name] = flat[off:off + n]
        off += n
    with torch.no_grad():
        model.wte.weight.copy_(t["wte"].view(Vp, C)[:V])
        model.wpe.weight.copy_(t["wpe"].view(maxT, C))
        per_layer = {"ln1.weight": "ln1w", "ln1.bias": "ln1b", "qkv.weight": "qkvw",
                     "qkv.bias": "qkvb", "proj.weight": "attprojw", "proj.bias": "attprojb",
                     "ln2.weight": "ln2w", "ln2.bias": "ln2b", "fc.weight": "fcw",
                     "fc.bias": "fcb", "fcproj.weight": "fcprojw", "fcproj.bias": "fcprojb"}
        for i, blk in enumerate(model.blocks):
            for pname, key in per_layer.items():
                p = blk.get_parameter(pname)
                p.copy_(t[key].view(L, -1)[i].view_as(p))
        model.lnf.weight.copy_(t["lnfw"])
        model.lnf.bias.copy_(t["lnfb"])
    with open(os.path.join(ref_dir, "gpt2_tiny_state.bin"), "rb") as f:
        hdr = struct.unpack("<256i", f.read(1024))
        B, T = hdr[2], hdr[3]
        xy = torch.frombuffer(bytearray(f.read(2 * B * T * 4)), dtype=torch.int32).long()
    x, y = xy[:B * T].view(B, T), xy[B * T:].view(B, T)
    o = ref["adamw"]
    opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(o["beta1"], o["beta2"]),
                            eps=o["eps"], weight_decay=o["weight_decay"], foreach=True)
    worst = 0.0
    for want in ref["losses"]:
        loss = model(x, y)
        worst = max(worst, abs(float(loss) - want) / abs(want))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--L", type=int, default=12)
    ap.add_argument("--C", type=int, default=768)
    ap.add_argument("--NH", type=int, default=12)
    ap.add_argument("--V", type=int, default=50257)
    ap.add_argument("--maxT", type=int, default=1024)
    ap.add_argument("--batch", "-B", type=int, default=4)
    ap.add_argument("--seq", "-T", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps")
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--optim-impl", choices=("foreach", "for-loop"), default="foreach",
                    help="AdamW implementation (1.13 has no fused CPU AdamW)")
    ap.add_argument("--label", default="", help="free text copied into the JSON (config name)")
    ap.add_argument("--check-ref", metavar="DIR",
                    help="check the model against DIR/gpt2_tiny_* (llm.c formats) and exit")
    ap.add_argument("--probe-blas", action="store_true",
                    help="time torch's fp32 matmul on model shapes, print JSON and exit")
    a = ap.parse_args()

    if a.probe_blas:
        torch.set_num_threads(a.threads)
        print(json.dumps(probe_blas()))
        return 0
    if a.check_ref:
        torch.set_num_threads(a.threads)
        worst = check_reference(a.check_ref)
        ok = worst < 1e-5
        print(json.dumps({"check": "gpt2_tiny 10 AdamW steps", "max_rel_err": worst,
                          "ok": ok}))
        return 0 if ok else 1

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT2(a.L, a.C, a.NH, a.V, a.maxT)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())  # wte counted once (tied)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1},
              {"params": no_decay, "weight_decay": 0.0}]
    opt_kwargs = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    impl = a.optim_impl
    if impl == "foreach":
        opt = torch.optim.AdamW(groups, foreach=True, **opt_kwargs)
    else:
        opt = torch.optim.AdamW(groups, foreach=False, **opt_kwargs)

    g = torch.Generator().manual_seed(a.seed)
    times_ms = []
    losses = []
    for step in range(a.warmup + a.steps):
        # random tokens, as the hptrain side reads from a random shard
        tok = torch.randint(0, a.V, (a.batch, a.seq + 1), generator=g)
        x, y = tok[:, :-1], tok[:, 1:].contiguous()
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        losses.append(float(loss))
        if step >= a.warmup:
            times_ms.append((t1 - t0) * 1e3)

    step_ms = statistics.median(times_ms)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    ob = openblas_info()
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                                      "OMP_NUM_THREADS") if k in os.environ}
    print(json.dumps({
        "impl": "pytorch", "label": a.label, "torch": torch.__version__,
        "B": a.batch, "T": a.seq, "L": a.L, "C": a.C, "NH": a.NH, "V": a.V,
        "threads": torch.get_num_threads(), "n_params": n_params,
        "warmup": a.warmup, "steps": a.steps,
        "step_ms": round(step_ms, 3), "step_ms_min": round(min(times_ms), 3),
        "step_ms_all": [round(t, 3) for t in times_ms],
        "tokens_per_s": round(a.batch * a.seq / (step_ms / 1e3), 2),
        "rss_peak_bytes": rss,
        "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
        "optimizer": "AdamW(%s, lr=%g, wd=0.1 on 2-D weights)" % (impl, a.lr),
        "attention": "explicit masked softmax",
        "blas": ("openblas " + ob["core"] + " threads=%d" % ob["threads"]) if ob else "unknown",
        "blas_config": ob["config"] if ob else "",
        "env": env,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
