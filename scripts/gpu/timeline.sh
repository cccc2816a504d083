# Sourced by scripts/gpu.sh: `scripts/gpu.sh timeline`, kernel time against idle gaps in
# replayed full-iteration graphs: each workload trains a few steps under the CUPTI tracer
# (dev/cuda/kernel_trace.c, staged by `scripts/gpu.sh build` as build-gpu-run/lib/
# libgt_kernel_trace.so), then scripts/gpu/timeline_gaps.py splits the trace into replays.
# Env: TIMELINE_WORKLOADS (default "tiny gpt124m"), TIMELINE_ARGS (extra key=value overrides).
# Writes $OUT/timeline.log (default /tmp/gt-timeline) and the traces.
# shellcheck shell=bash
gpu_env
gpu_need_binary || exit 2
OUT=${OUT:-/tmp/gt-timeline}; mkdir -p "$OUT"
LIB=$PWD/$BUILD/lib/libgt_kernel_trace.so
if [ ! -f "$LIB" ]; then
  echo "gpu.sh timeline: $LIB is missing: scripts/gpu.sh build makes it where the CUDA toolkit has CUPTI (cupti.h)" | tee -a "$OUT/timeline.log"
  exit 1
fi
for w in ${TIMELINE_WORKLOADS:-tiny gpt124m}; do
  echo "== $w ${TIMELINE_ARGS:-}" | tee -a "$OUT/timeline.log"
  # shellcheck disable=SC2086 # TIMELINE_ARGS is word-split on purpose
  CUDA_INJECTION64_PATH=$LIB GT_KERNEL_TRACE=$OUT/trace_$w.csv timeout 150 \
    "$GT" train --recipe "$w" train.train_iters=24 logger.log_interval=100 \
    ${TIMELINE_ARGS:-} >"$OUT/run_$w.log" 2>&1
  echo "train rc=$?" | tee -a "$OUT/timeline.log"
  python3 scripts/gpu/timeline_gaps.py "$OUT/trace_$w.csv" 2>&1 | tee -a "$OUT/timeline.log"
  gzip -f "$OUT/trace_$w.csv"
done
