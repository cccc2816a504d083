# Sourced by scripts/gpu.sh: `scripts/gpu.sh check [quick]`, the one full run for the GPU
# machine: GPU tests, a short training run, graphtrain bench and the PyTorch reference side by
# side on the four WORKLOADS.md workloads, the parity check, compute-sanitizer memcheck of a
# short training run, then torch.compile. Each part has its own time limit and the whole stays
# under ~9 minutes (GT_CHECK_BUDGET seconds, default 540); the most important results come
# first. Uses build-gpu/ when carried (its ctest files), else the run folder (the pack).
# Env: GT_CHECK_BUDGET, GT_CHECK_WORKLOADS (default "tiny gpt124m llama1b moe"),
# GT_CHECK_SKIP_CPU_PARITY (set: skip the CPU-backend parity runs), GT_CARRY_LIB, PYTHON.
#
# Results under $OUT (the device sets it; default /tmp/gt-gpu-check): summary.txt (one line per
# part plus the key figures), compare.md (graphtrain vs PyTorch table), compare.svg (the same
# drawn) and logs.tar.gz (every log, JSON/CSV and bench plot; the device returns at most 8
# files, so the logs travel as one archive, refreshed after every part).
# quick: the tiny workload only.
# shellcheck shell=bash
ROOT=$PWD
gpu_env "${GT_GPU_BUILD_DIR:-build-gpu}"
OUT=${OUT:-/tmp/gt-gpu-check}
LOGS=$(mktemp -d /tmp/gt-check.XXXXXX)
BUDGET=${GT_CHECK_BUDGET:-540}
WORKLOADS=${GT_CHECK_WORKLOADS:-tiny gpt124m llama1b moe}
[ "${1:-}" = quick ] && WORKLOADS=tiny
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }
# show PART PREFIX REGEX [LAST]: the lines of a part's log worth a place in the summary
show() {
  [ -f "$LOGS/$1.log" ] || return 0
  grep -E "$3" "$LOGS/$1.log" | tail -n "${4:-40}" | sed "s/^/    $2/" | tee -a "$SUMMARY"
  return 0
}
pack() { tar -C "$LOGS" -czf "$OUT/logs.tar.gz.tmp" . 2>/dev/null && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"; }
# part NAME BUDGET_S COMMAND...: runs with a limit of min(budget, time left), logs with tee
part() {
  local name=$1 want=$2
  shift 2
  local left=$((BUDGET - SECONDS - 5))
  local limit=$((want < left ? want : left))
  if [ "$limit" -lt 10 ]; then
    say "$(printf '%-26s SKIPPED (time budget spent)' "$name")"
    return 0
  fi
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$LOGS/$name.log" >/dev/null
  local rc=${PIPESTATUS[0]}
  local note=""
  [ "$rc" = 124 ] && note="(timed out at ${limit}s)"
  say "$(printf '%-26s rc=%-3s %4ds %s' "$name" "$rc" $((SECONDS - t0)) "$note")"
  pack
  return 0
}

say "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
say "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)'), torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo missing), budget ${BUDGET}s"
if [ ! -x "$GT" ]; then
  say "no $GT: build it on the development machine with scripts/gpu.sh build and carry ${GT_GPU_PACK_DIR:-build-gpu-pack}"
  exit 2
fi
# ctest files hold the build machine's absolute paths: make them resolve here too
SRC_AT_BUILD=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
if [ -n "$SRC_AT_BUILD" ] && [ "$SRC_AT_BUILD" != "$ROOT" ] && [ ! -e "$SRC_AT_BUILD" ]; then
  mkdir -p "$(dirname "$SRC_AT_BUILD")" && ln -s "$ROOT" "$SRC_AT_BUILD"
fi

# 1. GPU tests (ctest label gpu); without ctest, the test binaries directly
if command -v ctest >/dev/null && [ -f "$BUILD/CTestTestfile.cmake" ]; then
  part ctest_gpu 150 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 120
else
  part ctest_gpu 150 bash -c "for t in $BUILD/gpu_test_*; do echo \"== \$t\"; \$t || echo \"FAILED \$t\"; done"
fi
show ctest_gpu "" 'tests passed|tests failed|\(Failed\)|\(Timeout\)|^FAILED'
# the MoE tests again on the mma.sync grouped GEMMs (the default on sm_90 is wgmma)
part moe_tests_mma 60 env GT_CUDA_MOE=mma "$BUILD/gpu_test_cuda_moe"
show moe_tests_mma "" 'PASSED|FAILED'
# the ops tests again with cuDNN's attention backward (the default on sm_90 is the own wgmma one)
part ops_tests_cudnn_bwd 60 env GT_CUDA_ATTN_BWD=cudnn "$BUILD/gpu_test_cuda_ops"
show ops_tests_cudnn_bwd "" 'PASSED|FAILED'

# 2. a short training run on the GPU (the smoke test everything else relies on)
part train_tiny 40 "$GT" train --recipe tiny train.train_iters=30 logger.log_interval=10
show train_tiny "" '[Ee]rror|loss' 3

# 3. graphtrain bench and the PyTorch reference, workload by workload (no compile here)
declare -A GT_LIMIT=([tiny]=40 [gpt124m]=50 [llama1b]=100 [moe]=60)
declare -A PT_LIMIT=([tiny]=35 [gpt124m]=40 [llama1b]=60 [moe]=50)
GT_JSONS="" PT_JSONS=""
for w in $WORKLOADS; do
  part "bench_gt_$w" "${GT_LIMIT[$w]:-60}" "$GT" bench --recipe "$w" --modes all --steps 30 \
    --json "$LOGS/bench_gt_$w.json" --csv "$LOGS/bench_gt_$w.csv" --plot "$LOGS/bench_gt_$w.svg"
  show "bench_gt_$w" "[$w] " '^(eager|attn|full_iteration)|bitwise identical|FAILED|graphtrain bench:'
  part "bench_pt_$w" "${PT_LIMIT[$w]:-50}" "${PYRUN[@]}" bench/torch_reference.py bench --workloads "$w" \
    --modes eager,te_attn,te_attn_mlp,full_iteration --steps 20 --warmup 5 --json "$LOGS/bench_pt_$w.json"
  show "bench_pt_$w" "" "^$w "
  GT_JSONS="$GT_JSONS,$LOGS/bench_gt_$w.json" PT_JSONS="$PT_JSONS,$LOGS/bench_pt_$w.json"
done
"${PYRUN[@]}" bench/torch_reference.py compare --graphtrain "$GT_JSONS" --torch "$PT_JSONS" \
  --plot "$OUT/compare.svg" >"$OUT/compare.md" 2>>"$LOGS/compare.log"

# 4. parity: graphtrain's losses and step-1 gradients against PyTorch fp32 and bf16. init std
#    0.2 makes attention peaked, so a wrong rotary pairing or head mapping moves the gradients
#    by O(1), far above bf16's noise (~3e-2 dense; MoE routing flips make it ~0.3, so bf16 MoE
#    parity is coarse); the CPU-backend runs check the fp32 contract tightly (1e-3).
PAR="model.num_layers=2 model.hidden_size=128 model.num_attention_heads=4 model.num_query_groups=2 model.vocab_size=4096 model.seq_length=128 model.init_method_std=0.2 train.micro_batch_size=4 train.global_batch_size=8"
PAR_MOE="$PAR model.num_moe_experts=8 model.moe_router_topk=2 model.moe_ffn_hidden_size=64"
part parity_dense_export 30 "$GT" bench --recipe tiny $PAR model.ffn_hidden_size=384 --parity "$LOGS/parity_dense" --parity-steps 100
part parity_dense 60 "${PYRUN[@]}" bench/torch_reference.py parity "$LOGS/parity_dense"
show parity_dense "[dense] " 'PASS|FAIL|hint|Error'
part parity_moe_export 30 "$GT" bench --recipe moe $PAR_MOE --parity "$LOGS/parity_moe" --parity-steps 20
part parity_moe 60 "${PYRUN[@]}" bench/torch_reference.py parity "$LOGS/parity_moe"
show parity_moe "[moe] " 'PASS|FAIL|hint|Error'
# hybrid (Mamba-2, attention, MLP units; seq 64 over chunks of 48, so one is partial); the
# recipe's runtime is the CPU, so the GPU run names its device
PAR_HYB="--recipe hybrid_demo model.init_method_std=0.2 model.mamba_chunk_size=48"
part parity_hybrid_export 30 "$GT" bench $PAR_HYB runtime.device=cuda --parity "$LOGS/parity_hybrid" --parity-steps 20
part parity_hybrid 60 "${PYRUN[@]}" bench/torch_reference.py parity "$LOGS/parity_hybrid"
show parity_hybrid "[hybrid] " 'PASS|FAIL|hint|Error'
CPU="model.vocab_size=512 model.seq_length=32 runtime.device=cpu"
if [ -z "${GT_CHECK_SKIP_CPU_PARITY:-}" ]; then
part parity_cpu_export 30 "$GT" bench --recipe tiny $PAR model.ffn_hidden_size=384 $CPU --parity "$LOGS/parity_cpu" --parity-steps 5
part parity_cpu 40 "${PYRUN[@]}" bench/torch_reference.py parity "$LOGS/parity_cpu" --precisions fp32
show parity_cpu "[cpu fp32] " 'PASS|FAIL|hint|Error'
part parity_cpu_moe_export 30 "$GT" bench --recipe moe $PAR_MOE $CPU --parity "$LOGS/parity_cpu_moe" --parity-steps 5
part parity_cpu_moe 40 "${PYRUN[@]}" bench/torch_reference.py parity "$LOGS/parity_cpu_moe" --precisions fp32
show parity_cpu_moe "[cpu moe fp32] " 'PASS|FAIL|hint|Error'
part parity_cpu_hybrid_export 30 "$GT" bench $PAR_HYB runtime.device=cpu --parity "$LOGS/parity_cpu_hybrid" --parity-steps 3
part parity_cpu_hybrid 60 "${PYRUN[@]}" bench/torch_reference.py parity "$LOGS/parity_cpu_hybrid" --precisions fp32
show parity_cpu_hybrid "[cpu hybrid fp32] " 'PASS|FAIL|hint|Error'
fi
rm -f "$LOGS"/parity_*/*.gtw "$LOGS"/parity_*/tokens.bin # large and reproducible
pack

# 5. torch.compile for the same workloads (slow to compile: last)
part bench_pt_compile 240 "${PYRUN[@]}" bench/torch_reference.py bench --workloads "$(echo $WORKLOADS | tr ' ' ,)" \
  --modes compile --steps 20 --warmup 5 --time-budget 200 --json "$LOGS/bench_pt_compile.json"
show bench_pt_compile "" "compile"
"${PYRUN[@]}" bench/torch_reference.py compare --graphtrain "$GT_JSONS" --torch "$PT_JSONS,$LOGS/bench_pt_compile.json" \
  --plot "$OUT/compare.svg" >"$OUT/compare.md" 2>>"$LOGS/compare.log"

# 6. compute-sanitizer memcheck over a short run that captures and replays a full-iteration graph
if command -v compute-sanitizer >/dev/null; then
  part memcheck_train 75 compute-sanitizer --tool memcheck --error-exitcode 9 --leak-check full \
    "$GT" train --recipe tiny model.num_layers=2 model.cuda_graph_warmup_steps=1 train.train_iters=4
  show memcheck_train "" 'ERROR SUMMARY|LEAK SUMMARY|[Ee]rror:'
  # the MoE kernels (grouped GEMMs with zero-filled tile edges, row gathers) over uneven groups
  part memcheck_moe 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/gpu_test_cuda_moe"
  show memcheck_moe "" 'ERROR SUMMARY|PASSED|FAILED'
  # the ops, the own wgmma attention backward among them
  part memcheck_ops 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/gpu_test_cuda_ops"
  show memcheck_ops "" 'ERROR SUMMARY|PASSED|FAILED'
  # shared-memory races in the grouped GEMMs' pipelines (wgmma by default on sm_90)
  part racecheck_moe 90 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$BUILD/gpu_test_cuda_moe"
  show racecheck_moe "" 'RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED'
else
  say "memcheck_train             SKIPPED (compute-sanitizer not found)"
fi

# 7. the precision-aware optimizer (Adam moments in bf16, an opt-in), full_iteration only
for w in $WORKLOADS; do
  part "bench_gt_bf16_moments_$w" 45 "$GT" bench --recipe "$w" --modes full_iteration --steps 30 \
    --warmup 3 optimizer.use_precision_aware_optimizer=true optimizer.exp_avg_dtype=bf16 \
    optimizer.exp_avg_sq_dtype=bf16
  show "bench_gt_bf16_moments_$w" "[bf16 moments $w] " '^full_iteration |[Ee]rror'
done

say "total ${SECONDS}s; tables: compare.md (drawn: compare.svg); logs and JSON: logs.tar.gz"
cat "$OUT/compare.md" >>"$SUMMARY"
pack
rm -rf "$LOGS"
