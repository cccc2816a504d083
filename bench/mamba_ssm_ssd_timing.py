#!/usr/bin/env python3
"""Times mamba_ssm's Triton SSD (mamba_chunk_scan_combined: the chunked scan Mamba2 runs, with
dt_bias + softplus and the D skip) forward and backward at the hybrid workload's Mamba shapes,
the figure graphtrain's chunked CUDA scan is held to (gpu_test_cuda_mamba_perf prints its own
for the same shapes). mamba_ssm's compiled extensions are not needed: the Triton modules are
imported directly from its source (scripts/fetch_mamba_ssm.sh unpacks it), bypassing the
package's __init__, which loads them. Needs torch, triton, einops and packaging, and a GPU.

  python3 bench/mamba_ssm_ssd_timing.py --src build-mamba-ssm
"""
import argparse
import importlib
import os
import statistics
import sys
import types

# recipes/hybrid.yaml: micro-batch 4, seq 2048, expand 2 x 1024 = 32 heads of 64, 8 groups,
# state 128
HYBRID = dict(B=4, T=2048, H=32, P=64, G=8, S=128)


def load_combined(src):
    """mamba_ssm.ops.triton.ssd_combined from the source tree src (the folder holding the
    mamba_ssm package, or the package itself)."""
    root = src if os.path.isfile(os.path.join(src, "mamba_ssm", "ops", "triton",
                                              "ssd_combined.py")) else os.path.dirname(src)
    pkg = os.path.join(root, "mamba_ssm")
    if not os.path.isfile(os.path.join(pkg, "ops", "triton", "ssd_combined.py")):
        raise SystemExit(f"mamba_ssm_ssd_timing: no mamba_ssm/ops/triton/ssd_combined.py under "
                         f"{src}; unpack mamba_ssm's source there (scripts/fetch_mamba_ssm.sh)")
    # empty packages in place of mamba_ssm's __init__ files, which import the CUDA extensions
    for name, path in (("mamba_ssm", pkg), ("mamba_ssm.ops", os.path.join(pkg, "ops")),
                       ("mamba_ssm.ops.triton", os.path.join(pkg, "ops", "triton")),
                       ("mamba_ssm.utils", os.path.join(pkg, "utils"))):
        m = types.ModuleType(name)
        m.__path__ = [path]
        sys.modules[name] = m
    return importlib.import_module("mamba_ssm.ops.triton.ssd_combined")


def inputs(torch, sh, seed, requires_grad=True):
    """bf16 activations and fp32 parameters in the ranges of MambaMixer's initialisation."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    B, T, H, P, G, S = (sh[k] for k in "BTHPGS")
    dev = dict(device="cuda", generator=g)
    t = dict(x=torch.randn(B, T, H, P, **dev).bfloat16(),
             dt=torch.randn(B, T, H, **dev).bfloat16(),
             B=torch.randn(B, T, G, S, **dev).bfloat16(),
             C=torch.randn(B, T, G, S, **dev).bfloat16(),
             A=-torch.exp(torch.log(1 + 15 * torch.rand(H, **dev))),
             D=torch.ones(H, device="cuda"),
             dt_bias=torch.log(torch.expm1(torch.exp(torch.empty(H, device="cuda").uniform_(
                 -6.9, -2.3, generator=g)))))
    for v in t.values():
        v.requires_grad_(requires_grad)
    return t


def run(mod, t, chunk):
    return mod.mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"], chunk,
                                         D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True)


def time_ms(torch, fn, reps, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        ms.append(e0.elapsed_time(e1))
    return statistics.median(ms)


def check_against_reference(torch, mod, src_dir):
    """mamba_ssm's output against bench/torch_mamba.py's chunked SSD at a small shape, so both
    sides compute the same function (dt_bias + softplus, D skip)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_mamba
    sh = dict(B=2, T=200, H=4, P=16, G=2, S=32)
    t = inputs(torch, sh, 1, requires_grad=False)
    y = run(mod, t, 64).float()
    dt = torch.nn.functional.softplus(t["dt"].float() + t["dt_bias"])
    ref = torch_mamba.ssd_chunked(t["x"].float(), dt, t["A"], t["B"].float(), t["C"].float(), 64)
    ref = ref + t["x"].float() * t["D"][:, None]
    err = float((y - ref).norm() / ref.norm())
    print(f"  mamba_ssm against bench/torch_mamba.py at {sh}: relative error {err:.2e} "
          f"({'ok' if err < 2e-2 else 'MISMATCH'})")
    return err < 2e-2


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="folder holding mamba_ssm's source")
    ap.add_argument("--chunks", default="64,128,256", help="chunk lengths to time")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        raise SystemExit("mamba_ssm_ssd_timing: needs torch (and triton, einops, packaging)")
    if not torch.cuda.is_available():
        raise SystemExit("mamba_ssm_ssd_timing: needs a CUDA GPU (Triton kernels)")
    mod = load_combined(a.src)
    ok = check_against_reference(torch, mod, a.src)
    sh = HYBRID
    for chunk in (int(c) for c in a.chunks.split(",")):
        t = inputs(torch, sh, 0)
        dy = torch.randn(sh["B"], sh["T"], sh["H"], sh["P"], device="cuda").bfloat16()
        y = run(mod, t, chunk)

        def fwd():
            with torch.no_grad():
                run(mod, t, chunk)

        def bwd():
            torch.autograd.grad(y, [t[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias")],
                                dy, retain_graph=True)

        def both():
            out = run(mod, t, chunk)
            torch.autograd.grad(out, [t[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias")],
                                dy)

        f, b, fb = (time_ms(torch, fn, a.reps, a.warmup) for fn in (fwd, bwd, both))
        print(f"mamba_ssm ssd B{sh['B']} T{sh['T']} H{sh['H']} P{sh['P']} G{sh['G']} "
              f"S{sh['S']} chunk {chunk}: fwd {f:.3f} ms, bwd {b:.3f} ms, fwd+bwd {fb:.3f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
