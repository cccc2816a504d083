#!/usr/bin/env bash
# Downloads torchao wheels for the GPU machine (python 3.12, torch 2.11, no internet there) into
# third_party/torchao/ (ignored by git), for bench/torch_reference.py's torchao_fp8 mode. Which
# torchao release pairs with torch 2.11 is settled there: install one and try it.
#   bash scripts/fetch_torchao.sh [VERSION ...]     (default: the releases around torch 2.11)
# On the GPU machine:
#   pip install --no-deps third_party/torchao/torchao-<VERSION>-*.whl
#   python3 -c "import torchao.float8"              (a warning about torch's version: try another)
set -euo pipefail
cd "$(dirname "$0")/.."
out=third_party/torchao
mkdir -p "$out"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(0.16.0 0.17.0)
got=0
for v in "${versions[@]}"; do
    # wheels only, for CPython 3.12 on x86-64 Linux (torchao ships pure-python and abi3 wheels)
    if python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
        --dest "$out" "torchao==$v"; then
        got=$((got + 1))
    else
        echo "fetch_torchao: torchao $v has no wheel for python 3.12 x86-64; skipped" >&2
    fi
done
[ "$got" -gt 0 ] || { echo "fetch_torchao: no wheel downloaded" >&2; exit 1; }
ls -l "$out"
echo "carry $out to the GPU machine; install one with pip install --no-deps (see the top of $0)"
