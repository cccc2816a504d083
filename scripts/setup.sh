#!/usr/bin/env bash
# Installs what graphtrain needs on a fresh Debian machine (only what is missing) and builds
# it. Used by both README commands and by CI. Build folders: build/ (release, CUDA when nvcc
# is present) and build-asan/ (sanitizers, CPU only, what the tests run).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake make gcc libyaml-dev libcjson-dev libcmocka-dev zlib1g-dev libpcre2-dev \
         libutf8proc-dev clang libclang-rt-14-dev fortunes clang-format clang-tidy cppcheck \
         openmpi-bin libopenmpi-dev; do
  have_pkg "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# nvcc lives outside PATH on some machines
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

jobs=$(nproc 2>/dev/null || echo 2)
build() { # dir, cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}
case "${1:-all}" in
  release) build build -DCMAKE_BUILD_TYPE=Release ;;
  asan)    build build-asan -DCMAKE_BUILD_TYPE=Debug -DGT_SANITIZE=ON -DGT_CUDA=OFF ;;
  all)     build build -DCMAKE_BUILD_TYPE=Release
           build build-asan -DCMAKE_BUILD_TYPE=Debug -DGT_SANITIZE=ON -DGT_CUDA=OFF ;;
  *) echo "usage: scripts/setup.sh [release|asan|all]" >&2; exit 2 ;;
esac
