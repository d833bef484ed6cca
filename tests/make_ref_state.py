#!/usr/bin/python3
"""make_ref_state.py OUTDIR L C NH V Vp maxT B T SEED [PREFIX]: writes a PyTorch reference in
llm.c's formats: OUTDIR/PREFIXmodel.bin (checkpoint v3, wte padded to Vp rows),
OUTDIR/PREFIXstate.bin (reference state v2: x, y, logits, loss, gradients in checkpoint order with
padding) and OUTDIR/PREFIXsteps.json (the loss before each of 10 AdamW steps, weight decay on every
tensor). The model is bench/torch_gpt2.py's GPT2. Run with Debian's /usr/bin/python3
(python3-torch). tests/make_reference.sh calls it for the tests' gpt2_tiny_* files."""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from torch_gpt2 import GPT2  # noqa: E402


def flat(model, L, C, V, Vp, maxT, grads):
    def get(p):
        t = p.grad if grads else p.data
        return t.detach().float().contiguous().view(-1)
    wte = torch.zeros(Vp, C)
    wte[:V] = (model.wte.weight.grad if grads else model.wte.weight.data)
    parts = [wte.view(-1), get(model.wpe.weight)]
    names = ["ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
             "ln2.weight", "ln2.bias", "fc.weight", "fc.bias", "fcproj.weight", "fcproj.bias"]
    for n in names:
        parts.append(torch.cat([get(b.get_parameter(n)) for b in model.blocks]))
    parts += [get(model.lnf.weight), get(model.lnf.bias)]
    return torch.cat(parts)


def write_checkpoint(path, model, L, C, NH, V, Vp, maxT):
    """The model as an llm.c checkpoint (version 3, fp32, wte padded to Vp rows)."""
    hdr = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(flat(model, L, C, V, Vp, maxT, False).numpy().tobytes())


def logits_of(model, x, T):
    """The forward with its logits kept (B, T, V): the embedding, the blocks, the tied head."""
    h = model.wte(x) + model.wpe(torch.arange(T))
    for blk in model.blocks:
        h = blk(h)
    return torch.nn.functional.linear(model.lnf(h), model.wte.weight)


def main():
    out, L, C, NH, V, Vp, maxT, B, T, seed = sys.argv[1], *map(int, sys.argv[2:11])
    pre = sys.argv[11] if len(sys.argv) > 11 else ""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = GPT2(L, C, NH, V, maxT)
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    os.makedirs(out, exist_ok=True)
    write_checkpoint(os.path.join(out, pre + "model.bin"), model, L, C, NH, V, Vp, maxT)
    logits = logits_of(model, x, T)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), y.view(-1))
    loss.backward()
    with open(os.path.join(out, pre + "state.bin"), "wb") as f:
        f.write(struct.pack("<256i", *([20240327, 2, B, T] + [0] * 252)))
        f.write(x.to(torch.int32).numpy().tobytes())
        f.write(y.to(torch.int32).numpy().tobytes())
        f.write(logits.detach().float().contiguous().numpy().tobytes())
        f.write(struct.pack("<f", float(loss)))
        f.write(flat(model, L, C, V, Vp, maxT, True).numpy().tobytes())
    model.zero_grad(set_to_none=True)
    cfg = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    losses = []
    for _ in range(10):
        l = model(x, y)
        losses.append(float(l))
        opt.zero_grad(set_to_none=True)
        l.backward()
        opt.step()
    with open(os.path.join(out, pre + "steps.json"), "w") as f:
        json.dump({"adamw": cfg, "losses": losses}, f)


if __name__ == "__main__":
    main()
