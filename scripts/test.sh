#!/usr/bin/env bash
# Every test: installs what is missing, builds the plain and the sanitizer (address+undefined)
# variants, runs them all with ctest. The last line is ctest's summary.
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
cd build-test
ctest --output-on-failure --timeout 1500
