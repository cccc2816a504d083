# Sourced by scripts/gpu.sh: `scripts/gpu.sh ops [quick]`, the CUDA backend's GPU tests on the
# GPU machine: the tests/gpu tests, then again with the other kernel choices (OPS_VARIANTS),
# then memcheck and racecheck passes (quick: none); the capture-rejection test makes API errors
# on purpose, so those are not reported. Logs and summary.txt under $OUT (default
# /tmp/gt-gpu-out). Env: GT_GPU_TESTS (the tests of the first pass), OPS_VARIANTS (lines of
# name|VAR=value ...|test binary), RACECHECK (0: no racecheck), limits TEST_LIMIT, SAN_LIMIT,
# RACE_LIMIT seconds.
# shellcheck shell=bash
gpu_env
gpu_need_binary || exit 2
OUT=${OUT:-/tmp/gt-gpu-out}
mkdir -p "$OUT"
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
for t in ${GT_GPU_TESTS:-gpu_test_cuda_ops gpu_test_cuda_moe gpu_test_cuda_capture gpu_test_cuda_perf gpu_test_cuda_grad_rows gpu_test_cuda_mamba gpu_test_cuda_mamba_perf}; do
  run "$t" "${TEST_LIMIT:-240}" "$BUILD/$t"
done
# The tests again with the other kernel choices, one line each: the fp32 SIMT attention (the
# tensor-core kernels' reference), cuDNN's attention backward (the sm_90 default pairs cuDNN's
# forward with the own wgmma backward), the tensor-core attention alone (the default routes
# cuDNN's shapes to cuDNN), the SIMT grouped GEMMs (the tensor-core ones' reference) and the
# 64x64 WMMA grouped GEMMs (the default is wgmma). A tree whose kernels differ names its own.
OPS_VARIANTS_DEFAULT="gpu_test_cuda_ops_reference_attention|GT_CUDA_ATTN=reference|gpu_test_cuda_ops
gpu_test_cuda_ops_cudnn_bwd|GT_CUDA_ATTN_BWD=cudnn|gpu_test_cuda_ops
gpu_test_cuda_ops_mma_attention|GT_CUDA_ATTN=mma|gpu_test_cuda_ops
gpu_test_cuda_perf_mma_attention|GT_CUDA_ATTN=mma|gpu_test_cuda_perf
gpu_test_cuda_moe_reference_gemm|GT_CUDA_MOE=reference|gpu_test_cuda_moe
gpu_test_cuda_perf_reference_gemm|GT_CUDA_MOE=reference GT_CUDA_ATTN=mma|gpu_test_cuda_perf
gpu_test_cuda_moe_mma_gemm|GT_CUDA_MOE=mma|gpu_test_cuda_moe
gpu_test_cuda_perf_mma_gemm|GT_CUDA_MOE=mma|gpu_test_cuda_perf"
while IFS='|' read -r name envs test; do
  [ -z "$name" ] && continue
  # shellcheck disable=SC2086 # envs is word-split on purpose
  run "$name" "${TEST_LIMIT:-240}" env $envs "$BUILD/$test"
done <<<"${OPS_VARIANTS:-$OPS_VARIANTS_DEFAULT}"
if [ "${1:-}" != quick ] && command -v compute-sanitizer >/dev/null; then
  run "memcheck_gpu_test_cuda_moe_mma" "${SAN_LIMIT:-150}" env GT_CUDA_MOE=mma \
    compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/gpu_test_cuda_moe"
  for t in gpu_test_cuda_ops gpu_test_cuda_moe gpu_test_cuda_capture gpu_test_cuda_grad_rows gpu_test_cuda_mamba; do
    run "memcheck_$t" "${SAN_LIMIT:-150}" compute-sanitizer --tool memcheck \
      --report-api-errors no --error-exitcode 9 "$BUILD/$t"
  done
  if [ "${RACECHECK:-1}" = 1 ]; then
    for t in gpu_test_cuda_capture gpu_test_cuda_moe gpu_test_cuda_mamba; do
      run "racecheck_$t" "${RACE_LIMIT:-150}" compute-sanitizer --tool racecheck \
        --report-api-errors no --error-exitcode 9 "$BUILD/$t"
    done
    # the own attention kernels (shared-memory hand-overs between warp halves); with tc, since
    # racecheck reports hazards inside cuDNN's generated sdpa kernels (wgmma/TMA code it does
    # not follow), which would hide ours
    run "racecheck_gpu_test_cuda_ops_mma" "${RACE_LIMIT:-150}" env GT_CUDA_ATTN=mma \
      compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 \
      "$BUILD/gpu_test_cuda_ops"
  fi
fi
echo "logs in $OUT" | tee -a "$SUMMARY"
