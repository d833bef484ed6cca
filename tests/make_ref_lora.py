#!/usr/bin/python3
"""make_ref_lora.py OUT SHAPE B T SEED R ALPHA TARGETS RSLORA: a plain-PyTorch LoRA reference
(no PEFT) for hptrain's adapters (src/model/lora.c, docs/lora.md), written from the LoRA paper
(Hu et al. 2021: h = W0 x + (alpha / r) B A x, W0 frozen) and PEFT's documented behaviour
(lora_A kaiming-uniform with a = sqrt(5), lora_B zero, dropout on the adapter's input, the
scale alpha / r or with use_rslora alpha / sqrt(r), the bias frozen).
SHAPE is hptrain's: "llama:..." (the model of tests/make_ref_state_llama.py), "qwen2:..." or
"qwen3:..." (tests/make_ref_state_qwen.py's) or "gpt2:L=..,C=..,NH=..,V=..,Vp=..,T=.."
(bench/torch_gpt2.py's GPT2). TARGETS: hptrain's names,
comma-separated (llama: q,k,v,o,gate,up,down; GPT-2: c_attn,attn.c_proj,c_fc,mlp.c_proj).
B starts random here (not zero), so that every adapter's gradient is non-zero; dropout is 0.
OUT (binary, little-endian): 256 int32 (20261128, 1, B, T, base floats, adapter floats, steps),
x, y (B, T) int32, the base's parameters in hptrain's checkpoint order (wte padded to Vp
rows), the adapters in hptrain's table order (per target in block order: A (L, r, in), then
B (L, out, r)), the logits (B, T, V), the loss, the adapters' gradients (the same order), the
loss before each of 10 AdamW steps on the adapters only (lr 1e-2, betas 0.9, 0.999, eps 1e-8,
weight decay 0.01), and the adapters after them.
Run with Debian's /usr/bin/python3 (python3-torch)."""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "bench"))


class LoRALinear(torch.nn.Module):
    """base(x) + scale * B(A(dropout(x))), base frozen (weight and bias)."""

    def __init__(self, base, r, alpha, rslora):
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.lora_A = torch.nn.Linear(base.in_features, r, bias=False)
        self.lora_B = torch.nn.Linear(r, base.out_features, bias=False)
        torch.nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        torch.nn.init.zeros_(self.lora_B.weight)
        self.scale = alpha / math.sqrt(r) if rslora else alpha / r
        self.dropout = torch.nn.Dropout(0.0)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.dropout(x))) * self.scale


def gpt2_model(shape, seed):
    from make_ref_state import flat, logits_of
    from torch_gpt2 import GPT2
    c = {"V": 50257, "T": 1024}
    for kv in shape[5:].split(","):
        k, v = kv.split("=")
        c[k] = int(v)
    c.setdefault("Vp", (c["V"] + 127) // 128 * 128)
    torch.manual_seed(seed)
    model = GPT2(c["L"], c["C"], c["NH"], c["V"], c["T"])
    params = flat(model, c["L"], c["C"], c["V"], c["Vp"], c["T"], False)
    names = {"c_attn": "qkv", "attn.c_proj": "proj", "c_fc": "fc", "mlp.c_proj": "fcproj"}
    order = ["c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"]

    def logits(x):
        return logits_of(model, x, x.shape[1])
    return model, c["V"], params, model.blocks, names, order, logits


def llama_model(shape, seed):
    from make_ref_state_llama import Llama, flat, parse_shape
    c = parse_shape(shape)
    torch.manual_seed(seed)
    model = Llama(c)
    with torch.no_grad():  # norm weights away from 1 (as make_ref_state_llama.py)
        for name, p in model.named_parameters():
            if "layernorm" in name or name.startswith("norm") or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    params = flat(model, False)
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
             "up": "up_proj", "down": "down_proj"}
    order = ["q", "k", "v", "o", "gate", "up", "down"]

    def logits(x):
        return model(x)
    return model, c["V"], params, model.layers, names, order, logits


def qwen_model(shape, seed):
    from make_ref_state_qwen import Qwen, flat, parse_shape, perturb
    c = parse_shape(shape)
    torch.manual_seed(seed)
    model = Qwen(c)
    perturb(model)
    params = flat(model, False)
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
             "up": "up_proj", "down": "down_proj"}
    order = ["q", "k", "v", "o", "gate", "up", "down"]

    def logits(x):
        return model(x)
    return model, c["V"], params, model.layers, names, order, logits


def main():
    out, shape = sys.argv[1], sys.argv[2]
    B, T, seed, r = map(int, sys.argv[3:7])
    alpha, targets, rslora = float(sys.argv[7]), sys.argv[8].split(","), int(sys.argv[9])
    torch.set_num_threads(1)
    make = (llama_model if shape.startswith("llama") else
            qwen_model if shape.startswith("qwen") else gpt2_model)
    model, V, params, blocks, names, order, logits_fn = make(shape, seed)
    targets = [t for t in order if t in targets]
    for p in model.parameters():
        p.requires_grad_(False)
    adapters = []  # (target, block, LoRALinear) in hptrain's order: target-major, then block
    wrapped = {}
    for blk_i, blk in enumerate(blocks):
        for t in targets:
            lin = LoRALinear(getattr(blk, names[t]), r, alpha, rslora)
            with torch.no_grad():  # B random: every gradient non-zero
                lin.lora_B.weight.normal_(0.0, 0.05)
            setattr(blk, names[t], lin)
            wrapped[(t, blk_i)] = lin
    for t in targets:
        for blk_i in range(len(blocks)):
            adapters.append(wrapped[(t, blk_i)])

    def lora_flat(grads):
        parts = []
        for t in targets:
            for which in ("lora_A", "lora_B"):
                for blk_i in range(len(blocks)):
                    w = getattr(wrapped[(t, blk_i)], which).weight
                    parts.append((w.grad if grads else w.data).detach().contiguous().view(-1))
        return torch.cat(parts)

    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    lora0 = lora_flat(False).clone()
    logits = logits_fn(x)
    loss = F.cross_entropy(logits.reshape(-1, V), y.view(-1))
    loss.backward()
    grads = lora_flat(True).clone()
    ps = [p for a in adapters for p in (a.lora_A.weight, a.lora_B.weight)]
    for p in ps:
        p.grad = None
    opt = torch.optim.AdamW(ps, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for _ in range(10):
        l = F.cross_entropy(logits_fn(x).reshape(-1, V), y.view(-1))
        losses.append(float(l))
        opt.zero_grad(set_to_none=True)
        l.backward()
        opt.step()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "wb") as f:
        f.write(struct.pack("<256i", *([20261128, 1, B, T, params.numel(), lora0.numel(), 10]
                                       + [0] * 249)))
        f.write(x.to(torch.int32).numpy().tobytes())
        f.write(y.to(torch.int32).numpy().tobytes())
        f.write(params.numpy().tobytes())
        f.write(lora0.numpy().tobytes())
        f.write(logits.detach().float().contiguous().numpy().tobytes())
        f.write(struct.pack("<f", float(loss)))
        f.write(grads.numpy().tobytes())
        f.write(struct.pack("<10f", *losses))
        f.write(lora_flat(False).numpy().tobytes())
    print("loss %.6f, %d adapter values, losses %s" % (float(loss), lora0.numel(),
                                                       " ".join("%.5f" % v for v in losses)))


if __name__ == "__main__":
    main()
