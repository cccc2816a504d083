#!/usr/bin/env bash
# Builds the CUDA-enabled release build into build-gpu/ on the development machine (nvcc and
# the CUDA libraries are enough; no GPU needed) and stages into build-gpu-run/ the binaries
# the GPU machine runs plus the shared libraries it lacks (cmocka, cJSON), so that folder alone can
# be carried there.
# Usage: scripts/gpu-build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${GT_GPU_BUILD_DIR:-build-gpu}
JOBS=${GT_JOBS:-2}
cmake -S . -B "$BUILD" -DGT_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DGT_SANITIZE=OFF \
  -DCMAKE_C_FLAGS="${GT_GPU_CFLAGS:-}" "$@" >/dev/null
cmake --build "$BUILD" -j"$JOBS"
# The run folder: what the GPU machine needs and lacks, small enough to carry (the build tree
# with every CPU test is not): the binary, the GPU tests and the shared libraries missing
# there (libyaml is linked statically already; cmocka is not).
RUN=${GT_GPU_RUN_DIR:-build-gpu-run}
rm -rf "$RUN"
mkdir -p "$RUN/lib"
cp "$BUILD/graphtrain" "$BUILD"/gpu_test_* "$RUN/"
for lib in libcmocka.so.0 libcjson.so.1; do
  src=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !found {print $NF; found = 1}')
  if [ -z "$src" ]; then
    echo "gpu-build: $lib not found; run scripts/setup.sh (it installs libcmocka-dev and libcjson-dev)" >&2
    exit 1
  fi
  cp -L "$src" "$RUN/lib/$lib"
done
# the CUPTI tracer of scripts/gpu-timeline.sh, where the toolkit has CUPTI (optional)
CUDA_ROOT=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
CUPTI_LIB=$(ls "$CUDA_ROOT"/lib64/libcupti.so.* "$CUDA_ROOT"/lib/libcupti.so.* \
  "$CUDA_ROOT"/extras/CUPTI/lib64/libcupti.so.* 2>/dev/null | head -1 || true)
if [ -f "$CUDA_ROOT/include/cupti.h" ] && [ -n "$CUPTI_LIB" ]; then
  if gcc -std=c11 -O2 -Wall -Wextra -shared -fPIC scripts/kernel_trace/kernel_trace.c \
    -I"$CUDA_ROOT/include" "$CUPTI_LIB" -o "$RUN/lib/libgt_kernel_trace.so"; then
    cp -L "$CUPTI_LIB" "$RUN/lib/"
  else
    echo "gpu-build: the CUPTI tracer did not build; scripts/gpu-timeline.sh will say so" >&2
  fi
fi
# the cuBLASLt algorithm sweep (scripts/gemm_sweep): how far the heuristic's first answer is
# from its best one, per GEMM shape of a workload
gcc -std=c11 -O2 -Wall -Wextra scripts/gemm_sweep/gemm_sweep.c -I"$CUDA_ROOT/include" \
  -L"$CUDA_ROOT/lib64" -L"$CUDA_ROOT/lib" -lcublasLt -lcudart -o "$RUN/gemm_sweep" ||
  echo "gpu-build: gemm_sweep did not build (cuBLASLt not under $CUDA_ROOT); the rest is staged" >&2
# the variants of those algorithms beyond the heuristic's 8 (scripts/gemm_sweep/gemm_variants.c)
gcc -std=c11 -O2 -Wall -Wextra scripts/gemm_sweep/gemm_variants.c -I"$CUDA_ROOT/include" \
  -L"$CUDA_ROOT/lib64" -L"$CUDA_ROOT/lib" -lcublasLt -lcudart -o "$RUN/gemm_variants" ||
  echo "gpu-build: gemm_variants did not build (cuBLASLt not under $CUDA_ROOT); the rest is staged" >&2
# the backend's warpgroup-MMA grouped GEMMs run as dense GEMMs against cuBLASLt, per GEMM shape
# of a workload (scripts/gemm_sweep/own_vs_lt.cu): where graphtrain's own GEMMs stand
nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I. scripts/gemm_sweep/own_vs_lt.cu \
  -lcublasLt -o "$RUN/own_vs_lt" ||
  echo "gpu-build: own_vs_lt did not build; the rest is staged" >&2
# every layer's weight gradient one GEMM at a time against one strided-batched GEMM per weight
# (scripts/gemm_sweep/wgrad_batch.cu): what the backend's batch_pays rule rests on
nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I. scripts/gemm_sweep/wgrad_batch.cu \
  -lcublasLt -o "$RUN/wgrad_batch" ||
  echo "gpu-build: wgrad_batch did not build; the rest is staged" >&2
echo "gpu-build: built $BUILD, staged $RUN ($(du -sh "$RUN" | cut -f1)); on the GPU machine run"
echo "  scripts/gpu-check-ops.sh   (carry $RUN)"
# The run folder as one xz archive: the test binaries and graphtrain carry the backend's
# kernels each and no longer fit the 64 MiB a device call carries. Carry build-gpu-pack and
# unpack it there first: tar -xJf build-gpu-pack/run.tar.xz
PACK=${GT_GPU_PACK_DIR:-build-gpu-pack}
mkdir -p "$PACK"
tar -cJf "$PACK/run.tar.xz" "$RUN"
echo "gpu-build: packed $RUN into $PACK/run.tar.xz ($(du -h "$PACK/run.tar.xz" | cut -f1)); carry $PACK and unpack it there with tar -xJf $PACK/run.tar.xz"
