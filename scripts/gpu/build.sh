# Sourced by scripts/gpu.sh: `scripts/gpu.sh build [extra cmake -D options]`, on the development
# machine (nvcc and the CUDA libraries are enough; no GPU needed). Builds the CUDA-enabled
# release build with the dev/ tools (-DGT_DEV=ON) into build-gpu/ and stages into build-gpu-run/
# what the GPU machine runs and lacks, then packs that folder as build-gpu-pack/run.tar.xz.
# shellcheck shell=bash
set -euo pipefail
BUILD=${GT_GPU_BUILD_DIR:-build-gpu}
JOBS=${GT_JOBS:-2}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# GT_MPI=OFF: the MPI collectives serve CPU-backend worlds only (dist/), and the binary must not
# need this machine's libmpi there
cmake -S . -B "$BUILD" -DGT_CUDA=ON -DGT_DEV=ON -DGT_MPI=OFF -DCMAKE_BUILD_TYPE=Release -DGT_SANITIZE=OFF \
  -DCMAKE_C_FLAGS="${GT_GPU_CFLAGS:-}" "$@" >/dev/null
cmake --build "$BUILD" -j"$JOBS"
# The run folder: what the GPU machine needs and lacks, small enough to carry (the build tree
# with every CPU test is not): the binary, the GPU tests, the dev/ tools, the recipes the binary
# was built with (so that an A/B run of an older pack reads its own), and the shared libraries
# missing there (libyaml and PCRE2 are linked statically already; cmocka and cJSON are not).
RUN=${GT_GPU_RUN_DIR:-build-gpu-run}
rm -rf "$RUN"
mkdir -p "$RUN/lib"
cp "$BUILD/graphtrain" "$BUILD"/gpu_test_* "$RUN/"
cp -r recipes "$RUN/recipes"
for lib in libcmocka.so.0 libcjson.so.1; do
  src=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !found {print $NF; found = 1}')
  if [ -z "$src" ]; then
    echo "gpu.sh build: $lib not found; install it with apt-get install libcmocka0 libcjson1" >&2
    exit 1
  fi
  cp -L "$src" "$RUN/lib/$lib"
done
# the dev/ tools (dev/CMakeLists.txt): the cuBLASLt sweeps (gemm_sweep, gemm_variants), the
# block-scaled fp8 probe (blockwise_probe), the Mamba conv/norm timings (mamba_ew_bench), the
# own GEMMs against cuBLASLt (own_vs_lt), the batched weight gradients (wgrad_batch), the
# per-tensor fp8 casts' bandwidth (fp8_cast_bench)
for tool in gemm_sweep gemm_variants blockwise_probe mamba_ew_bench own_vs_lt wgrad_batch fp8_cast_bench; do
  if [ -x "$BUILD/dev/$tool" ]; then
    cp "$BUILD/dev/$tool" "$RUN/"
  else
    echo "gpu.sh build: dev tool $tool was not built; the rest is staged" >&2
  fi
done
# the CUPTI tracer of `scripts/gpu.sh timeline` and the CUPTI it links, where the toolkit has it
if [ -f "$BUILD/dev/libgt_kernel_trace.so" ]; then
  cp "$BUILD/dev/libgt_kernel_trace.so" "$RUN/lib/"
  cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
  cupti=$(ls "$cuda_root"/lib64/libcupti.so.* "$cuda_root"/lib/libcupti.so.* \
    "$cuda_root"/extras/CUPTI/lib64/libcupti.so.* 2>/dev/null | head -1 || true)
  if [ -n "$cupti" ]; then cp -L "$cupti" "$RUN/lib/"; fi
else
  echo "gpu.sh build: no CUPTI tracer (the toolkit lacks CUPTI); scripts/gpu.sh timeline will say so" >&2
fi
echo "gpu.sh build: built $BUILD, staged $RUN ($(du -sh "$RUN" | cut -f1))"
# The run folder as one xz archive: the test binaries and graphtrain carry the backend's
# kernels each and no longer fit the 64 MiB a device call carries. A dictionary larger than
# one binary lets xz store the binaries' shared part once (a tenth of the default's size).
# Carry build-gpu-pack; every GPU-machine subcommand unpacks it first (scripts/gpu/env.sh).
PACK=${GT_GPU_PACK_DIR:-build-gpu-pack}
mkdir -p "$PACK"
tar -cf - "$RUN" | xz -T"${GT_JOBS:-2}" --lzma2=preset=6,dict=192MiB >"$PACK/run.tar.xz"
echo "gpu.sh build: packed $RUN into $PACK/run.tar.xz ($(du -h "$PACK/run.tar.xz" | cut -f1));" \
  "carry $PACK and run scripts/gpu.sh check (or ops, quick, ab, ...) on the GPU machine"
