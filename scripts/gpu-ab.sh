#!/usr/bin/env bash
# Side-by-side variants of graphtrain bench on the GPU machine, in one call so that they share
# the machine's state: each line of AB_VARIANTS is "label|VAR=value ...|binary|extra args"
# (environment settings may be empty; binary relative to the repository, e.g.
# build-gpu-run/graphtrain, or a second build of an older commit),
# run on each workload of AB_WORKLOADS (default "tiny gpt124m llama1b moe") in AB_ROUNDS
# (default 1) interleaved rounds. Carry the binaries' folder. Logs and summary.txt under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gt-ab}; mkdir -p "$OUT"
source scripts/gpu-env.sh
S=$OUT/summary.txt
: "${AB_VARIANTS:?set AB_VARIANTS to lines of label|env|binary|extra args}"
{ date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi --query-gpu=name --format=csv,noheader; } | tee -a "$S"
for round in $(seq 1 "${AB_ROUNDS:-1}"); do
  for w in ${AB_WORKLOADS:-tiny gpt124m llama1b moe}; do
    while IFS='|' read -r label envs bin args; do
      [ -z "$label" ] && continue
      log="$OUT/ab_${w}_${label}_r$round.log"
      # shellcheck disable=SC2086 # envs and args are word-split on purpose
      timeout 150 env $envs "$bin" bench --recipe "$w" --modes "${AB_MODES:-full_iteration}" --steps "${AB_STEPS:-30}" \
        --warmup 3 $args >"$log" 2>&1
      echo "round $round $w $label rc=$? $(grep -E '^(eager|full_iteration) ' "$log" | awk '{printf "%s %s ms (min %s)  ", $1, $2, $3}')" | tee -a "$S"
    done <<<"$AB_VARIANTS"
  done
done
