#!/usr/bin/env bash
# Detailed ncu report (speed of light, occupancy, warp stalls, memory and compute workload) of
# the first COUNT launches of the kernels matching REGEX in one eager training step of RECIPE,
# at real clocks. Carry build-gpu-run (scripts/gpu-build.sh). Writes $OUT/ncu_<recipe>.txt.
# Usage: scripts/gpu-ncu-kernel.sh RECIPE REGEX [COUNT]
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: scripts/gpu-ncu-kernel.sh RECIPE REGEX [COUNT]" >&2
  exit 2
fi
OUT=${OUT:-/tmp/gt-ncu}; mkdir -p "$OUT"
source scripts/gpu-env.sh
timeout 300 ncu --clock-control none -k "regex:$2" --launch-count "${3:-3}" \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
  ./build-gpu-run/graphtrain train --recipe "$1" model.cuda_graph_impl=none train.train_iters=1 \
  logger.log_interval=1 >"$OUT/ncu_$1.txt" 2>&1
echo "gpu-ncu-kernel: rc=$? report in $OUT/ncu_$1.txt"
