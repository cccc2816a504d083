#!/usr/bin/env python3
"""graphtrain's fp8 recipes emulated in PyTorch, for bench/torch_reference.py's parity and bench.

Every linear layer (qkv, o, gate/up, down) runs as graphtrain runs it under `-c`:
  fp8_cs  per-tensor current scaling: scale = fp8_max / amax of this very tensor (1 where amax
          is 0), E4M3 forward, E5M2 gradients under `hybrid` (E4M3 under model.fp8=e4m3);
  fp8_ds  per-tensor delayed scaling: the scale from an amax history (fp8_amax_history_len,
          fp8_amax_compute_algo max | most_recent, fp8_margin), rolled once per step as
          Transformer Engine's amax_and_scale_update; the step's amax is the max over its casts;
  fp8_sc  blockwise (DeepSeek-V3): 1 x 128 tiles of activations and gradients, 128 x 128 blocks
          of weights, each with a power-of-two scale from its own amax.
Forward y = x w^T (E4M3 x E4M3), data gradient dy w, weight gradient dy^T x, each operand
quantized (round to nearest even, saturating: clamp then cast to torch.float8_*) and the
products summed in fp32 and scaled back. Two engines:
  emulate  exact fp32 emulation (any device; the dequantized codes multiplied in fp32),
  scaled   torch._scaled_mm on a GPU with fp8 tensor cores (per-tensor recipes; the forward
           with fast accumulation, as graphtrain and Transformer Engine run it).
Imports without torch so --help works anywhere.
"""
import argparse
import math
import sys

try:
    import torch
except ImportError:  # --help must work anywhere
    torch = None

TILE = 128
E4M3_MAX, E5M2_MAX = 448.0, 57344.0
RECIPES = ("fp8_cs", "fp8_ds", "fp8_sc")


def fp8_dtypes():
    return {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def fmt_max(fmt):
    return E4M3_MAX if fmt == "e4m3" else E5M2_MAX


def quantize(x, scale, fmt):
    """fp8 codes of x * scale (scale broadcastable), saturating like the GPU's satfinite cast."""
    m = fmt_max(fmt)
    return (x.float() * scale).clamp(-m, m).to(fp8_dtypes()[fmt])


def scale_from_amax(amax, prev, fmt, margin=0):
    """graphtrain's gt_fp8_scale_from_amax: prev where amax is 0 or not finite."""
    amax = float(amax)
    if not (amax > 0.0) or math.isinf(amax) or math.isnan(amax):
        return prev
    s = (fmt_max(fmt) / amax) / 2.0 ** margin
    return min(s, 3.4028234663852886e38)


def pow2_scales(amax, fmt):
    """Blockwise: the largest power of two not above fp8_max / amax (1 for an all-zero tile)."""
    s = fmt_max(fmt) / amax.float().clamp_min(1e-30)
    p = torch.exp2(torch.floor(torch.log2(s)))
    return torch.where(amax > 0, p, torch.ones_like(p))


def tiles_of(x, rows):
    """x [R, C] padded to whole tiles, viewed [R/rows, rows, C/128, 128]."""
    R, C = x.shape
    pr, pc = (-R) % rows, (-C) % TILE
    xp = torch.nn.functional.pad(x.float(), (0, pc, 0, pr))
    return xp.view((R + pr) // rows, rows, (C + pc) // TILE, TILE), R, C


def blockwise_dequant(x, rows, fmt):
    """x quantized in rows x 128 tiles with power-of-two scales, returned as exact values."""
    t, R, C = tiles_of(x, rows)
    amax = t.abs().amax(dim=(1, 3), keepdim=True)
    s = pow2_scales(amax, fmt)
    q = quantize(t, s, fmt).float() / s
    return q.view(t.shape[0] * rows, t.shape[2] * TILE)[:R, :C]


class Fp8State:
    """The scaling state of one run: per linear and role (x, w, g) a scale and, for delayed
    scaling, the amax history; step_end() rolls the histories once per optimizer step."""

    def __init__(self, recipe, grad_fmt="e5m2", history_len=1, algo="most_recent", margin=0,
                 engine="emulate"):
        if recipe not in RECIPES:
            raise SystemExit(f"torch_fp8: recipe {recipe!r} is not one of {', '.join(RECIPES)}")
        if engine == "scaled" and recipe == "fp8_sc":
            raise SystemExit("torch_fp8: the scaled engine runs per-tensor recipes; use emulate "
                             "for fp8_sc")
        self.recipe, self.grad_fmt, self.engine = recipe, grad_fmt, engine
        self.len, self.use_max, self.margin = max(1, history_len), algo == "max", margin
        self.meta = {}  # (id(weight), role) -> dict(scale, amax, history)

    def _meta(self, key, role):
        k = (key, role)
        if k not in self.meta:
            self.meta[k] = dict(scale=1.0, amax=0.0, history=[0.0] * self.len)
        return self.meta[k]

    def scale(self, t, key, role, fmt):
        """The per-tensor scale of t's cast, recording its amax (delayed)."""
        amax = float(t.detach().abs().max())
        m = self._meta(key, role)
        if self.recipe == "fp8_cs":
            return scale_from_amax(amax, 1.0, fmt)
        m["amax"] = amax if math.isnan(amax) else max(m["amax"], amax)
        return m["scale"]

    def step_end(self):
        if self.recipe != "fp8_ds":
            return
        for (_, role), m in self.meta.items():
            fmt = self.grad_fmt if role == "g" else "e4m3"
            h = m["history"]
            h[0] = m["amax"]
            amax = max(h) if self.use_max else h[0]
            m["scale"] = scale_from_amax(amax, m["scale"], fmt, self.margin)
            h[:] = h[1:] + [h[0]]
            h[0] = 0.0
            m["amax"] = 0.0


def _per_tensor(st, t, key, role, fmt):
    s = st.scale(t, key, role, fmt)
    return quantize(t, s, fmt), 1.0 / s


def _mm(st, a, sa, b, sb, out_dtype, fast):
    """a [M, K] @ b [N, K]^T from fp8 codes and inverse scales, fp32 sums."""
    if st.engine == "scaled":
        one = torch.ones((), device=a.device, dtype=torch.float32)
        return torch._scaled_mm(a, b.t(), scale_a=one * sa, scale_b=one * sb,
                                out_dtype=out_dtype, use_fast_accum=fast)
    return ((a.float() @ b.float().t()) * (sa * sb)).to(out_dtype)


if torch is not None:
    class _Fp8Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, st):
            shp = x.shape
            x2 = x.reshape(-1, shp[-1])
            ctx.st, ctx.shape, ctx.dtype = st, shp, x.dtype
            key = id(w)
            ctx.key = key
            if st.recipe == "fp8_sc":
                # the backward casts x^T and w^T afresh from the unquantized tensors
                ctx.save_for_backward(x2, w)
                xq, wq = blockwise_dequant(x2, 1, "e4m3"), blockwise_dequant(w, TILE, "e4m3")
                return (xq @ wq.t()).to(x.dtype).view(*shp[:-1], w.shape[0])
            qx, sx = _per_tensor(st, x2, key, "x", "e4m3")
            qw, sw = _per_tensor(st, w, key, "w", "e4m3")
            ctx.save_for_backward(qx, qw)
            ctx.sx, ctx.sw = sx, sw
            y = _mm(st, qx, sx, qw, sw, x.dtype, True)
            return y.view(*shp[:-1], w.shape[0])

        @staticmethod
        def backward(ctx, dy):
            st = ctx.st
            dy2 = dy.reshape(-1, dy.shape[-1])
            if st.recipe == "fp8_sc":
                x2, w = ctx.saved_tensors
                # dgrad: dy in 1 x 128 tiles along out, w^T in 128 x 128 blocks; wgrad: dy^T and
                # x^T in 1 x 128 tiles along the tokens
                dq = blockwise_dequant(dy2, 1, st.grad_fmt)
                wtq = blockwise_dequant(w.t().contiguous(), TILE, "e4m3")
                dx = dq @ wtq.t()
                dtq = blockwise_dequant(dy2.t().contiguous(), 1, st.grad_fmt)
                xtq = blockwise_dequant(x2.t().contiguous(), 1, "e4m3")
                dw = dtq @ xtq.t()
                return dx.to(ctx.dtype).view(ctx.shape), dw.to(w.dtype), None
            qx, qw = ctx.saved_tensors
            qd, sd = _per_tensor(st, dy2, ctx.key, "g", st.grad_fmt)
            # K-contiguous operands, as on the GPU: w^T and the transposed casts
            dx = _mm(st, qd, sd, qw.t().contiguous(), ctx.sw, ctx.dtype, False)
            dw = _mm(st, qd.t().contiguous(), sd, qx.t().contiguous(), ctx.sx, torch.float32,
                     False)
            return dx.view(ctx.shape), dw, None


def make_linear(st):
    """A drop-in for F.linear(x, w) (no bias) that runs the recipe of st."""
    def linear(x, w, bias=None):
        if bias is not None:
            raise SystemExit("torch_fp8: fp8 linear layers take no bias (as graphtrain)")
        return _Fp8Linear.apply(x, w, st)
    return linear


def torchao_linear(model):
    """PyTorch's own fp8 training for bench/torch_reference.py's torchao_fp8 mode: torchao's
    Float8Linear (tensorwise recipe) over the model's qkv, o, gate/up and down weights, the
    same Parameters (so the optimizer steps them), as a drop-in for F.linear."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as e:
        raise RuntimeError(f"torchao does not import ({e}); install the wheel "
                           "scripts/fetch_torchao.sh downloads") from e
    holder = torch.nn.ModuleDict()
    for name, p in model.named_parameters():
        if p.ndim == 2 and name.rsplit(".", 1)[-1] in ("qkv_w", "o_w", "gu_w", "down_w"):
            lin = torch.nn.Linear(p.shape[1], p.shape[0], bias=False, device="meta")
            lin.weight = p
            holder[name.replace(".", "_")] = lin
    convert_to_float8_training(holder,
                               config=Float8LinearConfig.from_recipe_name("tensorwise"))
    by_weight = {id(m.weight): m for m in holder.values()}
    if len(by_weight) != len(holder):
        raise RuntimeError("torchao's Float8Linear did not keep the model's weight Parameters")
    object.__setattr__(model, "_torchao_fp8", holder)  # alive with the model, not a submodule

    def linear(x, w, bias=None):
        return by_weight[id(w)](x)
    return linear


def state_from_graphtrain(keys, recipe, engine):
    """An Fp8State from graphtrain's config.json keys (bench --parity writes them)."""
    if keys.get("model.first_last_layers_bf16") in (True, "true"):
        raise SystemExit("torch_fp8: model.first_last_layers_bf16 is not emulated here; run "
                         "graphtrain's parity without it")
    fmt = "e4m3" if str(keys.get("model.fp8", "hybrid")) == "e4m3" else "e5m2"
    return Fp8State(recipe, fmt, int(keys.get("model.fp8_amax_history_len", 1) or 1),
                    str(keys.get("model.fp8_amax_compute_algo", "most_recent")),
                    int(keys.get("model.fp8_margin", 0) or 0), engine)


def self_check():
    """The emulation against hand-made expectations (CPU, seconds): exact quantization round
    trips, a current-scaling GEMM against fp64, and a delayed history update."""
    torch.manual_seed(0)
    x = torch.randn(64, 256) * 3
    s = scale_from_amax(x.abs().max(), 1.0, "e4m3")
    q = quantize(x, s, "e4m3").float() / s
    assert float((q - x).abs().max() / x.abs().max()) < 2 ** -3, "e4m3 rounding too coarse"
    c = quantize(x, s, "e4m3").float()
    assert torch.equal(quantize(c, 1.0, "e4m3").float(), c), "fp8 codes do not round-trip"
    assert float(quantize(torch.tensor([1e6]), 1.0, "e4m3").float()) == E4M3_MAX, "no saturation"
    w = torch.randn(32, 256) * 0.1
    for recipe in RECIPES:
        st = Fp8State(recipe)
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = make_linear(st)(xr, wr)
        y.square().sum().backward()
        ref = x.double() @ w.double().t()
        err = float((y.double() - ref).norm() / ref.norm())
        assert err < 0.1, f"{recipe}: forward off by {err}"
        assert xr.grad is not None and wr.grad is not None
        st.step_end()
    st = Fp8State("fp8_ds", history_len=2, algo="max")
    st.scale(torch.tensor([2.0]), 0, "x", "e4m3")
    st.step_end()
    assert st.meta[(0, "x")]["scale"] == 224.0, st.meta
    print("torch_fp8 self-check: PASS")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--self-check", action="store_true", help="test the emulation (CPU)")
    a = p.parse_args(argv)
    if torch is None:
        raise SystemExit("torch_fp8 needs PyTorch (python3 -m pip install torch)")
    if a.self_check:
        return self_check()
    p.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
