# Sourced by scripts/gpu.sh: `scripts/gpu.sh ncu RECIPE REGEX [COUNT]`, a detailed ncu report
# (speed of light, occupancy, warp stalls, memory and compute workload) of the first COUNT
# (default 3) launches of the kernels matching REGEX in one eager training step of RECIPE, at
# real clocks. Writes $OUT/ncu_<recipe>.txt (default /tmp/gt-ncu).
# shellcheck shell=bash
if [ $# -lt 2 ]; then
  echo "usage: scripts/gpu.sh ncu RECIPE REGEX [COUNT]" >&2
  exit 2
fi
gpu_env
gpu_need_binary || exit 2
OUT=${OUT:-/tmp/gt-ncu}; mkdir -p "$OUT"
timeout 300 ncu --clock-control none -k "regex:$2" --launch-count "${3:-3}" \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
  "$GT" train --recipe "$1" model.cuda_graph_impl=none train.train_iters=1 \
  logger.log_interval=1 >"$OUT/ncu_$1.txt" 2>&1
echo "gpu.sh ncu: rc=$? report in $OUT/ncu_$1.txt"
