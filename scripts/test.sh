#!/usr/bin/env bash
# The README's test command: set up, build (release with CUDA when nvcc is present, and a
# sanitizer build), lint (scripts/lint.sh: clang-format, cppcheck, clang-tidy), run the fuzzers
# for a bounded time, then every CPU test under ctest in the sanitizer build. GPU tests (label
# `gpu`) run on the GPU machine: scripts/gpu.sh check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh all
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
jobs=$(nproc 2>/dev/null || echo 2)
bash scripts/lint.sh
# fuzzers first so that ctest's summary is the last thing printed
if [ -x scripts/fuzz.sh ]; then bash scripts/fuzz.sh; fi
ctest --test-dir build-asan --output-on-failure -LE gpu -j "$jobs"
