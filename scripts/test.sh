#!/usr/bin/env bash
# Every test: installs what is missing, builds the plain and the sanitizer (address+undefined)
# variants, runs them all with ctest. The last line is ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build-test -DHPT_SANITIZE=ON
cd build-test
ctest --output-on-failure --timeout 1500
