set -uo pipefail
cd /work/main 2>/dev/null || cd "$(dirname "$0")"
OUT=${OUT:-/tmp/o}; mkdir -p $OUT
NV=$(python3 -c 'import nvidia, os; print(nvidia.__path__[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH="$PWD/build-gpu-run/lib:$NV/cudnn/lib:$NV/nccl/lib:$NV/cublas/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GT_SOURCE_DIR=$PWD GT_RECIPE_DIR=$PWD/recipes PATH=$PATH:/usr/local/cuda/bin
GT=$PWD/build-gpu-run/graphtrain
which nsys ncu | tee $OUT/tools.log
GT_CUDA_MOE=tc2 timeout 60 $GT bench --recipe moe --modes eager --steps 5 > $OUT/tc2.log 2>&1; echo "tc2 rc=$?" >> $OUT/tc2.log
tail -20 $OUT/tc2.log
timeout 60 $GT bench --recipe gpt124m --modes eager,full_iteration --steps 10 2>&1 | grep -E "^(eager|full_iteration|mode) " | tee $OUT/gpt.log
PROFILE_MOE_VARIANTS= PROFILE_WORKLOADS=moe OUT=$OUT bash scripts/gpu-profile.sh >/dev/null 2>&1
cat $OUT/profile.log
