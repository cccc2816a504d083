#!/usr/bin/env python3
"""fp8 against bf16 over a long run: trains the same recipe once in bf16 and once per fp8 recipe
(same seed, same data), reads the losses from logger.metrics_file, prints the curves side by side
and passes when each fp8 run's end loss (the mean over its last --tail logged steps) lies within
--tol of bf16's. No PyTorch needed.

  # the CPU emulation on the demo corpus (build the demo data first: bash scripts/run.sh does)
  python3 scripts/fp8_loss_curve.py --graphtrain build/graphtrain --recipe demo --device cpu
  # the GPU, a gpt124m-sized model
  python3 scripts/fp8_loss_curve.py --graphtrain build/graphtrain --recipe gpt124m --device cuda

Extra key=value arguments go to every run (e.g. train.global_batch_size=16).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def train(gt, recipe, device, dtype, steps, extra, out_dir):
    metrics = os.path.join(out_dir, f"{recipe}_{dtype}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [gt, "train", "--recipe", recipe, f"runtime.device={device}",
           f"model.compute_dtype={dtype}", f"train.train_iters={steps}", "train.eval_interval=0",
           "logger.log_interval=10", f"logger.metrics_file={metrics}", "checkpoint.save="] + extra
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"fp8_loss_curve: {dtype} run exited {r.returncode}:\n{r.stderr[-3000:]}")
    losses = {}
    with open(metrics) as f:
        for line in f:
            rec = json.loads(line)
            if "step" in rec and "loss" in rec:
                losses[int(rec["step"])] = float(rec["loss"])
    if not losses:
        raise SystemExit(f"fp8_loss_curve: {metrics} holds no step records")
    return losses


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphtrain", default="build/graphtrain")
    p.add_argument("--recipe", default="demo")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--recipes", default="fp8_cs,fp8_ds,fp8_sc", help="fp8 recipes to compare")
    p.add_argument("--tail", type=int, default=10, help="logged steps averaged at the end")
    p.add_argument("--tol", type=float, default=0.01, help="relative end-loss difference allowed")
    p.add_argument("--out", help="folder for the metrics files (default: a temporary one)")
    a, extra = p.parse_known_args(argv)
    bad = [x for x in extra if "=" not in x]
    if bad:
        p.error(f"unknown arguments {bad} (extra arguments are key=value overrides)")
    out = a.out or tempfile.mkdtemp(prefix="fp8_loss_curve.")
    os.makedirs(out, exist_ok=True)
    ref = train(a.graphtrain, a.recipe, a.device, "bf16", a.steps, extra, out)
    runs = {r: train(a.graphtrain, a.recipe, a.device, r, a.steps, extra, out)
            for r in a.recipes.split(",")}
    steps = sorted(ref)
    print(f"{'step':>6} {'bf16':>9} " + " ".join(f"{r:>9}" for r in runs))
    for s in steps:
        if s % 100 == 0 or s == steps[-1]:
            print(f"{s:6d} {ref[s]:9.4f} " +
                  " ".join(f"{runs[r].get(s, float('nan')):9.4f}" for r in runs))
    tail = steps[-a.tail:]
    end_ref = sum(ref[s] for s in tail) / len(tail)
    ok = True
    for r, losses in runs.items():
        missing = [s for s in tail if s not in losses]
        if missing:
            print(f"{r}: FAIL (no loss logged at steps {missing[:5]})")
            ok = False
            continue
        end = sum(losses[s] for s in tail) / len(tail)
        rel = abs(end - end_ref) / end_ref
        passed = rel <= a.tol
        ok &= passed
        print(f"{r}: end loss {end:.4f} against bf16 {end_ref:.4f} (mean of the last {len(tail)} "
              f"logged steps): {100 * rel:.2f}% apart (tolerance {100 * a.tol:.1f}%): "
              f"{'PASS' if passed else 'FAIL'}")
    print(f"fp8_loss_curve: {'PASS' if ok else 'FAIL'} (metrics in {out})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
