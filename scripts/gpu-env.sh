# Sourced by the scripts/gpu-*.sh scripts on the GPU machine, from the repository root:
#   source scripts/gpu-env.sh [BUILD_DIR]      (BUILD_DIR defaults to build-gpu-run)
# Sets the library path for the carried build:
#   1. BUILD_DIR/lib;
#   2. cuDNN and NCCL from python's nvidia packages;
#   3. the CUDA toolkit (its cuBLAS 13 first, the one the build links);
#   4. the packages' cuBLAS.
# Also sets GT_SOURCE_DIR and GT_RECIPE_DIR, and adds the CUDA tools to PATH.
# GT_PY_LD_LIBRARY_PATH keeps the library path as it was before, for python: torch brings its
# own libraries.
# carried as scripts/gpu-build.sh's xz pack (the binaries exceed what a call carries): unpack
if [ ! -x "${1:-build-gpu-run}/graphtrain" ] && [ -f build-gpu-pack/run.tar.xz ]; then
  tar -xJf build-gpu-pack/run.tar.xz
fi
GT_PY_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
NV=$(${PYTHON:-python3} -c 'import nvidia, os; print(nvidia.__path__[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH="$PWD/${1:-build-gpu-run}/lib${NV:+:$NV/cudnn/lib:$NV/nccl/lib}:/usr/local/cuda/lib64${NV:+:$NV/cublas/lib}${GT_PY_LD_LIBRARY_PATH:+:$GT_PY_LD_LIBRARY_PATH}"
export GT_SOURCE_DIR=$PWD GT_RECIPE_DIR=$PWD/recipes PATH=$PATH:/usr/local/cuda/bin
