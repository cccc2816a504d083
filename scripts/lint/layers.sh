#!/usr/bin/env bash
# The layer rule of the design (dependencies point down): a file in layer folder Y may include
# "X/..." only when X is Y or below it. Order: core < config < backend < data < model < graphs
# < dist < train < bench < cli (backend/cpu and backend/cuda are backend). include/graphtrain.h,
# the public API, includes no header of the tree, and any folder may include it. tests/api/
# uses the public header only; the rest of tests/ and dev/ (test and playground code, never part
# of the library) may include any layer. Prints each include that points up; exits 1 if any.
# Usage: scripts/lint/layers.sh [root]  (scripts/lint.sh runs it; root defaults to the repo)
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

order=(core config backend data model graphs dist train bench cli)
mapfile -t files < <(find "${order[@]}" include tests/api -type f \
  \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | LC_ALL=C sort)
[ "${#files[@]}" -gt 0 ] || exit 0
awk -v order="${order[*]}" '
  BEGIN { n = split(order, o, " "); chain = o[1]
          for (i = 1; i <= n; i++) { rank[o[i]] = i; if (i > 1) chain = chain " < " o[i] } }
  FNR == 1 { split(FILENAME, p, "/"); from = p[1]; if (from == "tests") from = "tests/api" }
  /^[[:space:]]*#[[:space:]]*include[[:space:]]*"/ {
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
    if (index(inc, "/") == 0) next            # a header beside the file, or graphtrain.h
    split(inc, q, "/"); to = q[1]
    if (!(to in rank)) next                   # not a layer folder (e.g. a system path)
    if (from == "include" || from == "tests/api") {
      print FILENAME ":" FNR ": " from "/ includes \"" inc "\"; it may use only the public " \
            "header graphtrain.h"
      bad = 1
    } else if (rank[to] > rank[from]) {
      print FILENAME ":" FNR ": " from "/ includes \"" inc "\", a layer above it (" chain \
            "); move the code or the declaration down"
      bad = 1
    }
  }
  END { exit bad }' "${files[@]}"
