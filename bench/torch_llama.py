#!/usr/bin/python3
"""torch_llama.py SHAPE B T WARMUP STEPS THREADS: the PyTorch side of bench/bench_llama.sh.

Trains the reference's llama (tests/make_ref_state_llama.py: Hugging Face LlamaForCausalLM's
maths written in PyTorch 1.13, fp32, CPU; K/V heads repeated as HF's repeat_kv) with AdamW
(lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights: hptrain's defaults,
foreach=True) on random tokens below min(V, 50257) (seed 1), WARMUP untimed steps then STEPS
timed ones, and prints one JSON line: tokens/s over the timed steps, peak RSS (MiB, getrusage).
Run with /usr/bin/python3 (Debian's python3-torch)."""
import importlib.util
import json
import os
import resource
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "ref", os.path.join(here, "..", "tests", "make_ref_state_llama.py"))
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)


def main():
    shape, B, T, warmup, steps, threads = sys.argv[1], *map(int, sys.argv[2:7])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    c = ref.parse_shape(shape)
    model = ref.Llama(c)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    g = torch.Generator().manual_seed(1)
    hi = min(c["V"], 50257)
    times = []
    for s in range(warmup + steps):
        x = torch.randint(0, hi, (B, T), generator=g)
        y = torch.randint(0, hi, (B, T), generator=g)
        t0 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"side": "pytorch", "shape": shape, "B": B, "T": T,
                      "tokens_per_s": B * T * len(times) / sum(times), "peak_rss_mib": rss,
                      "loss": float(loss), "torch": torch.__version__, "threads": threads}))


if __name__ == "__main__":
    main()
