# Sourced by scripts/gpu.sh: the one environment setup of every GPU-machine subcommand, and the
# small helpers they share. Nothing runs on sourcing; gpu_env does the work.
# shellcheck shell=bash

# gpu_env [PREFERRED_BUILD_DIR]: finds the carried build and sets up the environment to run it.
#   BUILD: PREFERRED_BUILD_DIR when it holds graphtrain (check prefers the full build-gpu/, whose
#     ctest files it can use), else the run folder $GT_GPU_RUN_DIR (default build-gpu-run),
#     unpacked first from $GT_GPU_PACK_DIR/run.tar.xz (default build-gpu-pack: the binaries
#     exceed what a device call carries unpacked) when it is not there yet; GT=$BUILD/graphtrain.
#   LD_LIBRARY_PATH: BUILD/lib (cmocka, CUPTI), cuDNN and NCCL from python's nvidia packages,
#     GT_CARRY_LIB (extra folders, optional), the CUDA toolkit (its cuBLAS first: the one the
#     build links), then the packages' cuBLAS, then the path as it was.
#   GT_PY_LD_LIBRARY_PATH and PYRUN (a command prefix): python with the library path as it was
#     before, since torch brings its own libraries. PY: the python (PYTHON, default python3).
#   GT_SOURCE_DIR, GT_RECIPE_DIR (the tree's recipes/), PATH (+ CUDA tools, python's folder).
#   GT_WRAPPED: a script that runs $GT with its library path, for python scripts under PYRUN.
gpu_env() {
  local want=${1:-}
  local run=${GT_GPU_RUN_DIR:-build-gpu-run} pack=${GT_GPU_PACK_DIR:-build-gpu-pack}
  if [ -n "$want" ] && [ -x "$want/graphtrain" ]; then
    BUILD=$want
  else
    BUILD=$run
    if [ ! -x "$BUILD/graphtrain" ] && [ -f "$pack/run.tar.xz" ]; then
      tar -xJf "$pack/run.tar.xz"
    fi
  fi
  GT=$PWD/$BUILD/graphtrain
  PY=${PYTHON:-python3}
  GT_PY_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  # shellcheck disable=SC2034 # read by the subcommands (check, side-by-side)
  PYRUN=(env "LD_LIBRARY_PATH=$GT_PY_LD_LIBRARY_PATH" "$PY")
  local nv
  nv=$("$PY" -c 'import nvidia; print(nvidia.__path__[0])' 2>/dev/null || true)
  # NCCL (dist/comm_nccl.c) is loaded by its soname, libnccl.so.2, from the packages' folder:
  # the pack never carries it; NCCL_HOME lets a build on this machine find its headers
  if [ -n "$nv" ] && [ -d "$nv/nccl/lib" ] && [ -z "${NCCL_HOME:-}" ]; then
    export NCCL_HOME=$nv/nccl
  fi
  local libs="$PWD/$BUILD/lib${nv:+:$nv/cudnn/lib:$nv/nccl/lib}${GT_CARRY_LIB:+:$GT_CARRY_LIB}"
  export LD_LIBRARY_PATH="$libs:/usr/local/cuda/lib64${nv:+:$nv/cublas/lib}${GT_PY_LD_LIBRARY_PATH:+:$GT_PY_LD_LIBRARY_PATH}"
  local pybin
  pybin=$(dirname "$(command -v "$PY" || echo /usr/bin/python3)")
  export PATH="$PATH:/usr/local/cuda/bin:$pybin"
  export GT_SOURCE_DIR=$PWD GT_RECIPE_DIR=$PWD/recipes
  export GT_PY_LD_LIBRARY_PATH
  # GT_WRAPPED: graphtrain for python scripts that run it (bench/hf_parity.py --graphtrain):
  # under PYRUN python has the library path as it was (torch brings its own libraries), which
  # a graphtrain it starts would inherit and lack cuDNN, cJSON, ...; the wrapper sets graphtrain's
  GT_WRAPPED=$PWD/$BUILD/graphtrain-wrapped
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "'$LD_LIBRARY_PATH'" "'$GT'" >"$GT_WRAPPED"
  chmod +x "$GT_WRAPPED"
}

# gpu_need_binary: fails with the fix when no graphtrain was found (nothing carried)
gpu_need_binary() {
  if [ ! -x "$GT" ]; then
    echo "gpu.sh: no $GT: run scripts/gpu.sh build on the development machine and carry" \
      "${GT_GPU_PACK_DIR:-build-gpu-pack} (or $BUILD)" >&2
    return 2
  fi
}

# gpu_header FILE: the time and the GPU, first lines of a summary (appended)
gpu_header() {
  { date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi --query-gpu=name --format=csv,noheader; } | tee -a "$1"
}
