#!/usr/bin/env python3
"""hf_write.py: a small safetensors / config.json writer and reader for hptrain's tests, written
from the format's specification (8-byte little-endian header size, a JSON header of
{name: {dtype, shape, data_offsets}} and "__metadata__", padded with spaces; then the data,
row-major, little-endian, no holes). Uses torch, struct and json only: the safetensors and
transformers packages are not needed.

  hf_write.py fixtures OUT            value fixtures (F32/BF16/F16) with torch's fp32 view of each
  hf_write.py gpt2 MODEL.bin OUT [--dtype f32|bf16|f16] [--hub] [--shard BYTES] [--lm-head]
                                      a GPT2LMHeadModel directory from an llm.c checkpoint
                                      (fp32); --hub: the hub's names (no "transformer."), with the
                                      attention-mask buffers
  hf_write.py llama OUT SHAPE B T SEED [--dtype f32|bf16] [--shard BYTES] [--rope-parameters]
                    [--stream]
                                      a LlamaForCausalLM directory OUT/hf of the PyTorch model of
                                      tests/make_ref_state_llama.py (SHAPE its llama:... shape),
                                      and OUT/ref.bin: B, T (int32), x, y (B*T int32 each),
                                      PyTorch's loss (fp32), the parameter count (int64) and the
                                      parameters in hptrain's checkpoint order (fp32), the logits
                                      (B*T*V fp32); --stream: x, y are one window of
                                      B*T+1 tokens, written as the llm.c shard OUT/tokens.bin;
                                      prints "pytorch loss X"; exit 77 when that script is
                                      not there
  hf_write.py qwen OUT SHAPE B T SEED [--dtype f32|bf16] [--shard BYTES] [--rope-parameters]
                   [--stream] [--lm-head]
                                      the same for a Qwen2ForCausalLM or Qwen3ForCausalLM
                                      directory of tests/make_ref_state_qwen.py's model (SHAPE its
                                      qwen2:... or qwen3:...); --lm-head: a tied model's files
                                      keep lm_head.weight too (as the hub's Qwen3-0.6B's do)
  hf_write.py gemma OUT SHAPE B T SEED [--dtype f32|bf16] [--shard BYTES] [--rope-parameters]
                    [--stream] [--lm-head]
                                      the same for a Gemma3ForCausalLM directory of
                                      tests/make_ref_state_gemma.py's model (SHAPE its gemma3:...);
                                      --rope-parameters: transformers 5's layer_types and
                                      rotations per layer type
  hf_write.py saved SRC DST ARCH MODEL_TYPE [KEY=JSON...]
                                      a directory hptrain saved after training from SRC: SRC's
                                      names and shapes in fp32, moved; config.json's class,
                                      model_type and keys
  hf_write.py check DIR MODEL.bin [--dtype f32|bf16]
                                      reads a directory hptrain wrote and checks names, shapes,
                                      dtypes and values against the llm.c checkpoint (bf16:
                                      against torch's rounding of the fp32 values)
"""
import json
import os
import struct
import sys

import torch

DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
TD = {v: k for k, v in DT.items()}
SIZE = {"F32": 4, "BF16": 2, "F16": 2}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.float32:
        return t.numpy().tobytes()
    return t.view(torch.int16).numpy().tobytes()  # little-endian on the machines we run on


def save_file(path, tensors, metadata=None):
    """tensors: list of (name, torch tensor) in file order."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in tensors:
        b = tensor_bytes(t)
        header[name] = {"dtype": DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * ((8 - (8 + len(js)) % 8) % 8)  # data starts at a multiple of 8
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in blobs:
            f.write(b)


def save_dir(out, tensors, shard=None):
    os.makedirs(out, exist_ok=True)
    if not shard:
        save_file(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
        return
    shards, cur, size = [], [], 0
    for name, t in tensors:
        b = t.numel() * t.element_size()
        if cur and size + b > shard:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, t))
        size += b
    shards.append(cur)
    wm, total = {}, 0
    for i, s in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        save_file(os.path.join(out, fn), s, {"format": "pt"})
        for name, t in s:
            wm[name] = fn
            total += t.numel() * t.element_size()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)


def load_file(path):
    """{name: torch tensor} of a safetensors file, read from the specification."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode())
    assert data[8 + n - 1:8 + n] in (b"}", b" ")
    out, base = {}, 8 + n
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b0, b1 = e["data_offsets"]
        raw = bytearray(data[base + b0:base + b1])
        if e["dtype"] == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32) if raw else torch.zeros(0)
        else:
            t = torch.frombuffer(raw, dtype=torch.int16).view(TD[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out, header


def load_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(idx):
        return load_file(os.path.join(d, "model.safetensors"))[0]
    wm = json.load(open(idx))["weight_map"]
    out = {}
    for fn in sorted(set(wm.values())):
        part, _ = load_file(os.path.join(d, fn))
        for k in part:
            assert wm[k] == fn, (k, fn)
        out.update(part)
    assert set(out) == set(wm)
    return out


def read_llmc(path):
    with open(path, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
        assert h[0] == 20240326 and h[1] == 3, "an fp32 llm.c GPT-2 checkpoint"
        maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
        p = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
              ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
              ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
              ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
              ("lnfw", (C,)), ("lnfb", (C,))]
    w, off = {}, 0
    for name, s in shapes:
        n = 1
        for x in s:
            n *= x
        w[name] = p[off:off + n].reshape(s)
        off += n
    assert off == p.numel()
    return w, dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)


def gpt2_tensors(w, cfg, prefix="transformer."):
    """The GPT2LMHeadModel state dict of llm.c weights: Conv1D weights stored (in, out)."""
    V, L = cfg["V"], cfg["L"]
    t = [(prefix + "wte.weight", w["wte"][:V]), (prefix + "wpe.weight", w["wpe"])]
    per = [("ln_1.weight", "ln1w", 0), ("ln_1.bias", "ln1b", 0), ("attn.c_attn.weight", "qkvw", 1),
           ("attn.c_attn.bias", "qkvb", 0), ("attn.c_proj.weight", "attprojw", 1),
           ("attn.c_proj.bias", "attprojb", 0), ("ln_2.weight", "ln2w", 0), ("ln_2.bias", "ln2b", 0),
           ("mlp.c_fc.weight", "fcw", 1), ("mlp.c_fc.bias", "fcb", 0),
           ("mlp.c_proj.weight", "fcprojw", 1), ("mlp.c_proj.bias", "fcprojb", 0)]
    for l in range(L):
        for hf, k, tr in per:
            x = w[k][l]
            t.append(("%sh.%d.%s" % (prefix, l, hf), x.t().contiguous() if tr else x))
    t += [(prefix + "ln_f.weight", w["lnfw"]), (prefix + "ln_f.bias", w["lnfb"])]
    return t


def gpt2_config(cfg, dtype):
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "activation_function": "gelu_new", "n_embd": cfg["C"], "n_layer": cfg["L"],
            "n_head": cfg["NH"], "n_positions": cfg["maxT"], "n_ctx": cfg["maxT"],
            "vocab_size": cfg["V"], "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
            "bos_token_id": 0, "eos_token_id": [0, 1], "tie_word_embeddings": True,
            "torch_dtype": dtype}


def cmd_gpt2(args):
    src, out = args[0], args[1]
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[
        args[args.index("--dtype") + 1] if "--dtype" in args else "f32"]
    hub = "--hub" in args
    shard = int(args[args.index("--shard") + 1]) if "--shard" in args else None
    w, cfg = read_llmc(src)
    t = [(n, x.to(dt)) for n, x in gpt2_tensors(w, cfg, "" if hub else "transformer.")]
    if hub:  # the hub's files carry the causal-mask buffers; loaders skip them
        T = cfg["maxT"]
        for l in range(cfg["L"]):
            t.append(("h.%d.attn.bias" % l, torch.tril(torch.ones(T, T)).reshape(1, 1, T, T).to(dt)))
    if "--lm-head" in args:
        t.append(("lm_head.weight", w["wte"][:cfg["V"]].to(dt)))
    save_dir(out, t, shard)
    json.dump(gpt2_config(cfg, {torch.float32: "float32", torch.bfloat16: "bfloat16",
                                torch.float16: "float16"}[dt]),
              open(os.path.join(out, "config.json"), "w"), indent=2)


def cmd_check(args):
    d, src = args[0], args[1]
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}[args[args.index("--dtype") + 1] if "--dtype" in args else "f32"]
    got = load_dir(d)
    w, cfg = read_llmc(src)
    want = dict(gpt2_tensors(w, cfg))
    c = json.load(open(os.path.join(d, "config.json")))
    assert c["architectures"] == ["GPT2LMHeadModel"] and c["n_embd"] == cfg["C"] and \
        c["n_layer"] == cfg["L"] and c["n_head"] == cfg["NH"] and c["vocab_size"] == cfg["V"] and \
        c["n_positions"] == cfg["maxT"], c
    assert set(got) == set(want), sorted(set(got) ^ set(want))
    for k, x in want.items():
        y = got[k]
        assert y.dtype == dt, (k, y.dtype)
        assert tuple(y.shape) == tuple(x.shape), (k, y.shape, x.shape)
        assert torch.equal(y.view(torch.int16) if dt != torch.float32 else y,
                           x.to(dt).view(torch.int16) if dt != torch.float32 else x), k
    print("check: %d tensors of %s equal the checkpoint's (%s)" % (len(want), d, dt))


def llama_tensors(model):
    """LlamaForCausalLM's state dict of make_ref_state_llama.Llama (Linear weights (out, in))."""
    c, t = model.c, [("model.embed_tokens.weight", model.embed_tokens.weight)]
    for l, b in enumerate(model.layers):
        p = "model.layers.%d." % l
        t.append((p + "input_layernorm.weight", b.input_layernorm.weight))
        for k in ("q", "k", "v", "o"):
            lin = getattr(b, k + "_proj")
            t.append((p + "self_attn.%s_proj.weight" % k, lin.weight))
            if lin.bias is not None:
                t.append((p + "self_attn.%s_proj.bias" % k, lin.bias))
        t.append((p + "post_attention_layernorm.weight", b.post_attention_layernorm.weight))
        for k in ("gate", "up", "down"):
            lin = getattr(b, k + "_proj")
            t.append((p + "mlp.%s_proj.weight" % k, lin.weight))
            if lin.bias is not None:
                t.append((p + "mlp.%s_proj.bias" % k, lin.bias))
    t.append(("model.norm.weight", model.norm.weight))
    if not c["tied"]:
        t.append(("lm_head.weight", model.lm_head.weight))
    return [(n, x.detach().float().contiguous()) for n, x in t]


def llama_config(c, dtype, rope_parameters):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": c["C"], "intermediate_size": c["FF"], "num_attention_heads": c["NH"],
           "num_key_value_heads": c["NKV"], "num_hidden_layers": c["L"], "vocab_size": c["V"],
           "max_position_embeddings": c["T"], "rms_norm_eps": c["eps"],
           "tie_word_embeddings": bool(c["tied"]), "attention_bias": bool(c["attn_bias"]),
           "mlp_bias": bool(c["mlp_bias"]), "initializer_range": c["range"],
           "head_dim": c["C"] // c["NH"], "bos_token_id": 1, "eos_token_id": [2, 3],
           "torch_dtype": dtype}
    if c.get("window", 0) > 0:  # Mistral's sliding window
        cfg.update(architectures=["MistralForCausalLM"], model_type="mistral",
                   sliding_window=c["window"])
    rope = None
    if c["factor"] > 0:
        rope = {"rope_type": "llama3", "factor": c["factor"], "low_freq_factor": c["low"],
                "high_freq_factor": c["high"], "original_max_position_embeddings": c["orig"]}
    if rope_parameters:  # transformers 5's form: theta inside
        cfg["rope_parameters"] = dict(rope or {"rope_type": "default"}, rope_theta=c["theta"])
    else:
        cfg["rope_theta"] = c["theta"]
        cfg["rope_scaling"] = rope
    return cfg


def cmd_llama(args):
    out, shape, B, T, seed = args[0], args[1], int(args[2]), int(args[3]), int(args[4])
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:
        import make_ref_state_llama as ref
    except ImportError:
        print("tests/make_ref_state_llama.py is not there: skipped")
        sys.exit(77)
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}[args[args.index("--dtype") + 1] if "--dtype" in args else "f32"]
    shard = int(args[args.index("--shard") + 1]) if "--shard" in args else None
    c = ref.parse_shape(shape)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = ref.Llama(c)
    with torch.no_grad():  # as make_ref_state_llama: norms away from 1, biases away from 0
        for name, p in model.named_parameters():
            if "layernorm" in name or name.startswith("norm") or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
        if dt != torch.float32:  # the model the files hold: its weights rounded
            for p in model.parameters():
                p.copy_(p.to(dt).float())
    if "--stream" in args:  # one window of B*T+1 tokens, as the data loader reads a shard
        toks = torch.randint(0, c["V"], (B * T + 1,))
        x, y = toks[:-1].view(B, T), toks[1:].view(B, T)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "tokens.bin"), "wb") as f:
            f.write(struct.pack("<256i", *([20240520, 1, toks.numel()] + [0] * 253)))
            f.write(struct.pack("<%dH" % toks.numel(), *toks.tolist()))
    else:
        x = torch.randint(0, c["V"], (B, T))
        y = torch.randint(0, c["V"], (B, T))
    with torch.no_grad():
        logits, loss = model(x, y)
    print("pytorch loss %.9g" % float(loss))
    d = os.path.join(out, "hf")
    save_dir(d, [(n, t.to(dt)) for n, t in llama_tensors(model)], shard)
    json.dump(llama_config(c, {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dt],
                           "--rope-parameters" in args),
              open(os.path.join(d, "config.json"), "w"), indent=2)
    params = ref.flat(model, False)
    with open(os.path.join(out, "ref.bin"), "wb") as f:
        f.write(struct.pack("<2i", B, T))
        f.write(x.to(torch.int32).numpy().tobytes())
        f.write(y.to(torch.int32).numpy().tobytes())
        f.write(struct.pack("<f", float(loss)))
        f.write(struct.pack("<q", params.numel()))
        f.write(params.numpy().tobytes())
        f.write(logits.float().contiguous().numpy().tobytes())


def qwen_tensors(model, lm_head):
    """Qwen2ForCausalLM's or Qwen3ForCausalLM's state dict of make_ref_state_qwen.Qwen."""
    c, t = model.c, [("model.embed_tokens.weight", model.embed_tokens.weight)]
    for l, b in enumerate(model.layers):
        p = "model.layers.%d." % l
        t.append((p + "input_layernorm.weight", b.input_layernorm.weight))
        for k in ("q", "k", "v", "o"):
            lin = getattr(b, k + "_proj")
            t.append((p + "self_attn.%s_proj.weight" % k, lin.weight))
            if lin.bias is not None:
                t.append((p + "self_attn.%s_proj.bias" % k, lin.bias))
        if c["qk_norm"]:
            t.append((p + "self_attn.q_norm.weight", b.q_norm.weight))
            t.append((p + "self_attn.k_norm.weight", b.k_norm.weight))
        t.append((p + "post_attention_layernorm.weight", b.post_attention_layernorm.weight))
        for k in ("gate", "up", "down"):
            t.append((p + "mlp.%s_proj.weight" % k, getattr(b, k + "_proj").weight))
    t.append(("model.norm.weight", model.norm.weight))
    if not c["tied"] or lm_head:
        t.append(("lm_head.weight", model.head()))
    return [(n, x.detach().float().contiguous()) for n, x in t]


def qwen_config(c, dtype, rope_parameters):
    q3 = c["fam"] == "qwen3"
    cfg = {"architectures": ["Qwen3ForCausalLM" if q3 else "Qwen2ForCausalLM"],
           "model_type": c["fam"], "hidden_act": "silu", "hidden_size": c["C"],
           "intermediate_size": c["FF"], "num_attention_heads": c["NH"],
           "num_key_value_heads": c["NKV"], "num_hidden_layers": c["L"], "vocab_size": c["V"],
           "max_position_embeddings": c["T"], "rms_norm_eps": c["eps"],
           "tie_word_embeddings": bool(c["tied"]), "initializer_range": c["range"],
           "use_sliding_window": False, "sliding_window": None, "bos_token_id": 1,
           "eos_token_id": [2, 3], "torch_dtype": dtype}
    if q3:
        cfg["head_dim"] = c["hd"]
        cfg["attention_bias"] = bool(c["attn_bias"])
    if rope_parameters:  # transformers 5's form: theta inside
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": c["theta"]}
    else:
        cfg["rope_theta"] = c["theta"]
        cfg["rope_scaling"] = None
    return cfg


def gemma_tensors(model, lm_head):
    """Gemma3ForCausalLM's state dict of make_ref_state_gemma.Gemma (its modules carry the hub's
    names)"""
    t = [(n, x) for n, x in model.state_dict().items() if n.startswith(("model.", "lm_head."))]
    if model.c["tied"] and lm_head:
        t.append(("lm_head.weight", model.head()))
    return [(n, x.detach().float().contiguous()) for n, x in t]


def gemma_config(c, dtype, rope_parameters):
    cfg = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
           "hidden_activation": "gelu_pytorch_tanh", "hidden_size": c["C"],
           "intermediate_size": c["FF"], "num_attention_heads": c["NH"],
           "num_key_value_heads": c["NKV"], "num_hidden_layers": c["L"], "head_dim": c["hd"],
           "vocab_size": c["V"], "max_position_embeddings": c["T"], "rms_norm_eps": c["eps"],
           "query_pre_attn_scalar": c["qscalar"], "sliding_window": c["window"],
           "tie_word_embeddings": bool(c["tied"]), "attention_bias": bool(c["attn_bias"]),
           "initializer_range": c["range"], "final_logit_softcapping": None,
           "attn_logit_softcapping": None, "bos_token_id": 2, "eos_token_id": [1, 106],
           "torch_dtype": dtype}
    full = {"rope_type": "linear", "factor": c["factor"]} if c["factor"] > 0 else {"rope_type": "default"}
    if rope_parameters:  # transformers 5's form: layer_types, a rotation per layer type
        import make_ref_state_gemma as ref
        cfg["layer_types"] = ["sliding_attention" if ref.is_sliding(c, l) else "full_attention"
                              for l in range(c["L"])]
        cfg["rope_parameters"] = {"full_attention": dict(full, rope_theta=c["theta"]),
                                  "sliding_attention": {"rope_type": "default",
                                                        "rope_theta": c["ltheta"]}}
    else:
        cfg["sliding_window_pattern"] = c["pattern"] if c["pattern"] > 0 else c["L"] + 1
        cfg["rope_theta"] = c["theta"]
        cfg["rope_local_base_freq"] = c["ltheta"]
        cfg["rope_scaling"] = full if c["factor"] > 0 else None
    return cfg


def cmd_model(args, module, build, tensors, config):
    """a Hugging Face directory of a reference script's model (module.parse_shape, its model made
    by build(module, c) and module.perturb), its tensors and config.json by tensors(model,
    lm_head) and config(c, dtype, rope_parameters); the qwen and gemma commands"""
    out, shape, B, T, seed = args[0], args[1], int(args[2]), int(args[3]), int(args[4])
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    ref = __import__(module)
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}[args[args.index("--dtype") + 1] if "--dtype" in args else "f32"]
    shard = int(args[args.index("--shard") + 1]) if "--shard" in args else None
    c = ref.parse_shape(shape)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = build(ref, c)
    ref.perturb(model)
    if dt != torch.float32:  # the model the files hold: its weights rounded
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(dt).float())
    if "--stream" in args:  # one window of B*T+1 tokens, as the data loader reads a shard
        toks = torch.randint(0, c["V"], (B * T + 1,))
        x, y = toks[:-1].view(B, T), toks[1:].view(B, T)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "tokens.bin"), "wb") as f:
            f.write(struct.pack("<256i", *([20240520, 1, toks.numel()] + [0] * 253)))
            f.write(struct.pack("<%dH" % toks.numel(), *toks.tolist()))
    else:
        x = torch.randint(0, c["V"], (B, T))
        y = torch.randint(0, c["V"], (B, T))
    with torch.no_grad():
        _, loss = model(x, y)
    print("pytorch loss %.9g" % float(loss))
    d = os.path.join(out, "hf")
    save_dir(d, [(n, t.to(dt)) for n, t in tensors(model, "--lm-head" in args)], shard)
    json.dump(config(c, {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dt],
                     "--rope-parameters" in args),
              open(os.path.join(d, "config.json"), "w"), indent=2)


def cmd_qwen(args):
    cmd_model(args, "make_ref_state_qwen", lambda ref, c: ref.Qwen(c), qwen_tensors, qwen_config)


def cmd_gemma(args):
    cmd_model(args, "make_ref_state_gemma", lambda ref, c: ref.Gemma(c), gemma_tensors,
              gemma_config)


def cmd_saved(args):
    """a directory hptrain trained and saved (args[1]) against the one it read (args[0]): the same
    names (a tied head's copy dropped), shapes and dtypes (the default --save-dtype: the input's),
    values that moved; config.json's
    architectures [args[2]], model_type args[3] and each KEY=JSON of args[4:]"""
    src, dst, arch, model_type = args[:4]
    a, b = load_dir(src), load_dir(dst)
    a.pop("lm_head.weight", None)  # the tied head's copy in the source's files: hptrain writes wte once
    assert set(a) == set(b), sorted(set(a) ^ set(b))
    for k in a:  # bf16 files in, bf16 out (the default --save-dtype: the input's)
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
    assert not all(bool((a[k] == b[k]).all()) for k in a)  # trained: the weights moved
    c = json.load(open(os.path.join(dst, "config.json")))
    assert c["architectures"] == [arch] and c["model_type"] == model_type, c
    for kv in args[4:]:
        k, v = kv.split("=", 1)
        assert c[k] == json.loads(v), (k, c[k], v)


def cmd_fixtures(args):
    out = args[0]
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(7)
    base = torch.randn(3, 37, generator=g) * 3
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, 65504.0, 6e-8, 1e-5, 3.4e38, float("inf"),
                            -float("inf"), 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1e-40, 5.96e-8, 100000.0])
    tensors = [("a.f32", base), ("b.bf16", base.to(torch.bfloat16)), ("c.f16", base.to(torch.float16)),
               ("d.bf16", special.to(torch.bfloat16)), ("e.f16", special.to(torch.float16)),
               ("f.scalar", torch.tensor(2.0)), ("g.empty", torch.zeros(0, 4)),
               ("h.f32", special)]
    save_file(os.path.join(out, "fix.safetensors"), tensors, {"format": "pt", "who": "hf_write.py"})
    with open(os.path.join(out, "fix.expected"), "w") as f:  # name numel, then fp32 bits in hex
        for name, t in tensors:
            v = t.float().reshape(-1)
            f.write("%s %d %s\n" % (name, v.numel(),
                                    " ".join("%08x" % x for x in v.view(torch.int32).tolist())))
    # bf16 rounding oracle: torch's float -> bfloat16 (nearest even) of fp32 values
    x = torch.cat([base.reshape(-1), special, torch.randn(4096, generator=g) * 1e3])
    with open(os.path.join(out, "round.expected"), "w") as f:
        f.write("%d\n" % x.numel())
        f.write(" ".join("%08x %04x" % (a & 0xffffffff, b & 0xffff) for a, b in
                         zip(x.view(torch.int32).tolist(), x.to(torch.bfloat16).view(torch.int16).tolist())))
        f.write("\n")
    # a sharded directory of the same tensors
    save_dir(os.path.join(out, "sharded"), tensors, shard=600)


if __name__ == "__main__":
    cmd = sys.argv[1]
    {"fixtures": cmd_fixtures, "gpt2": cmd_gpt2, "check": cmd_check, "llama": cmd_llama,
     "qwen": cmd_qwen, "gemma": cmd_gemma, "saved": cmd_saved}[cmd](sys.argv[2:])
