#!/usr/bin/env bash
# test_lora_cli.sh HPTRAIN: LoRA through the command line (docs/lora.md). `train --lora` on a
# Hugging Face llama directory (tests/hf_write.py) saves PEFT's files; a PyTorch model that
# reads them as PEFT would (tensor names base_model.model.<module>.lora_A/B.weight, scale from
# adapter_config.json) gives `eval --adapter`'s loss; the trainer's last validation loss (the
# adapters unmerged) equals eval's (merged) on the same batches; a run split with --stop-at and
# --resume gives the uninterrupted run's losses and adapters bit for bit; a GPT-2 shape saves
# its names; bad uses are refused with one line. Exit 77 (skipped) without python3-torch.
set -u
bin=$1
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then echo "python3-torch is not installed: skipped"; exit 77; fi
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
close() { "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > $3 * abs(b))" "$1" "$2"; }
shape="llama:L=2,C=48,NH=6,NKV=3,FF=80,V=300,T=64,theta=10000,eps=1e-5,attn_bias=1"
"$py" "$here/hf_write.py" llama "$tmp/m" "$shape" 2 16 5 --stream >/dev/null || { echo "hf_write.py failed"; exit 1; }
"$py" - "$tmp" <<'PY'
import struct, sys, random
random.seed(3)
toks = [random.randrange(300) for _ in range(3000)]
open(sys.argv[1] + '/tr.bin', 'wb').write(struct.pack('<256i', *([20240520, 1, len(toks)] + [0] * 253)) + struct.pack('<%dH' % len(toks), *toks))
PY

# training: loss falls on a repeated batch's data, the adapters saved in PEFT's files
"$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --val "$tmp/m/tokens.bin" --val-batches 1 \
  --eval-every 12 --batch 2 --seq 16 --steps 12 --lr 2e-2 --lora r=4,alpha=8,dropout=0.05 \
  --save "$tmp/ad" --log "$tmp/log.jsonl" --quiet >/dev/null 2>"$tmp/err" || bad "train --lora: $(cat "$tmp/err")"
[ -f "$tmp/ad/adapter_config.json" ] && [ -f "$tmp/ad/adapter_model.safetensors" ] && ok ||
  bad "no PEFT files in $tmp/ad: $(ls "$tmp/ad" 2>&1)"
[ ! -f "$tmp/ad/state.bin" ] && ok || bad "a LoRA save wrote state.bin"
val=$(tail -n 1 "$tmp/log.jsonl" | sed -n 's/.*"val_loss":\([0-9.e+-]*\).*/\1/p')
got=$("$bin" eval --quiet --model "$tmp/m/hf" --adapter "$tmp/ad" --data "$tmp/m/tokens.bin" --batch 2 --seq 16 --batches 1 2>"$tmp/err" | awk '/^loss/ {print $2}')
base=$("$bin" eval --quiet --model "$tmp/m/hf" --data "$tmp/m/tokens.bin" --batch 2 --seq 16 --batches 1 2>"$tmp/err" | awk '/^loss/ {print $2}')
want=$("$py" - "$tmp" "$here" <<'PY'
# the base from the directory, the adapters from PEFT's files, read as PEFT reads them
import json, math, os, struct, sys
import torch
tmp, here = sys.argv[1], sys.argv[2]
sys.path.insert(0, here)
import hf_write, make_ref_state_llama as ref
cfg = json.load(open(tmp + "/ad/adapter_config.json"))
assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8, cfg
assert cfg["lora_dropout"] == 0.05 and cfg["use_rslora"] is False and cfg["bias"] == "none", cfg
assert sorted(cfg["target_modules"]) == sorted(["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]), cfg
ad, _ = hf_write.load_file(tmp + "/ad/adapter_model.safetensors")
w = hf_write.load_dir(tmp + "/m/hf")
hc = json.load(open(tmp + "/m/hf/config.json"))
shape = "llama:L=%d,C=%d,NH=%d,NKV=%d,FF=%d,V=%d,T=%d,theta=%g,eps=%g,attn_bias=1" % (
    hc["num_hidden_layers"], hc["hidden_size"], hc["num_attention_heads"], hc["num_key_value_heads"],
    hc["intermediate_size"], hc["vocab_size"], hc["max_position_embeddings"], hc["rope_theta"], hc["rms_norm_eps"])
c = ref.parse_shape(shape)
c["tied"] = int(hc.get("tie_word_embeddings", False))
model = ref.Llama(c)
sd = {}
for k, v in w.items():
    k = k.replace("model.", "", 1) if k.startswith("model.") else k
    sd[k.replace("self_attn.", "").replace("mlp.", "")] = v.float()
model.load_state_dict(sd, strict=True)
scale = cfg["lora_alpha"] / cfg["r"]
n = 0
with torch.no_grad():
    for l, blk in enumerate(model.layers):
        for mod in cfg["target_modules"]:
            key = "base_model.model.model.layers.%d.%s" % (l, mod)
            A, B = ad[key + ".lora_A.weight"], ad[key + ".lora_B.weight"]
            lin = getattr(blk, mod.split(".")[-1])
            assert A.shape == (4, lin.in_features) and B.shape == (lin.out_features, 4), key
            lin.weight += scale * (B @ A)
            n += 2
assert n == len(ad), (n, len(ad))
raw = open(tmp + "/m/tokens.bin", "rb").read()[1024:]
toks = torch.tensor(struct.unpack("<%dH" % (len(raw) // 2), raw), dtype=torch.long)
x, y = toks[:32].view(2, 16), toks[1:33].view(2, 16)
print("%.7f" % float(torch.nn.functional.cross_entropy(model(x).view(-1, c["V"]), y.view(-1))))
PY
)
echo "llama: eval --adapter $got, PyTorch on PEFT's files $want, trainer's val $val, base $base"
[ -n "$got" ] && [ -n "$want" ] && close "$got" "$want" 1e-5 && ok || bad "eval --adapter '$got', PyTorch '$want' ($(cat "$tmp/err"))"
[ -n "$val" ] && close "$got" "$val" 1e-5 && ok || bad "eval --adapter '$got', the trainer's last val_loss '$val'"
[ -n "$base" ] && [ "$base" != "$got" ] && ok || bad "the adapters changed nothing: base '$base', with '$got'"

# GPT-2: the names PEFT gives GPT2LMHeadModel's modules
"$bin" train --model "gpt2:L=2,C=32,NH=4,V=300,T=32" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 2 \
  --lora r=2 --lora-targets c_attn,mlp.c_proj --save "$tmp/g" --quiet >/dev/null 2>"$tmp/err" || bad "gpt2 train --lora: $(cat "$tmp/err")"
"$py" - "$tmp/g" "$here" <<'PY' && ok || bad "gpt2 PEFT names"
import json, sys
sys.path.insert(0, sys.argv[2])
import hf_write
t, _ = hf_write.load_file(sys.argv[1] + "/adapter_model.safetensors")
want = {"base_model.model.transformer.h.%d.%s.lora_%s.weight" % (l, m, ab): s
        for l in range(2) for m, s in (("attn.c_attn", {"A": (2, 32), "B": (96, 2)}), ("mlp.c_proj", {"A": (2, 128), "B": (32, 2)}))
        for ab in "AB"}
got = {k: tuple(v.shape) for k, v in t.items()}
exp = {k: v[k.split("lora_")[1][0]] for k, v in want.items()}
assert got == exp, (got, exp)
cfg = json.load(open(sys.argv[1] + "/adapter_config.json"))
assert cfg["fan_in_fan_out"] is True and cfg["r"] == 2 and cfg["lora_alpha"] == 8, cfg
PY

# merge: the adapters written into the base's weights, the same loss as eval --adapter's
"$bin" merge --model "$tmp/m/hf" --adapter "$tmp/ad" --save "$tmp/merged" 2>"$tmp/err" >/dev/null || bad "merge: $(cat "$tmp/err")"
mg=$("$bin" eval --quiet --model "$tmp/merged" --data "$tmp/m/tokens.bin" --batch 2 --seq 16 --batches 1 2>"$tmp/err" | awk '/^loss/ {print $2}')
[ -n "$mg" ] && [ "$mg" = "$got" ] && ok || bad "merged directory's loss '$mg', eval --adapter's '$got'"

# train --adapter starts from saved adapters (their settings): at lr 0 they come back unchanged
"$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 1 --lr 0 --min-lr 0 \
  --adapter "$tmp/ad" --save "$tmp/ad2" --quiet >/dev/null 2>"$tmp/err" || bad "train --adapter: $(cat "$tmp/err")"
cmp -s "$tmp/ad/adapter_model.safetensors" "$tmp/ad2/adapter_model.safetensors" && ok ||
  bad "train --adapter at lr 0 changed the adapters"
cmp -s "$tmp/ad/adapter_config.json" "$tmp/ad2/adapter_config.json" && ok || bad "train --adapter changed the settings"
# ... with the run's own base storage and home kept (the adapters' settings replace --lora's
# only): the memory report has the host tier
"$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 1 --lr 0 --min-lr 0 \
  --adapter "$tmp/ad" --lora r=2 --base-weights int8 --base-home host >"$tmp/out_ad" 2>&1 &&
  grep -q "plan: .*--base-weights int8 --base-home host" "$tmp/out_ad" && grep -q "host peak" "$tmp/out_ad" && ok ||
  bad "train --adapter --base-weights int8 --base-home host: $(tail -n 3 "$tmp/out_ad")"

# the setup line names the adapters' optimizer state (the base has none), the memory report's
grep -q "optimizer adamw, 32-bit state: .* of optimizer state (the LoRA adapters')" "$tmp/out_ad" &&
  [ "$(sed -n "s/.*32-bit state: \(.*\) of optimizer state.*/\1/p" "$tmp/out_ad")" = \
    "$(awk '$1 == "optim" {print $2, $3; exit}' "$tmp/out_ad")" ] && ok ||
  bad "the optimizer line is not the adapters' state: $(grep -E "optimizer|^ *optim" "$tmp/out_ad")"

# exact resume: 8 steps with dropout, or 4, --save, and 4 more with --resume: the same losses
# and the same adapters, bit for bit (the base comes from --model again)
run() { "$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 8 --lr 1e-2 \
  --lora r=4,alpha=8,dropout=0.2 --lora-targets q,v,down --quiet "$@" >/dev/null 2>>"$tmp/err"; }
: >"$tmp/err"
run --log "$tmp/a.jsonl" --save "$tmp/r1" && run --log "$tmp/b1.jsonl" --save "$tmp/r2" --stop-at 4 &&
  run --log "$tmp/b2.jsonl" --save "$tmp/r2" --resume "$tmp/r2" || bad "split run: $(cat "$tmp/err")"
cat "$tmp/b1.jsonl" "$tmp/b2.jsonl" >"$tmp/b.jsonl"
la=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$tmp/a.jsonl" | tr '\n' ' ')
lb=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$tmp/b.jsonl" | tr '\n' ' ')
echo "resume: uninterrupted $la; 4 + 4 $lb"
[ -n "$la" ] && [ "$la" = "$lb" ] && ok || bad "resumed losses differ: '$la' vs '$lb'"
cmp -s "$tmp/r1/adapter_model.safetensors" "$tmp/r2/adapter_model.safetensors" && ok || bad "resumed adapters differ"
cp -r "$tmp/r2" "$tmp/r3"
head -c 100 "$tmp/r2/lora_state.bin" >"$tmp/r3/lora_state.bin"
expect_error "truncated state" "lora_state.bin is (truncated|damaged)" run --resume "$tmp/r3"
# --resume DIR alone: the base, the data and --lora from DIR/run.json (docs/formats.md)
run --log "$tmp/c1.jsonl" --save "$tmp/r4" --stop-at 4 && "$bin" train --resume "$tmp/r4" --log "$tmp/c2.jsonl" \
  --quiet 2>>"$tmp/err" || bad "split run, --resume alone: $(cat "$tmp/err")"
lc=$(cat "$tmp/c1.jsonl" "$tmp/c2.jsonl" | sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' | tr '\n' ' ')
[ -n "$la" ] && [ "$la" = "$lc" ] && ok || bad "--resume alone: losses differ: '$la' vs '$lc'"
# a run started from --adapter: --resume DIR alone takes the adapters' settings from DIR
ada() { "$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 8 --lr 1e-2 \
  --adapter "$tmp/ad" --quiet "$@" >/dev/null 2>>"$tmp/err"; }
ada --save "$tmp/d1" --log "$tmp/d1.jsonl" && ada --save "$tmp/d2" --stop-at 4 --log "$tmp/d2a.jsonl" &&
  "$bin" train --resume "$tmp/d2" --log "$tmp/d2b.jsonl" --quiet 2>>"$tmp/err" >/dev/null ||
  bad "--adapter run split, --resume alone: $(cat "$tmp/err")"
ld=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$tmp/d1.jsonl" | tr '\n' ' ')
le=$(cat "$tmp/d2a.jsonl" "$tmp/d2b.jsonl" | sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' | tr '\n' ' ')
[ -n "$ld" ] && [ "$ld" = "$le" ] && ok || bad "--adapter run resumed alone: losses differ: '$ld' vs '$le'"
# another --lora: refused by the record, and without one by the saved adapters' settings
expect_error "another rank" "error: --lora: the run in .*r2 was saved with r=4,alpha=8,dropout=0.2, given r=8" \
  "$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 8 --lora r=8 --resume "$tmp/r2" --quiet
rm "$tmp/r2/run.json"
expect_error "another rank, no record" "adapter_config.json has r=4.*resume with the same --lora" \
  "$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 8 --lora r=8 --resume "$tmp/r2" --quiet

# --base-weights bf16 | int8 | nf4: a frozen base stored narrow trains from a Hugging Face directory
# (the first step's loss near the fp32 base's: nf4 within 2%)
for bw in f32 bf16 int8 nf4; do
  "$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 2 --lora r=2 \
    --base-weights $bw --log "$tmp/bw_$bw.jsonl" --quiet >/dev/null 2>"$tmp/err" && [ -s "$tmp/bw_$bw.jsonl" ] && ok ||
    bad "train --base-weights $bw: $(cat "$tmp/err")"
done
l32=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$tmp/bw_f32.jsonl" | head -n 1)
l4=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$tmp/bw_nf4.jsonl" | head -n 1)
"$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (a != b and abs(a - b) < 0.02 * a))" "$l32" "$l4" &&
  ok || bad "nf4 base's first loss '$l4', the fp32 base's '$l32'"
echo "first loss: fp32 base $l32, nf4 base $l4"

# --base-home host | disk, with prefetch (the default) and without (--base-prefetch 0): the
# stored blocks off the device give the device home's losses, bit for bit (the log's losses
# identical), and the log counts the blocks' reads from that tier (eng_*)
for bh in host disk; do
  for pf in 1 0; do
    "$bin" train --model "$tmp/m/hf" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 2 --lora r=2 \
      --base-weights nf4 --base-home $bh --offload-dir "$tmp/od" --base-prefetch $pf \
      --log "$tmp/bh_$bh$pf.jsonl" >"$tmp/out_$bh" 2>"$tmp/err" ||
      bad "train --base-home $bh --base-prefetch $pf: $(cat "$tmp/err")"
    [ "$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$tmp/bh_$bh$pf.jsonl")" = \
      "$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$tmp/bw_nf4.jsonl")" ] && ok ||
      bad "--base-home $bh --base-prefetch $pf's losses differ from the device home's"
    # (with prefetch the two staging blocks may hold both of this L=2 model's blocks from its
    # load: no read at all)
    key=$([ $bh = disk ] && echo eng_disk_read_bytes || echo eng_host_copy_bytes)
    [ $pf = 1 ] || grep -q "\"$key\":[1-9]" "$tmp/bh_$bh$pf.jsonl" && ok ||
      bad "--base-home $bh --base-prefetch $pf: no $key in the log"
  done
done

# estimate --json names the adapters
"$bin" estimate --model "$tmp/m/hf" --batch 2 --seq 16 --lora r=4 --lora-targets q,v --base-weights bf16 --json 2>"$tmp/err" |
  "$py" -c "import json, sys; l = json.load(sys.stdin)['lora']; sys.exit(not (l['adapter_values'] == 2 * 4 * (48 + 48 + 48 + 24) and l['base_weights'] == 'bf16' and l['targets'] == 'q,v'))" &&
  ok || bad "estimate --json's lora: $(cat "$tmp/err")"

# refusals, one line each
m="gpt2:L=2,C=32,NH=4,V=300,T=32"
tr() { "$bin" train --model "$m" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 2 --quiet "$@"; }
expect_error "lora with offload" "lora.*--offload" tr --lora r=2 --offload host
expect_error "lora-targets alone" "lora-targets needs --lora" tr --lora-targets c_attn
expect_error "unknown target" "'q' is no linear layer of gpt2" tr --lora r=2 --lora-targets q
expect_error "bad spec" "lora" tr --lora rank=2
expect_error "base-weights alone" "base-weights stores a frozen base: it needs --lora" tr --base-weights bf16
expect_error "base-home alone" "base-home homes a frozen base: it needs --lora" tr --base-home host
expect_error "base-home disk without a directory" "base-home disk needs --offload-dir" tr --lora r=2 --base-home disk
expect_error "base-home bad tier" "base-home: device, host or disk" tr --lora r=2 --base-home gpu
# --device cuda: built, not yet run on a GPU: refused unless HPT_UNVERIFIED_CUDA_LORA=1 (the
# GPU check's switch); the estimate then plans it (a disk home's pinned host block counted)
est() { env -u HPT_UNVERIFIED_CUDA_LORA "$bin" estimate --model "$m" --batch 2 --seq 16 "$@"; }
expect_error "lora on a GPU" "device cuda.*HPT_UNVERIFIED_CUDA_LORA=1" est --lora r=2 --device cuda
expect_error "lora on a GPU, switch not 1" "device cuda" env HPT_UNVERIFIED_CUDA_LORA=yes "$bin" estimate --model "$m" --batch 2 --seq 16 --lora r=2 --device cuda
HPT_UNVERIFIED_CUDA_LORA=1 "$bin" estimate --model "$m" --batch 2 --seq 16 --lora r=2 --base-weights nf4 \
  --base-home disk --offload-dir "$tmp" --device cuda --json >"$tmp/gpu.json" 2>"$tmp/err" &&
  "$bin" estimate --model "$m" --batch 2 --seq 16 --lora r=2 --base-weights nf4 --base-home disk \
  --offload-dir "$tmp" --base-prefetch 0 --json >"$tmp/cpu.json" 2>>"$tmp/err" &&
  "$py" - "$tmp/gpu.json" "$tmp/cpu.json" <<'PY' && ok || bad "estimate --lora --device cuda with the switch: $(cat "$tmp/err")"
import json, sys
g, c = (json.load(open(p))["bytes"] for p in sys.argv[1:3])
# the GPU's disk home adds one pinned host block (a whole number of pages) and nothing else
# (against the CPU without prefetch: the GPU reads no block ahead)
extra = g["host"]["params"] - c["host"]["params"]
sys.exit(not (extra > 0 and extra % 4096 == 0 and g["device"] == c["device"] and g["disk"] == c["disk"]))
PY
expect_error "base-prefetch alone" "base-prefetch reads a frozen base ahead: it needs --lora" tr --base-prefetch 0
expect_error "base-prefetch bad value" "base-prefetch expects an integer in \[0, 1\]" tr --lora r=2 --base-prefetch 2
expect_error "missing adapter" "adapter_config.json" "$bin" eval --model "$m" --data "$tmp/tr.bin" --batch 1 --seq 8 --batches 1 --adapter "$tmp/nope"
finish test_lora_cli
