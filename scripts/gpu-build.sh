#!/usr/bin/env bash
# Builds the CUDA-enabled release build into build-gpu/ on the development machine (nvcc and
# the CUDA libraries are enough; no GPU needed) and stages what the GPU machine lacks into
# build-gpu/lib (cmocka's shared library), so `build-gpu` alone can be carried and run there.
# Usage: scripts/gpu-build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${GT_GPU_BUILD_DIR:-build-gpu}
JOBS=${GT_JOBS:-2}
cmake -S . -B "$BUILD" -DGT_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DGT_SANITIZE=OFF \
  -DCMAKE_C_FLAGS="${GT_GPU_CFLAGS:-}" "$@" >/dev/null
cmake --build "$BUILD" -j"$JOBS"
# shared libraries the GPU machine does not have (libyaml is linked statically already)
mkdir -p "$BUILD/lib"
for lib in libcmocka.so.0; do
  src=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')
  if [ -z "$src" ]; then
    echo "gpu-build: $lib not found; install it with apt-get install libcmocka0" >&2
    exit 1
  fi
  cp -L "$src" "$BUILD/lib/$lib"
done
# everything that must not travel: object files, cmake state
echo "gpu-build: built $BUILD; carry it with size $(du -sh --exclude='*.o' "$BUILD" | cut -f1)"
