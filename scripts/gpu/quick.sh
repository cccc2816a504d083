# Sourced by scripts/gpu.sh: `scripts/gpu.sh quick`, a quick check of kernel changes on the GPU
# machine: the GPU test binaries, then graphtrain bench (eager and full_iteration) on the chosen
# workloads, each MoE kernel variant of QUICK_MOE_VARIANTS on the moe workload. No PyTorch
# (`scripts/gpu.sh check` is the full run). Logs and summary.txt under $OUT (default
# /tmp/gt-quick). Env: QUICK_WORKLOADS (default "tiny gpt124m llama1b moe"), QUICK_MOE_VARIANTS
# (default "wgmma"; each other variant also reruns the MoE GPU tests), QUICK_MODES (default
# "eager,full_iteration"; "all" adds the per-layer scope sets).
# shellcheck shell=bash
gpu_env
gpu_need_binary || exit 2
OUT=${OUT:-/tmp/gt-quick}; mkdir -p "$OUT"
S=$OUT/summary.txt
: >"$S"
gpu_header "$S"
for t in "$BUILD"/gpu_test_*; do
  timeout 120 "$t" >"$OUT/$(basename "$t").log" 2>&1
  echo "$(basename "$t") rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$(basename "$t").log" | tr '\n' ' ')" | tee -a "$S"
  grep -E "FAILED|rel L2 error .* \(tol" "$OUT/$(basename "$t").log" | grep -iE "moe_matmul|FAILED|rope|in place, 1024" | tee -a "$S"
done
for v in ${QUICK_MOE_VARIANTS:-wgmma}; do
  [ "$v" = wgmma ] && continue
  GT_CUDA_MOE=$v timeout 120 "$BUILD/gpu_test_cuda_moe" >"$OUT/gpu_test_cuda_moe_$v.log" 2>&1
  echo "gpu_test_cuda_moe GT_CUDA_MOE=$v rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/gpu_test_cuda_moe_$v.log" | tr '\n' ' ')" | tee -a "$S"
done
for w in ${QUICK_WORKLOADS:-tiny gpt124m llama1b moe}; do
  variants=wgmma
  [ "$w" = moe ] && variants=${QUICK_MOE_VARIANTS:-wgmma}
  for v in $variants; do
    GT_CUDA_MOE=$v timeout 120 "$GT" bench --recipe "$w" --modes "${QUICK_MODES:-eager,full_iteration}" --steps 20 \
      --warmup 2 >"$OUT/bench_${w}_$v.log" 2>&1
    echo "bench $w GT_CUDA_MOE=$v rc=$?" | tee -a "$S"
    grep -E "^(eager|attn|full_iteration)|identical|[Ee]rror" "$OUT/bench_${w}_$v.log" | tee -a "$S"
  done
done
