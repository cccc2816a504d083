#!/usr/bin/env bash
# Checks the chunked SSD kernels' index math without a GPU: compiles backend/cuda/k_mamba_ssd.cu
# with g++ against the host stand-in emu_cuda_common.hpp, runs it at a few shapes (ragged last chunks,
# groups, chunk lengths 8..256, tiles past 64) and compares y and every gradient with PyTorch
# autograd of the sequential recurrence (needs torch and numpy). Errors around 1e-6 (fp32 sums)
# pass; an indexing bug shows as O(1). Slow: a thread per CUDA thread.
set -euo pipefail
cd "$(dirname "$0")"
root=../..
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# the stand-in takes cuda_common.cuh's place on the include path (kept as .hpp: not a kernel file)
mkdir -p "$out/include/backend/cuda"
cp emu_cuda_common.hpp "$out/include/backend/cuda/cuda_common.cuh"
g++ -std=c++20 -O1 -pthread -I"$out/include" -I"$root" -I"$root/include" -x c++ \
  "$root/backend/cuda/k_mamba_ssd.cu" -x c++ ssd_harness.cpp -o "$out/ssd_harness"
for s in "2 37 4 8 2 16 16" "1 50 3 6 3 40 8" "1 70 4 5 2 9 32" "1 300 4 64 2 128 128" \
         "1 520 2 32 1 64 256"; do
  # shellcheck disable=SC2086 # the shape is word-split on purpose
  "$out/ssd_harness" $s "$out/o.bin" && python3 ssd_compare.py $s "$out/o.bin"
done
