#!/usr/bin/env bash
# test_calibrate_cuda.sh HPTRAIN: `calibrate --device cuda[:N]` (issue 34, item 2) where there is
# no such GPU (a build without the CUDA backend, CUDA_VISIBLE_DEVICES empty, GPU 1023): refused in
# one line "no CUDA device: ...", status non-zero, the CPU's calibration file untouched and no
# --out file written; a CPU calibration's --offload-dir that is a file or cannot be made is
# refused before anything is measured. Nothing is measured or timed.
set -u
bin=$1
. "$(dirname "$0")/lib.sh" # $tmp, ok, bad, expect_error, finish
export HPT_CALIBRATION=$tmp/cal.json
cp "$(dirname "$0")/calibration_fake.json" "$HPT_CALIBRATION"

CUDA_VISIBLE_DEVICES= expect_error "no GPU visible" "calibrate: no CUDA device: " \
  "$bin" calibrate --device cuda
expect_error "no GPU 1023" "calibrate: no CUDA device: " "$bin" calibrate --device cuda:1023 --quick
expect_error "no GPU, --out" "calibrate: no CUDA device: " \
  "$bin" calibrate --device cuda:1023 --out "$tmp/gpu.json"
[ ! -e "$tmp/gpu.json" ] && ok || bad "a refused GPU calibration wrote $tmp/gpu.json"
cmp -s "$HPT_CALIBRATION" "$(dirname "$0")/calibration_fake.json" && ok ||
  bad "a refused GPU calibration changed the CPU's calibration file"
expect_error "bad device" "device: 'gpu': expected cpu, cuda or cuda:N" "$bin" calibrate --device gpu
# a CPU calibration's --offload-dir that cannot be a directory: refused before anything is measured
: >"$tmp/afile"
expect_error "--offload-dir a file" "calibrate: --offload-dir .*afile is not a directory" \
  timeout 5 "$bin" calibrate --offload-dir "$tmp/afile" --quick
expect_error "--offload-dir uncreatable" "calibrate: --offload-dir .*/no/such: cannot create it" \
  timeout 5 "$bin" calibrate --offload-dir "$tmp/no/such" --quick
cmp -s "$HPT_CALIBRATION" "$(dirname "$0")/calibration_fake.json" && ok ||
  bad "a refused calibration changed the calibration file"
"$bin" calibrate --help | grep -q -- "--device cuda\[:N\]" && ok || bad "calibrate --help has no --device"
finish test_calibrate_cuda
