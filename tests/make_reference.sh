#!/usr/bin/env bash
# make_reference.sh DIR: the tests' tiny GPT-2 reference (gpt2_tiny_model.bin, _state.bin,
# _steps.json: L=2 C=64 NH=4 V=1000 Vp=1024 maxT=64, B=2 T=16) written by PyTorch
# (tests/make_ref_state.py, Debian's python3-torch) into DIR, once per build tree: ctest runs it
# as the fixture test make_reference before the tests that read it. The files appear together
# (written in a temporary directory, then renamed), so an interrupted run leaves none behind.
set -euo pipefail
dir=$1
names=(gpt2_tiny_model.bin gpt2_tiny_state.bin gpt2_tiny_steps.json)
have=1
for n in "${names[@]}"; do [ -s "$dir/$n" ] || have=0; done
if [ $have = 1 ]; then echo "make_reference: $dir has the reference"; exit 0; fi
py=""
for p in /usr/bin/python3 python3; do # Debian's, else the PATH's (a GPU machine's PyTorch)
  if "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "make_reference: PyTorch is missing (apt-get install python3-torch; scripts/test.sh does)" >&2
  exit 1
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.make.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$py" "$(dirname "$0")/make_ref_state.py" "$tmp" 2 64 4 1000 1024 64 2 16 1337 gpt2_tiny_
for n in "${names[@]}"; do mv -f "$tmp/$n" "$dir/$n"; done
echo "make_reference: wrote ${names[*]} in $dir"
