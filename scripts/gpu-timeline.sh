#!/usr/bin/env bash
# Kernel time against idle gaps in replayed full-iteration graphs: each workload trains a few
# steps under the CUPTI tracer (scripts/kernel_trace, staged by scripts/gpu-build.sh as
# build-gpu-run/lib/libgt_kernel_trace.so), then scripts/timeline_gaps.py splits the trace into
# replays. Carry build-gpu-run. Env: TIMELINE_WORKLOADS (default "tiny gpt124m"),
# TIMELINE_ARGS (extra key=value overrides). Writes $OUT/timeline.log and the traces.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gt-timeline}; mkdir -p "$OUT"
source scripts/gpu-env.sh
LIB=$PWD/build-gpu-run/lib/libgt_kernel_trace.so
if [ ! -f "$LIB" ]; then
  echo "gpu-timeline: $LIB is missing: scripts/gpu-build.sh builds it where cupti.h is" | tee -a "$OUT/timeline.log"
  exit 1
fi
for w in ${TIMELINE_WORKLOADS:-tiny gpt124m}; do
  echo "== $w ${TIMELINE_ARGS:-}" | tee -a "$OUT/timeline.log"
  # shellcheck disable=SC2086 # TIMELINE_ARGS is word-split on purpose
  CUDA_INJECTION64_PATH=$LIB GT_KERNEL_TRACE=$OUT/trace_$w.csv timeout 150 \
    build-gpu-run/graphtrain train --recipe "$w" train.train_iters=24 logger.log_interval=100 \
    ${TIMELINE_ARGS:-} >"$OUT/run_$w.log" 2>&1
  echo "train rc=$?" | tee -a "$OUT/timeline.log"
  python3 scripts/timeline_gaps.py "$OUT/trace_$w.csv" 2>&1 | tee -a "$OUT/timeline.log"
  gzip -f "$OUT/trace_$w.csv"
done
