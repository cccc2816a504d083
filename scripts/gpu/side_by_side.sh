# Sourced by scripts/gpu.sh: `scripts/gpu.sh side-by-side`, a compact side-by-side run for the
# GPU machine: the MoE and graph GPU tests, then for each workload `graphtrain bench` and
# bench/torch_reference.py bench in the same call, and the comparison table (compare.md).
# Env: SBS_WORKLOADS (default "tiny gpt124m llama1b moe"), SBS_GT_MODES, SBS_PT_MODES,
# SBS_STEPS (default 20), SBS_GT_LIMIT / SBS_PT_LIMIT (seconds a workload, default 120 / 90;
# torch.compile of the hybrid model needs more), PYTHON. Logs under $OUT (default /tmp/gt-sbs).
# shellcheck shell=bash
gpu_env
gpu_need_binary || exit 2
OUT=${OUT:-/tmp/gt-sbs}; mkdir -p "$OUT"
STEPS=${SBS_STEPS:-20}
S=$OUT/summary.txt
: >"$S"
gpu_header "$S"
for t in gpu_test_cuda_moe gpu_test_graphs_gpu; do
  timeout 60 "$BUILD/$t" >"$OUT/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.log" | tr '\n' ' ')" | tee -a "$S"
done
GJ="" PJ=""
for w in ${SBS_WORKLOADS:-tiny gpt124m llama1b moe}; do
  timeout "${SBS_GT_LIMIT:-120}" "$GT" bench --recipe "$w" --modes "${SBS_GT_MODES:-eager,attn+mlp,full_iteration}" \
    --steps "$STEPS" --warmup 2 --json "$OUT/gt_$w.json" >"$OUT/gt_$w.log" 2>&1
  echo "gt $w rc=$?" | tee -a "$S"
  grep -E "^(eager|attn|full_iteration)|identical" "$OUT/gt_$w.log" | tee -a "$S"
  timeout "${SBS_PT_LIMIT:-90}" "${PYRUN[@]}" bench/torch_reference.py bench --workloads "$w" \
    --modes "${SBS_PT_MODES:-eager,te_attn_mlp,full_iteration}" --steps "$STEPS" --warmup 5 \
    --json "$OUT/pt_$w.json" >"$OUT/pt_$w.log" 2>&1
  echo "pt $w rc=$?" | tee -a "$S"
  grep -E "^$w " "$OUT/pt_$w.log" | tee -a "$S"
  GJ="$GJ,$OUT/gt_$w.json" PJ="$PJ,$OUT/pt_$w.json"
done
"${PYRUN[@]}" bench/torch_reference.py compare --graphtrain "${GJ#,}" --torch "${PJ#,}" \
  --plot "$OUT/compare.svg" >"$OUT/compare.md" 2>"$OUT/compare.log"
tee -a "$S" <"$OUT/compare.md"
