#!/usr/bin/env bash
# Runs the CUDA backend's GPU tests on the GPU machine from a carried build-gpu-run/ (made by
# scripts/gpu-build.sh on the development machine): its tests/gpu tests, then again with the
# other kernel choices (GT_CUDA_ATTN=simt|tc, GT_CUDA_MOE=simt|tc), then memcheck and
# racecheck passes (the capture-rejection test makes API errors on purpose: not reported;
# racecheck of the ops test runs with GT_CUDA_ATTN=tc: see below);
# logs and a summary under $OUT. Limits: TEST_LIMIT, SAN_LIMIT, RACE_LIMIT seconds.
# Usage on the GPU machine: scripts/gpu-check-ops.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${GT_GPU_RUN_DIR:-build-gpu-run}
OUT=${OUT:-/tmp/gt-gpu-out}
mkdir -p "$OUT"
source scripts/gpu-env.sh "$BUILD"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$SUMMARY"
date -u | tee -a "$SUMMARY"

run() { # name timeout command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local line
  line=$(printf '%-34s rc=%-3d %4ds  %s' "$name" "$rc" $((SECONDS - t0)) \
    "$(grep -E '^\[  (PASSED|FAILED) \]' "$OUT/$name.log" | tr '\n' ' ')")
  echo "$line" | tee -a "$SUMMARY"
  grep -E '^\[  FAILED  \]|FAILURE|Error|error' "$OUT/$name.log" | head -20 | sed 's/^/    /'
}

# the CUDA backend's tests (GT_GPU_TESTS="..." to choose others from the run folder)
for t in ${GT_GPU_TESTS:-gpu_test_cuda_ops gpu_test_cuda_moe gpu_test_cuda_capture gpu_test_cuda_perf gpu_test_cuda_grad_rows}; do
  run "$t" "${TEST_LIMIT:-240}" "$BUILD/$t"
done
# the fp32 SIMT attention kernels (the tensor-core kernels' fallback) against the CPU too
run "gpu_test_cuda_ops_simt_attention" "${TEST_LIMIT:-240}" env GT_CUDA_ATTN=simt \
  "$BUILD/gpu_test_cuda_ops"
# cuDNN's attention backward (the default on sm_90 pairs cuDNN's forward with the own wgmma one)
run "gpu_test_cuda_ops_cudnn_bwd" "${TEST_LIMIT:-240}" env GT_CUDA_ATTN_BWD=cudnn \
  "$BUILD/gpu_test_cuda_ops"
# and the tensor-core kernels alone (the default routes cuDNN's shapes to cuDNN)
run "gpu_test_cuda_ops_tc_attention" "${TEST_LIMIT:-240}" env GT_CUDA_ATTN=tc \
  "$BUILD/gpu_test_cuda_ops"
run "gpu_test_cuda_perf_tc_attention" "${TEST_LIMIT:-240}" env GT_CUDA_ATTN=tc \
  "$BUILD/gpu_test_cuda_perf"
# the fp32 SIMT grouped GEMMs (the tensor-core ones' reference)
run "gpu_test_cuda_moe_simt_gemm" "${TEST_LIMIT:-240}" env GT_CUDA_MOE=simt \
  "$BUILD/gpu_test_cuda_moe"
run "gpu_test_cuda_perf_simt_gemm" "${TEST_LIMIT:-240}" env GT_CUDA_MOE=simt GT_CUDA_ATTN=tc \
  "$BUILD/gpu_test_cuda_perf"
# the 64x64 WMMA grouped GEMMs (GT_CUDA_MOE=tc; the default is mma)
run "gpu_test_cuda_moe_tc_gemm" "${TEST_LIMIT:-240}" env GT_CUDA_MOE=tc \
  "$BUILD/gpu_test_cuda_moe"
run "gpu_test_cuda_perf_tc_gemm" "${TEST_LIMIT:-240}" env GT_CUDA_MOE=tc \
  "$BUILD/gpu_test_cuda_perf"
if [ "${1:-}" != quick ] && command -v compute-sanitizer >/dev/null; then
  run "memcheck_gpu_test_cuda_moe_tc" "${SAN_LIMIT:-150}" env GT_CUDA_MOE=tc \
    compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/gpu_test_cuda_moe"
  for t in gpu_test_cuda_ops gpu_test_cuda_moe gpu_test_cuda_capture gpu_test_cuda_grad_rows; do
    run "memcheck_$t" "${SAN_LIMIT:-150}" compute-sanitizer --tool memcheck \
      --report-api-errors no --error-exitcode 9 "$BUILD/$t"
  done
  if [ "${RACECHECK:-1}" = 1 ]; then
    for t in gpu_test_cuda_capture gpu_test_cuda_moe; do
      run "racecheck_$t" "${RACE_LIMIT:-150}" compute-sanitizer --tool racecheck \
        --report-api-errors no --error-exitcode 9 "$BUILD/$t"
    done
    # the own attention kernels (shared-memory hand-overs between warp halves); with tc, since
    # racecheck reports hazards inside cuDNN's generated sdpa kernels (wgmma/TMA code it does
    # not follow), which would hide ours
    run "racecheck_gpu_test_cuda_ops_tc" "${RACE_LIMIT:-150}" env GT_CUDA_ATTN=tc \
      compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 \
      "$BUILD/gpu_test_cuda_ops"
  fi
fi
echo "logs in $OUT" | tee -a "$SUMMARY"
