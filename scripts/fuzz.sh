#!/usr/bin/env bash
# Fuzzes the YAML recipe loader, the command-line/override parser and the GEMM algorithm table
# parser with clang + libFuzzer for a bounded time (~80 s in all), from the seed corpus in
# tests/fuzz/corpus/. Build folder:
# build-fuzz/ (the library is compiled with -fsanitize=fuzzer-no-link for coverage).
# Findings (crash-*, leak-*, timeout-*) land in build-fuzz/findings/ and fail this script.
# FUZZ_SECONDS overrides the time per target.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-25}
if ! command -v clang >/dev/null 2>&1; then
  echo "fuzz: clang not found; scripts/setup.sh installs it" >&2
  exit 1
fi
jobs=$(nproc 2>/dev/null || echo 2)
CC=clang cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DGT_FUZZ=ON -DGT_TESTS=OFF \
  -DGT_CUDA=OFF -DGT_SANITIZE=OFF -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" >/dev/null
targets=(fuzz_yaml fuzz_override fuzz_gemm_table)
cmake --build build-fuzz -j "$jobs" --target "${targets[@]}"
mkdir -p build-fuzz/findings
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/${t#fuzz_}
  work=build-fuzz/corpus-${t#fuzz_}   # new inputs go here; the kept seed corpus stays as is
  mkdir -p "$work"
  dict=tests/fuzz/${t#fuzz_}.dict   # a dictionary of its own, else the YAML one
  [ -f "$dict" ] || dict=tests/fuzz/yaml.dict
  echo "fuzz: $t for ${secs}s (seeds: $seeds)"
  if ! "build-fuzz/$t" "$work" "$seeds" -dict="$dict" -max_total_time="$secs" \
       -timeout=5 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
       -artifact_prefix=build-fuzz/findings/ >"build-fuzz/$t.log" 2>&1; then
    echo "fuzz: $t FAILED; see build-fuzz/$t.log and build-fuzz/findings/" >&2
    tail -40 "build-fuzz/$t.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "build-fuzz/$t.log" | tr '\n' ' '
    echo
  fi
done
exit $status
