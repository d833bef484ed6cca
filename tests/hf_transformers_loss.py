#!/usr/bin/env python3
"""hf_transformers_loss.py DIR TOKENS.bin B T: transformers' own model of a Hugging Face
directory (AutoModelForCausalLM, fp32, eager attention: the architecture's published modelling
code, e.g. MistralForCausalLM with its sliding window) on the first B*T+1 tokens of an llm.c
shard, x the first B*T and y the next (one batch, as `hptrain eval --batches 1` reads it).
Prints "transformers loss X", the mean cross-entropy. Exit 77 where transformers is not
installed (the device machine of scripts/gpu_check.sh has it; Debian's python3-torch does not)."""
import struct
import sys

import torch

try:
    import transformers
except ImportError:
    print("transformers is not installed: skipped")
    sys.exit(77)


def main():
    d, path, B, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with open(path, "rb") as f:
        hdr = struct.unpack("<256i", f.read(1024))
        big = hdr[1] == 7  # uint32 tokens
        n = hdr[2]
        toks = struct.unpack("<%d%s" % (n, "I" if big else "H"), f.read(n * (4 if big else 2)))
    t = torch.tensor(toks[: B * T + 1], dtype=torch.long)
    x, y = t[:-1].view(B, T), t[1:].view(B, T)
    kw = {"attn_implementation": "eager"}
    try:  # transformers 5 names it dtype, 4.x torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, **kw)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, **kw)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    print("transformers loss %.9g" % float(loss))


if __name__ == "__main__":
    main()
