# Sourced by scripts/gpu.sh: `scripts/gpu.sh profile`, where a step's time goes on the GPU
# machine: per-kernel GPU time of eager steps (nsys when present, else ncu with one metric),
# plus the MoE grouped-GEMM variants side by side. Logs under $OUT (default /tmp/gt-profile).
# Env: PROFILE_MOE_VARIANTS (default "mma tc"), PROFILE_WORKLOADS (default "gpt124m tiny"),
# PROFILE_TOP (kernels listed, default 25).
# shellcheck shell=bash
gpu_env
gpu_need_binary || exit 2
OUT=${OUT:-/tmp/gt-profile}; mkdir -p "$OUT"
(
for v in ${PROFILE_MOE_VARIANTS-mma tc}; do
  echo "== GT_CUDA_MOE=$v moe tests"
  GT_CUDA_MOE=$v timeout 60 "$BUILD/gpu_test_cuda_moe" 2>&1 | grep -E "PASSED|FAILED|rel|err" | tail -8
  echo "== GT_CUDA_MOE=$v bench moe"
  GT_CUDA_MOE=$v timeout 90 "$GT" bench --recipe moe --modes eager,full_iteration --steps 10 2>&1 | grep -E "^(eager|full_iteration|mode) |identical"
done
) 2>&1 | tee "$OUT/moe.log"
prof() { # workload
  local w=$1
  if command -v nsys >/dev/null; then
    timeout 120 nsys profile -o "$OUT/prof_$w" --force-overwrite true --stats=false "$GT" train --recipe "$w" model.cuda_graph_impl=none train.train_iters=4 logger.log_interval=1 >/dev/null 2>&1
    timeout 60 nsys stats --report cuda_gpu_kern_sum --format csv "$OUT/prof_$w.nsys-rep" > "$OUT/kern_$w.csv" 2>/dev/null
    rm -f "$OUT/prof_$w.nsys-rep" "$OUT/prof_$w.sqlite"
  else
    timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv "$GT" train --recipe "$w" model.cuda_graph_impl=none train.train_iters=2 logger.log_interval=1 > "$OUT/kern_$w.csv" 2>/dev/null
  fi
  python3 - "$OUT/kern_$w.csv" "$w" <<'PY'
import csv, os, sys, collections
path, w = sys.argv[1], sys.argv[2]
rows = list(csv.reader(open(path, errors="replace")))
hdr = None; agg = collections.Counter(); cnt = collections.Counter()
for r in rows:
    if hdr is None:
        if "Kernel Name" in r or "Name" in r: hdr = r
        continue
    d = dict(zip(hdr, r))
    try:
        if "Metric Value" in d:
            if d.get("Metric Name") != "gpu__time_duration.sum": continue
            v = float(d["Metric Value"].replace(",", "")); unit = d.get("Metric Unit", "nsecond")
            v = v / 1e6 if unit.startswith("n") else v / 1e3 if unit.startswith("u") else v
            name = d["Kernel Name"]
        else:
            v = float(d["Total Time (ns)"].replace(",", "")) / 1e6; name = d["Name"]
    except Exception: continue
    agg[name[:90]] += v; cnt[name[:90]] += 1
tot = sum(agg.values())
print(f"== {w}: kernel time total {tot:.2f} ms over the profiled steps")
for n, v in agg.most_common(int(os.environ.get("PROFILE_TOP", "25"))): print(f"{v:9.3f} ms {100*v/tot:5.1f}% x{cnt[n]:5d}  {n}")
PY
}
for w in ${PROFILE_WORKLOADS:-gpt124m tiny}; do prof "$w" 2>&1 | tee -a "$OUT/profile.log"; done
