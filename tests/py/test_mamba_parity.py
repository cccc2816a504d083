"""Mamba parity on the CPU: graphtrain's CPU backend trains a small hybrid model (Mamba-2,
attention and MLP units; a sequence the SSD chunk does not divide, two groups) a few steps with
`bench --parity`, and bench/torch_reference.py replays them in PyTorch fp32 (the chunked SSD of
bench/torch_mamba.py): every loss within 1e-4 and every step-1 gradient within 1e-3. Also the
reference's chunked SSD against its sequential recurrence. Run by ctest where python3 is found;
skipped (exit 77) where torch is not importable (pip install torch)."""
import os
import subprocess
import sys
import tempfile

SKIP = 77
HYBRID = ["--recipe", "hybrid_demo", "runtime.device=cpu", "model.hidden_size=64",
          "model.num_attention_heads=4", "model.num_query_groups=2", "model.ffn_hidden_size=128",
          "model.vocab_size=256", "model.seq_length=40", "model.mamba_head_dim=16",
          "model.mamba_state_dim=16", "model.mamba_chunk_size=16", "model.init_method_std=0.2",
          "train.micro_batch_size=2", "train.global_batch_size=4"]


def check_chunked_ssd(src):
    sys.path.insert(0, os.path.join(src, "bench"))
    import torch
    import torch_mamba
    g = torch.Generator().manual_seed(0)
    for B, T, H, P, G, S, L in [(2, 37, 4, 3, 2, 5, 16), (1, 50, 6, 2, 3, 4, 128)]:
        f64 = dict(dtype=torch.float64, generator=g)
        x, dt = torch.randn(B, T, H, P, **f64), torch.rand(B, T, H, **f64)
        A, Bm, Cm = -torch.rand(H, **f64), torch.randn(B, T, G, S, **f64), torch.randn(B, T, G, S, **f64)
        err = float((torch_mamba.ssd_chunked(x, dt, A, Bm, Cm, L) -
                     torch_mamba.ssd_sequential(x, dt, A, Bm, Cm)).abs().max())
        assert err < 1e-10, f"chunked SSD differs from the recurrence by {err} at {B, T, H, P, G, S, L}"


def main():
    binary, src = os.environ.get("GT_BINARY"), os.environ.get("GT_SOURCE_DIR")
    if not binary or not src:
        print("skipped: GT_BINARY and GT_SOURCE_DIR are not set; run through ctest")
        return SKIP
    try:
        import torch  # noqa: F401
    except (ImportError, OSError) as e:
        print(f"skipped: torch is not importable ({e}); pip install torch")
        return SKIP
    check_chunked_ssd(src)
    d = tempfile.mkdtemp(prefix="gt-mamba-parity-")
    r = subprocess.run([binary, "bench"] + HYBRID + ["--parity", d, "--parity-steps", "3"],
                       capture_output=True, text=True, check=False, cwd=src)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, os.path.join(src, "bench", "torch_reference.py"),
                        "parity", d, "--precisions", "fp32", "--device", "cpu"],
                       capture_output=True, text=True, check=False)
    print(r.stdout + r.stderr)
    assert r.returncode == 0 and "parity: PASS" in r.stdout, "Mamba parity failed"
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
