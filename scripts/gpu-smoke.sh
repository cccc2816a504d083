#!/usr/bin/env bash
# A short first look on the GPU machine: the graph GPU test, then each mode of `graphtrain
# bench` on the four workloads (graphtrain only). Carry build-gpu-run (scripts/gpu-build.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gt-smoke}; mkdir -p "$OUT"
NV=$(python3 -c 'import nvidia, os; print(nvidia.__path__[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH="$PWD/build-gpu-run/lib:$NV/cudnn/lib:$NV/nccl/lib:$NV/cublas/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GT_SOURCE_DIR=$PWD GT_RECIPE_DIR=$PWD/recipes
GT=./build-gpu-run/graphtrain
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/smoke.log"
timeout 60 ./build-gpu-run/gpu_test_graphs_gpu 2>&1 | tail -30 | tee -a "$OUT/smoke.log"
timeout 40 $GT train --recipe tiny train.train_iters=20 logger.log_interval=5 2>&1 | tail -25 | tee -a "$OUT/smoke.log"
for w in ${SMOKE_WORKLOADS:-tiny gpt124m llama1b moe}; do
  timeout ${SMOKE_LIMIT:-60} $GT bench --recipe $w --modes all --steps 20 --json "$OUT/bench_$w.json" 2>&1 | tail -30 | tee -a "$OUT/smoke.log"
done
