#!/usr/bin/env bash
# Lints the C and CUDA sources as STYLE.md asks: clang-format (check only), cppcheck, then
# clang-tidy (.clang-tidy at the root), the kernels' PDL entry and the layer order of the
# includes, failing on any finding. scripts/test.sh runs it after the
# build. clang-tidy reads build-lint/ (configured with clang, CPU only; nothing is compiled).
# Fix a finding in the code; silence a proven false positive only at its line, with a reason.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian 12's tools; another clang-format version may lay code out differently
fmt=clang-format-14
command -v "$fmt" >/dev/null 2>&1 || fmt=clang-format
tidy=clang-tidy-14
command -v "$tidy" >/dev/null 2>&1 || tidy=clang-tidy
for t in "$fmt" cppcheck "$tidy" clang; do
  if ! command -v "$t" >/dev/null 2>&1; then
    echo "lint: $t not found; scripts/setup.sh installs it" >&2
    exit 1
  fi
done
jobs=$(nproc 2>/dev/null || echo 2)
status=0
t0=$SECONDS

# The project's C and CUDA files, dev/ included; the fuzz corpus holds inputs, not code.
mapfile -t files < <(find config core backend data model graphs train dist bench cli include tests dev \
  -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
  -not -path 'tests/fuzz/corpus/*' | LC_ALL=C sort)
csrcs=()
for f in "${files[@]}"; do [[ $f == *.c ]] && csrcs+=("$f"); done

# ---- 1. formatting: `clang-format -i FILE` fixes what this reports ----
echo "lint: $fmt --dry-run over ${#files[@]} files"
if ! "$fmt" --dry-run -Werror "${files[@]}"; then
  echo "lint: formatting differs; run: $fmt -i <file>" >&2
  status=1
fi

# ---- 2. cppcheck over every .c (CUDA host files and GPU tests included) ----
# scripts/lint/cmocka.cfg tells cppcheck that cmocka's fail_msg/skip do not return.
# Suppressions are inline only (`// cppcheck-suppress id ; reason`), none global.
echo "lint: cppcheck over ${#csrcs[@]} C files"
if ! cppcheck --enable=warning,performance,portability --error-exitcode=1 --inline-suppr \
     -I . -I include -I tests/support --std=c11 --library=scripts/lint/cmocka.cfg -q -j "$jobs" "${csrcs[@]}"; then
  echo "lint: cppcheck found problems (above)" >&2
  status=1
fi

# ---- 3. clang-tidy over the .c files of a CPU-only configure (fuzz targets included) ----
# Its own folder with clang: the gcc build's flags (-Wno-format-truncation) are unknown to clang.
CC=clang cmake -S . -B build-lint -DCMAKE_C_COMPILER=clang -DGT_CUDA=OFF -DGT_FUZZ=ON \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
root=$(pwd)
mapfile -t tsrcs < <(sed -n 's/^ *"file": "\(.*\)",*$/\1/p' build-lint/compile_commands.json |
  grep "^$root/.*\.c\$" | LC_ALL=C sort -u)
echo "lint: $tidy over ${#tsrcs[@]} C files (-j $jobs)"
log=build-lint/clang-tidy.log
# clang-tidy prints its findings on stdout and "N warnings generated" chatter on stderr
if ! printf '%s\n' "${tsrcs[@]}" |
     xargs -P "$jobs" -n 4 "$tidy" -p build-lint --quiet >"$log" 2>/dev/null; then
  cat "$log"
  echo "lint: clang-tidy found $(grep -c ': error: ' "$log") problems (above; .clang-tidy" \
       "says which checks run)" >&2
  status=1
fi

# ---- 4. every CUDA kernel waits for its predecessor before touching memory ----
# gt_launch lets a kernel start while the one before it still runs (programmatic dependent
# launch); only its first statement, GT_PDL_ENTRY(), makes that safe (cuda_common.cuh).
mapfile -t cus < <(printf '%s\n' "${files[@]}" | grep -E '\.cuh?$')
echo "lint: GT_PDL_ENTRY first in every kernel of ${#cus[@]} CUDA files"
if ! awk 'FNR == 1 { g = 0 }
          /__global__/ { g = 1 }
          g == 1 && /\{[[:space:]]*$/ { g = 2; next }
          g == 2 { if ($0 !~ /^[[:space:]]*GT_PDL_ENTRY\(\);/) {
                     print FILENAME ":" FNR ": a kernel whose first statement is not GT_PDL_ENTRY();"
                     bad = 1 }
                   g = 0 }
          END { exit bad }' "${cus[@]}"; then
  echo "lint: start each kernel with GT_PDL_ENTRY(); (backend/cuda/cuda_common.cuh says why)" >&2
  status=1
fi

# ---- 5. the layer order (docs/design.md): no include points up a layer ----
echo "lint: layer order of the includes (scripts/lint/layers.sh)"
if ! scripts/lint/layers.sh; then
  echo "lint: an include points up a layer (above); scripts/lint/layers.sh states the rule" >&2
  status=1
fi

if [ "$status" -eq 0 ]; then
  echo "lint: clean ($((SECONDS - t0)) s)"
fi
exit "$status"
