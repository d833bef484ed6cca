#!/usr/bin/env bash
# Every test: installs what is missing, builds the plain and the sanitizer (address+undefined)
# variants, runs the fuzz targets (clang's libFuzzer, about 20 s each), then all the tests
# with ctest. The last line is ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
# PyTorch (Debian's python3-torch) makes the reference states of test_verify_torch
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  echo "test: installing python3-torch (PyTorch references for hptrain verify)" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq python3-torch >/dev/null
fi
scripts/setup.sh build-test -DHPT_SANITIZE=ON
# The fuzz targets under libFuzzer (clang; tests/fuzz/fuzz.cmake): each reader about 20 s from
# its seeds. Skipped, with a note, where clang is missing.
if command -v clang >/dev/null; then
  cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DHPT_FUZZ=ON -DHPT_SANITIZE=OFF -DHPT_CUDA=OFF >/dev/null
  cmake --build build-fuzz -j"$(nproc)" 2>&1 | grep -E "error" || true
  (cd build-fuzz && ctest --output-on-failure --timeout 300)
else
  echo "test: no clang: the fuzz targets run only as replays of their seeds and regressions" >&2
fi
cd build-test
ctest --output-on-failure --timeout 1500
