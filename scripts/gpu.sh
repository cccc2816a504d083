#!/usr/bin/env bash
# The one entry point for GPU work. `build` runs on the development machine (nvcc, no GPU) and
# makes build-gpu-pack/run.tar.xz; carry that folder to the GPU machine, where every other
# subcommand unpacks it and sets up one environment (scripts/gpu/env.sh) before it runs.
# Each subcommand is a file of scripts/gpu/ whose header lists its environment variables.
# Usage: scripts/gpu.sh SUBCOMMAND [ARGS]   (scripts/gpu.sh help lists them)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=scripts/gpu/env.sh
source scripts/gpu/env.sh

usage() {
  cat <<'USAGE'
usage: scripts/gpu.sh SUBCOMMAND [ARGS]
on the development machine:
  build [-DKEY=VALUE ...]  CUDA release build with the dev/ tools into build-gpu/, staged into
                           build-gpu-run/ and packed as build-gpu-pack/run.tar.xz (carry it)
on the GPU machine (results under $OUT):
  check [quick]            the full run: GPU tests, training, bench against PyTorch, parity,
                           memcheck, torch.compile, within GT_CHECK_BUDGET seconds
  quick                    GPU tests and graphtrain bench on the workloads, no PyTorch
  ab [NAME=PACK ...]       AB_VARIANTS (label|env|binary|args lines) side by side in rounds,
                           older builds' packs unpacked into ab-NAME/, losses compared
  ops [quick]              the CUDA backend's GPU tests with every kernel choice, sanitizers
  profile                  per-kernel GPU time of eager steps, MoE GEMM variants
  timeline                 kernel time against idle gaps inside replayed graphs (CUPTI)
  ncu RECIPE REGEX [COUNT] a detailed ncu report of the matching kernels of one eager step
  side-by-side             graphtrain bench and the PyTorch reference in one compact run
USAGE
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
  build | check | quick | ab | ops | profile | timeline | ncu)
    # shellcheck source=/dev/null
    source "scripts/gpu/$cmd.sh"
    ;;
  side-by-side)
    # shellcheck source=scripts/gpu/side_by_side.sh
    source scripts/gpu/side_by_side.sh
    ;;
  help | -h | --help) usage ;;
  *)
    echo "gpu.sh: unknown subcommand '$cmd'" >&2
    usage >&2
    exit 2
    ;;
esac
