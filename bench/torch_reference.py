#!/usr/bin/env python3
"""PyTorch reference for graphtrain: the same Llama-style decoder (RMSNorm pre-norm, rotary
embeddings pairing (i, i + hd/2), grouped-query causal attention, SwiGLU with the gate rows first
in one gate_up matrix, or MoE with softmax top-k renormalised + Switch aux loss, untied head, no
biases; hybrid patterns of Mamba-2 (bench/torch_mamba.py), attention and MLP units), used two
ways:

  bench   times PyTorch's ways of running a training step on the workloads of WORKLOADS.md:
          eager, TE-style per-layer make_graphed_callables (attn; attn+mlp, or attn+router for
          MoE), one full-iteration torch.cuda.graph with capturable fused AdamW, torch.compile.
  parity  replays a short graphtrain run (written by `graphtrain bench --parity DIR`) in fp32
          and in bf16 (bf16 params, fp32 master weights) and compares losses and step-1
          gradients, printing max relative errors and PASS/FAIL per precision.

Examples:
  python3 bench/torch_reference.py bench --workloads tiny,gpt124m --json torch.json
  python3 bench/torch_reference.py parity /tmp/parity

Imports without torch or a GPU, so --help always works.
"""
import argparse
import gc
import json
import math
import os
import statistics
import struct
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # --help must work anywhere
    torch = None
    F = None
    nn = None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mamba  # noqa: E402 (the hybrid models' Mamba-2 unit; imports without torch)

PEAK_FLOPS = 790e12  # bf16 GEMM rate of one H200 (WORKLOADS.md)
GROUP_ALIGN = 16  # rows: grouped_mm groups start at multiples of this (zero padding between)

# name: vocab, d_model, layers, heads, kv heads, ffn, experts, top-k, expert ffn, seq, micro-batch
WORKLOADS = {
    "tiny": dict(vocab=32768, d=512, layers=8, heads=8, kv=8, ffn=1536, seq=256, mb=4),
    "gpt124m": dict(vocab=50304, d=768, layers=12, heads=12, kv=12, ffn=2048, seq=1024, mb=8),
    "llama1b": dict(vocab=32768, d=2048, layers=16, heads=16, kv=8, ffn=5632, seq=2048, mb=4),
    "moe": dict(vocab=32768, d=1024, layers=8, heads=16, kv=4, ffn=0, experts=64, topk=8,
                expert_ffn=384, seq=1024, mb=4, aux_coeff=1e-2),
    # small shapes for machines without a GPU (tests of this script itself)
    "micro": dict(vocab=256, d=64, layers=2, heads=4, kv=2, ffn=128, seq=32, mb=2),
    "micro_moe": dict(vocab=256, d=64, layers=2, heads=4, kv=2, ffn=0, experts=4, topk=2,
                      expert_ffn=32, seq=32, mb=2, aux_coeff=1e-2),
    # recipes/hybrid.yaml: a unit a layer, M Mamba-2, * attention, - MLP (Megatron's pattern)
    "hybrid": dict(vocab=32768, d=1024, layers=16, heads=16, kv=4, ffn=4096, seq=2048, mb=4,
                   pattern="M-M-M*M-M-M*M-M-"),
    "micro_hybrid": dict(vocab=256, d=64, layers=4, heads=4, kv=2, ffn=128, seq=40, mb=2,
                         pattern="M*M-", mamba_state=16, mamba_head_dim=16, mamba_groups=2,
                         mamba_chunk=16),
}
BENCH_MODES = ["eager", "te_attn", "te_attn_mlp", "full_iteration", "compile"]
# asked for by name only: torchao float8 training (tensorwise) + torch.compile, where torchao
# imports (scripts/fetch_torchao.sh brings a wheel)
FP8_BENCH_MODES = ["torchao_fp8"]

# Tolerances of parity: (torch precision, graphtrain precision) -> max relative errors.
# fp32 vs graphtrain's fp32 CPU backend differs only by summation order; bf16 on either side
# carries bf16 rounding (8 bits of mantissa) through every activation.
TOLERANCES = {
    ("fp32", "fp32"): dict(loss=1e-4, grad=1e-3),
    ("fp32", "bf16"): dict(loss=3e-2, grad=1e-1),
    ("bf16", "fp32"): dict(loss=3e-2, grad=1e-1),
    ("bf16", "bf16"): dict(loss=3e-2, grad=1e-1),
    # fp8 (bench/torch_fp8.py): the same recipe on both sides differs where a summation order
    # moves a value across an fp8 rounding boundary (one code, 2^-3 or 2^-2 relative)
    **{(r, r): dict(loss=3e-2, grad=1.5e-1) for r in ("fp8_cs", "fp8_ds", "fp8_sc")},
}
NOISE_FACTOR = 3.0  # comparisons involving bf16 also allow 3x PyTorch's own bf16-vs-fp32 error


def default_config(**shape):
    """Full hyper-parameter set (graphtrain's key defaults) around a workload shape."""
    c = dict(vocab=32768, d=512, layers=8, heads=8, kv=0, ffn=1536, experts=0, topk=2,
             expert_ffn=0, moe_layer_freq=1, capacity_factor=0.0, aux_coeff=0.0, seq=256, mb=4,
             global_batch=0, theta=10000.0, eps=1e-5, init_std=0.02, lr=3e-4, min_lr=3e-5,
             weight_decay=0.1, beta1=0.9, beta2=0.95, adam_eps=1e-8, clip=1.0,
             lr_style="cosine", warmup_iters=10, decay_iters=0, train_iters=100, seed=1234,
             pattern="", mamba_state=128, mamba_head_dim=64, mamba_groups=8, mamba_heads=0,
             mamba_expand=2, mamba_conv=4, mamba_chunk=128)
    c.update(shape)
    if not c["kv"]:
        c["kv"] = c["heads"]
    if c["experts"] and not c["expert_ffn"]:
        c["expert_ffn"] = c["ffn"]
    if not c["global_batch"]:
        c["global_batch"] = c["mb"]
    return c


def config_from_graphtrain(keys):
    """The reference config from graphtrain's config.json (dotted keys)."""
    pattern = keys.get("model.hybrid_override_pattern") or ""
    if set(pattern) - set(HYBRID_UNITS):
        raise SystemExit(f"parity: model.hybrid_override_pattern={pattern!r}: the reference "
                         f"model has the units {', '.join(HYBRID_UNITS)} only")
    for k, why in (("model.add_bias_linear", "linear biases"), ("model.add_qkv_bias", "qkv bias")):
        if keys.get(k):
            raise SystemExit(f"parity: {k}={keys[k]!r}: {why} are not in the reference model")
    m = lambda k: keys["model." + k]
    return default_config(
        vocab=m("vocab_size"), d=m("hidden_size"), layers=m("num_layers"),
        heads=m("num_attention_heads"), kv=m("num_query_groups"), ffn=m("ffn_hidden_size"),
        experts=m("num_moe_experts"), topk=m("moe_router_topk"),
        expert_ffn=m("moe_ffn_hidden_size"), moe_layer_freq=m("moe_layer_freq"),
        capacity_factor=max(0.0, m("moe_expert_capacity_factor")),
        aux_coeff=m("moe_aux_loss_coeff"), seq=m("seq_length"),
        mb=keys["train.micro_batch_size"], global_batch=keys["train.global_batch_size"],
        theta=m("rotary_base"), eps=m("layernorm_epsilon"), init_std=m("init_method_std"),
        lr=keys["optimizer.lr"], min_lr=keys["optimizer.min_lr"],
        weight_decay=keys["optimizer.weight_decay"], beta1=keys["optimizer.adam_beta1"],
        beta2=keys["optimizer.adam_beta2"], adam_eps=keys["optimizer.adam_eps"],
        clip=keys["optimizer.clip_grad"], lr_style=keys["scheduler.lr_decay_style"],
        warmup_iters=keys["scheduler.lr_warmup_iters"],
        decay_iters=keys["scheduler.lr_decay_iters"], train_iters=keys["train.train_iters"],
        seed=keys["rng.seed"], pattern=pattern, mamba_state=m("mamba_state_dim"),
        mamba_head_dim=m("mamba_head_dim"), mamba_groups=m("mamba_num_groups"),
        mamba_heads=m("mamba_num_heads") or 0, mamba_expand=m("mamba_expand"),
        mamba_conv=m("mamba_d_conv"), mamba_chunk=m("mamba_chunk_size"))


def lr_at(c, step):
    """graphtrain's schedule (step = optimizer steps completed, 0-based)."""
    warm, decay = c["warmup_iters"], c["decay_iters"] or c["train_iters"]
    if step < warm:
        return c["lr"] * (step + 1) / warm
    if c["lr_style"] == "constant":
        return c["lr"]
    if step >= decay:
        return c["min_lr"]
    r = (step - warm) / (decay - warm)
    if c["lr_style"] == "linear":
        return c["lr"] - r * (c["lr"] - c["min_lr"])
    return c["min_lr"] + 0.5 * (c["lr"] - c["min_lr"]) * (1.0 + math.cos(math.pi * r))


def flops_per_step(c):
    """WORKLOADS.md: 6 * N_active * tokens + 6 * layers * micro_batch * seq^2 * d_model."""
    d, H, KV = c["d"], c["heads"], c["kv"]
    hd = d // H
    n = c["vocab"] * d
    if c["pattern"]:  # a unit a layer; Mamba adds its scan (model_plan.c's flops_per_token)
        Hm, P, G, S, K, _ = torch_mamba.mamba_dims(c)
        di, units = Hm * P, {"*": d * (H + 2 * KV) * hd + H * hd * d, "-": 3 * d * c["ffn"]}
        units["M"] = (2 * di + 2 * G * S + Hm) * d + (di + 2 * G * S) * K + d * di
        n += sum(units[u] for u in c["pattern"])
        attn, scan = c["pattern"].count("*"), c["pattern"].count("M") * 12 * di * S
        tokens = c["global_batch"] * c["seq"]
        return 6 * n * tokens + 6 * attn * tokens * c["seq"] * d + scan * tokens
    for layer in range(c["layers"]):
        n += d * (H + 2 * KV) * hd + H * hd * d
        if c["experts"] and layer % c["moe_layer_freq"] == 0:
            n += d * c["experts"] + c["topk"] * 3 * d * c["expert_ffn"]
        else:
            n += 3 * d * c["ffn"]
    tokens = c["global_batch"] * c["seq"]
    return 6 * n * tokens + 6 * c["layers"] * c["global_batch"] * c["seq"] ** 2 * d


# ---------------------------------------------------------------------------------------------
# The model. Modules hold graphtrain's tensor names (see gt_name) so weights map one to one.

_Module = nn.Module if nn is not None else object


def rmsnorm(x, w, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w.float()).to(x.dtype)


def rope(x, cos, sin):
    """x [B, H, T, hd]; pairs (i, i + hd/2) rotate by t * theta^(-2i/hd)."""
    half = x.shape[-1] // 2
    x1, x2 = x.float()[..., :half], x.float()[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(x.dtype)


# The linear layers' GEMM: F.linear, or during an fp8 parity replay the recipe's emulation
# (bench/torch_fp8.py); router and head stay F.linear, as in graphtrain.
_FP8_LINEAR = {"fn": None}


def linear(x, w):
    return (_FP8_LINEAR["fn"] or F.linear)(x, w)


def swiglu(gu, f):
    g, u = gu.float()[..., :f], gu.float()[..., f:]
    return (F.silu(g) * u).to(gu.dtype)


class Attn(_Module):
    def __init__(self, c, dtype, device):
        super().__init__()
        d, H, KV = c["d"], c["heads"], c["kv"]
        self.c, self.hd = c, d // H
        self.norm_w = nn.Parameter(torch.ones(d, dtype=dtype, device=device))
        self.qkv_w = nn.Parameter(torch.empty((H + 2 * KV) * self.hd, d, dtype=dtype, device=device))
        self.o_w = nn.Parameter(torch.empty(d, H * self.hd, dtype=dtype, device=device))
        i = torch.arange(self.hd // 2, dtype=torch.float64, device=device)
        inv = c["theta"] ** (-2.0 * i / self.hd)
        ang = torch.arange(c["seq"], dtype=torch.float64, device=device)[:, None] * inv[None]
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, x):
        B, T, d = x.shape
        H, KV, hd = self.c["heads"], self.c["kv"], self.hd
        qkv = linear(rmsnorm(x, self.norm_w, self.c["eps"]), self.qkv_w)
        q, k, v = qkv.split([H * hd, KV * hd, KV * hd], -1)
        q = rope(q.view(B, T, H, hd).transpose(1, 2), self.cos, self.sin)
        k = rope(k.view(B, T, KV, hd).transpose(1, 2), self.cos, self.sin)
        v = v.view(B, T, KV, hd).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=KV != H)
        return x + linear(o.transpose(1, 2).reshape(B, T, H * hd), self.o_w)


class MLP(_Module):
    def __init__(self, c, dtype, device):
        super().__init__()
        d, f = c["d"], c["ffn"]
        self.c = c
        self.norm_w = nn.Parameter(torch.ones(d, dtype=dtype, device=device))
        self.gu_w = nn.Parameter(torch.empty(2 * f, d, dtype=dtype, device=device))
        self.down_w = nn.Parameter(torch.empty(d, f, dtype=dtype, device=device))

    def forward(self, x):
        gu = linear(rmsnorm(x, self.norm_w, self.c["eps"]), self.gu_w)
        return x + linear(swiglu(gu, self.c["ffn"]), self.down_w)


class MoERouter(_Module):
    """norm -> router logits -> softmax (fp32) -> top-k, weights renormalised to sum to 1."""

    def __init__(self, c, dtype, device):
        super().__init__()
        self.c = c
        self.norm_w = nn.Parameter(torch.ones(c["d"], dtype=dtype, device=device))
        self.router_w = nn.Parameter(torch.empty(c["experts"], c["d"], dtype=dtype, device=device))

    def forward(self, x):
        h = rmsnorm(x, self.norm_w, self.c["eps"])
        probs = torch.softmax(F.linear(h, self.router_w).float(), -1).flatten(0, 1)  # [N, E]
        topw, topi = probs.topk(self.c["topk"], -1)
        return h, probs, topw / topw.sum(-1, keepdim=True), topi


class MoEExperts(_Module):
    """Permutation (stable by token order), expert GEMMs, combine. Dropless unless capacity."""

    def __init__(self, c, dtype, device, grouped):
        super().__init__()
        E, d, fe = c["experts"], c["d"], c["expert_ffn"]
        self.c, self.grouped = c, grouped
        self.gu_w = nn.Parameter(torch.empty(E, 2 * fe, d, dtype=dtype, device=device))
        self.down_w = nn.Parameter(torch.empty(E, d, fe, dtype=dtype, device=device))

    def experts_loop(self, xe, host_offs):
        """Reference path: one GEMM pair per expert (host offsets, so not capturable)."""
        fe, outs = self.c["expert_ffn"], []
        for e, (s, t) in enumerate(zip([0] + host_offs[:-1], host_offs)):
            outs.append(swiglu(xe[s:t] @ self.gu_w[e].t(), fe) @ self.down_w[e].t())
        return torch.cat(outs, 0)

    def experts_grouped(self, xe, rank, e_sorted, counts):
        """grouped_mm over device offsets (capturable); every group starts at a multiple of
        GROUP_ALIGN rows (zero padding), as grouped GEMM kernels want aligned groups."""
        E, d, A = self.c["experts"], xe.shape[1], GROUP_ALIGN
        padded = (counts + A - 1) // A * A
        poffs = torch.cumsum(padded, 0, dtype=torch.int32)
        dest = (poffs - padded)[e_sorted] + rank
        xp = xe.new_zeros(xe.shape[0] + E * (A - 1), d).index_put((dest,), xe)
        hp = swiglu(F.grouped_mm(xp, self.gu_w.transpose(1, 2), offs=poffs), self.c["expert_ffn"])
        return F.grouped_mm(hp, self.down_w.transpose(1, 2), offs=poffs)[dest]

    def forward(self, h, topw, topi):
        c = self.c
        N, k, E = topi.shape[0], c["topk"], c["experts"]
        flat = topi.flatten()
        order = torch.sort(flat, stable=True).indices  # row r holds assignment order[r]
        counts = torch.zeros(E, dtype=torch.int32, device=h.device)
        counts.scatter_add_(0, flat.int(), torch.ones_like(flat, dtype=torch.int32))
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        e_sorted = flat[order]
        rank = torch.arange(N * k, device=h.device) - (offs - counts)[e_sorted]  # in its expert
        xe = h.flatten(0, 1)[order // k]
        if self.grouped:
            ye = self.experts_grouped(xe, rank, e_sorted, counts)
        else:
            ye = self.experts_loop(xe, offs.tolist())
        if c["capacity_factor"] > 0:  # drop assignments past the capacity of their expert
            cap = math.ceil(c["capacity_factor"] * N * k / E)
            ye = ye * (rank < cap).to(ye.dtype)[:, None]
        back = torch.empty_like(order)
        back[order] = torch.arange(N * k, device=h.device)
        ye = ye[back].view(N, k, -1)  # assignment order n*k + j
        y = (ye.float() * topw[..., None]).sum(1)
        return y.to(h.dtype), counts


class Layer(_Module):
    def __init__(self, c, moe, dtype, device, grouped):
        super().__init__()
        self.c, self.moe = c, moe
        self.attn = Attn(c, dtype, device)
        if moe:
            self.moe_router = MoERouter(c, dtype, device)
            self.moe_experts = MoEExperts(c, dtype, device, grouped)
        else:
            self.mlp = MLP(c, dtype, device)

    def forward(self, x, aux):
        x = self.attn(x)
        if not self.moe:
            return self.mlp(x), aux
        h, probs, topw, topi = self.moe_router(x)
        y, counts = self.moe_experts(h, topw, topi)
        c = self.c
        N, k, E = topi.shape[0], c["topk"], c["experts"]
        if c["aux_coeff"] > 0:  # Switch: coeff * E * sum_e f_e * P_e
            aux = aux + c["aux_coeff"] * E * (counts.float() / (N * k) * probs.mean(0)).sum()
        return x + y.view_as(x), aux


HYBRID_UNITS = {"M": "mamba", "*": "attn", "-": "mlp"}


class HybridLayer(_Module):
    """One unit of a hybrid pattern (its pre-norm and residual inside the unit)."""

    def __init__(self, c, unit, dtype, device):
        super().__init__()
        self.kind, self.moe = HYBRID_UNITS[unit], False
        cls = {"mamba": torch_mamba.Mamba, "attn": Attn, "mlp": MLP}[self.kind]
        setattr(self, self.kind, cls(c, dtype, device))

    def forward(self, x, aux):
        return getattr(self, self.kind)(x), aux


class Model(_Module):
    def __init__(self, c, dtype, device, grouped=False):
        super().__init__()
        self.c = c
        d, V = c["d"], c["vocab"]
        self.wte = nn.Parameter(torch.empty(V, d, dtype=dtype, device=device))
        if c["pattern"]:
            self.layers = nn.ModuleList(HybridLayer(c, u, dtype, device) for u in c["pattern"])
        else:
            self.layers = nn.ModuleList(
                Layer(c, bool(c["experts"]) and i % c["moe_layer_freq"] == 0, dtype, device,
                      grouped) for i in range(c["layers"]))
        self.final_w = nn.Parameter(torch.ones(d, dtype=dtype, device=device))
        self.lm_w = nn.Parameter(torch.empty(V, d, dtype=dtype, device=device))

    def init_weights(self, seed):
        g = torch.Generator(device=self.wte.device).manual_seed(seed)
        for n, p in self.named_parameters():
            if p.ndim >= 2 and not n.endswith("conv1d_w"):
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g, device=p.device) * self.c["init_std"])

    def forward(self, tokens, targets, blocks=None):
        """Returns (mean cross-entropy, aux loss). blocks: per-layer callables replacing
        attn / mlp / router (TE-style graphs)."""
        x = F.embedding(tokens, self.wte)
        aux = torch.zeros((), device=x.device)
        for i, layer in enumerate(self.layers):
            if blocks is None:
                x, aux = layer(x, aux)
                continue
            if isinstance(layer, HybridLayer):
                x = blocks[i][layer.kind](x)
                continue
            x = blocks[i]["attn"](x)
            if not layer.moe:
                x = blocks[i]["mlp"](x)
                continue
            h, probs, topw, topi = blocks[i]["router"](x)
            y, counts = layer.moe_experts(h, topw, topi)
            c = self.c
            if c["aux_coeff"] > 0:
                aux = aux + c["aux_coeff"] * c["experts"] * (
                    counts.float() / (topi.shape[0] * c["topk"]) * probs.mean(0)).sum()
            x = x + y.view_as(x)
        logits = F.linear(rmsnorm(x, self.final_w, self.c["eps"]), self.lm_w)
        ce = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-1,
                             reduction="sum") / targets.numel()
        return ce, aux


def gt_name(torch_name):
    """graphtrain's tensor name (gt_model_tensor) of a parameter of Model."""
    n = torch_name.replace("moe_router.", "moe.").replace("moe_experts.", "moe.")
    return {"wte": "embedding.wte", "lm_w": "lm_head.w", "final_w": "final_norm.w"}.get(n, n)


# ---------------------------------------------------------------------------------------------
# Optimizer: AdamW over fp32 master weights (the params themselves in fp32), decay on matrices.

class MasterAdamW:
    def __init__(self, model, c, fused):
        self.c = c
        self.params = [p for p in model.parameters()]
        for p in self.params:
            p.grad = torch.zeros_like(p)  # static gradient buffers (graph-safe)
        self.mixed = self.params[0].dtype != torch.float32
        if self.mixed:
            self.masters = [p.detach().float().clone() for p in self.params]
            for m in self.masters:
                m.grad = torch.zeros_like(m)
        else:
            self.masters = self.params
        decay = [m for m, p in zip(self.masters, self.params) if p.ndim >= 2]
        rest = [m for m, p in zip(self.masters, self.params) if p.ndim < 2]
        groups = [dict(params=decay, weight_decay=c["weight_decay"]),
                  dict(params=rest, weight_decay=0.0)]
        kw = dict(fused=True, capturable=True) if fused else dict(foreach=False)
        self.opt = torch.optim.AdamW(groups, lr=c["lr"], betas=(c["beta1"], c["beta2"]),
                                     eps=c["adam_eps"], **kw)

    def step(self):
        # in-place updates of leaf parameters (bf16 copies of the masters); no decorator, so the
        # module still imports without torch
        with torch.no_grad():
            self._step()

    def _step(self):
        grads = [m.grad for m in self.masters]
        if self.mixed:
            torch._foreach_copy_(grads, [p.grad for p in self.params])
        if self.c["clip"] > 0:
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            torch._foreach_mul_(grads, torch.clamp(self.c["clip"] / (norm + 1e-6), max=1.0))
        self.opt.step()
        if self.mixed:
            torch._foreach_copy_(self.params, self.masters)
        torch._foreach_zero_([p.grad for p in self.params])


# ---------------------------------------------------------------------------------------------
# bench

def bench_one(c, mode, steps, warmup, device):
    """Times one (workload, mode); returns a result dict."""
    torch.manual_seed(c["seed"])
    grouped = device.type == "cuda" and hasattr(F, "grouped_mm") and bool(c["experts"])
    model = Model(c, torch.bfloat16 if device.type == "cuda" else torch.float32, device, grouped)
    model.init_weights(c["seed"])
    opt = MasterAdamW(model, c, fused=device.type == "cuda")
    B, T, V = c["mb"], c["seq"], c["vocab"]
    g = torch.Generator(device=device).manual_seed(c["seed"])
    batches = [torch.randint(0, V, (B, T + 1), generator=g, device=device) for _ in range(8)]
    tokens, targets = batches[0][:, :-1].clone(), batches[0][:, 1:].clone()

    blocks, fwd = None, model
    if mode == "compile":
        fwd = torch.compile(model)
    if mode == "torchao_fp8":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import torch_fp8
        _FP8_LINEAR["fn"] = torch_fp8.torchao_linear(model)
        fwd = torch.compile(model)
    if mode in ("te_attn", "te_attn_mlp"):
        if device.type != "cuda":
            raise RuntimeError("TE-style graphs need CUDA")
        mods, slots = [], []
        for i, layer in enumerate(model.layers):
            if isinstance(layer, HybridLayer):  # te_attn: attention units; te_attn_mlp: all
                if mode == "te_attn_mlp" or layer.kind == "attn":
                    mods.append(getattr(layer, layer.kind))
                    slots.append((i, layer.kind))
                continue
            mods.append(layer.attn)
            slots.append((i, "attn"))
            if mode == "te_attn_mlp":
                mods.append(layer.moe_router if layer.moe else layer.mlp)
                slots.append((i, "router" if layer.moe else "mlp"))
        # one static input per graph: a graph's saved activations point into its own input
        sample = tuple((torch.randn(B, T, c["d"], dtype=torch.bfloat16, device=device,
                                    requires_grad=True),) for _ in mods)
        graphed = torch.cuda.make_graphed_callables(tuple(mods), sample)
        blocks = [{k: getattr(l, k, None) for k in ("attn", "mlp", "mamba", "moe_router")}
                  for l in model.layers]
        for b in blocks:
            b["router"] = b.pop("moe_router")
        for (i, kind), gm in zip(slots, graphed):
            blocks[i][kind] = gm
        torch._foreach_zero_([p.grad for p in opt.params])  # warmup of the capture left grads

    def step():
        ce, aux = fwd(tokens, targets, blocks) if blocks else fwd(tokens, targets)
        (ce + aux).backward()
        opt.step()
        return ce.detach()

    graph = None
    losses, times = [], []
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t_capture = 0.0
    if mode == "full_iteration":
        if device.type != "cuda":
            raise RuntimeError("full-iteration graphs need CUDA")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                losses.append(step())
        torch.cuda.current_stream().wait_stream(side)
        sync()
        t0 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step()
        sync()
        t_capture = (time.perf_counter() - t0) * 1e3

    def run_step(i):
        b = batches[i % len(batches)]
        tokens.copy_(b[:, :-1])
        targets.copy_(b[:, 1:])
        if graph is not None:
            graph.replay()
            return static_loss.clone()
        return step()

    for i in range(warmup):
        losses.append(run_step(i))
    sync()
    for i in range(steps):
        if device.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            losses.append(run_step(i))
            e1.record()
            times.append((e0, e1))
        else:
            t0 = time.perf_counter()
            losses.append(run_step(i))
            times.append((time.perf_counter() - t0) * 1e3)
    sync()
    ms = [a.elapsed_time(b) for a, b in times] if device.type == "cuda" else times
    med = statistics.median(ms)
    fl = flops_per_step(c)
    res = dict(mode=mode, median_ms=med, min_ms=min(ms), max_ms=max(ms), steps=steps,
               tokens_per_s=B * T / (med * 1e-3), tflops=fl / (med * 1e-3) / 1e12,
               mfu=fl / (med * 1e-3) / PEAK_FLOPS, capture_ms=t_capture,
               losses=[float(x) for x in losses[:10]])
    if device.type == "cuda":
        res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        res["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    del model, opt, graph, blocks, fwd
    return res


def cmd_bench(a):
    if torch is None:
        raise SystemExit("bench needs PyTorch (python3 -m pip install torch)")
    device = torch.device(a.device if a.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    out = dict(torch=torch.__version__, device=str(device),
               gpu=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), steps=a.steps,
               warmup=a.warmup, results=[])
    t_start = time.time()
    for w in a.workloads.split(","):
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; known: {', '.join(WORKLOADS)}")
        c = default_config(**WORKLOADS[w])
        for mode in a.modes.split(","):
            if mode not in BENCH_MODES + FP8_BENCH_MODES:
                raise SystemExit(f"unknown mode {mode!r}; known: "
                                 f"{', '.join(BENCH_MODES + FP8_BENCH_MODES)}")
            if a.time_budget and time.time() - t_start > a.time_budget:
                r = dict(mode=mode, error="skipped: --time-budget spent")
            else:
                try:
                    r = bench_one(c, mode, a.steps, a.warmup, device)
                except Exception as e:  # one failing mode must not hide the others
                    r = dict(mode=mode, error=f"{type(e).__name__}: {str(e)[:300]}")
                finally:
                    _FP8_LINEAR["fn"] = None
            r["workload"] = w
            out["results"].append(r)
            print_row(r)
            if a.json:  # after every result, so a run cut short keeps what it measured
                with open(a.json, "w") as f:
                    json.dump(out, f, indent=1)
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return 0


def print_row(r, header=[True]):
    if header[0]:
        print(f"{'workload':10} {'mode':15} {'median_ms':>10} {'min_ms':>9} {'max_ms':>9} "
              f"{'tokens/s':>11} {'TFLOP/s':>8} {'MFU':>6} {'peak_GiB':>9}")
        header[0] = False
    if "error" in r:
        print(f"{r['workload']:10} {r['mode']:15} FAILED {r['error']}", flush=True)
        return
    peak = r.get("peak_reserved_bytes", 0) / 2**30
    print(f"{r['workload']:10} {r['mode']:15} {r['median_ms']:10.3f} {r['min_ms']:9.3f} "
          f"{r['max_ms']:9.3f} {r['tokens_per_s']:11.0f} {r['tflops']:8.2f} "
          f"{100 * r['mfu']:5.1f}% {peak:9.2f}", flush=True)


# ---------------------------------------------------------------------------------------------
# parity: file formats written by graphtrain (bench/weights_io.h, bench/parity.c)

def read_weights(path):
    """GTWT file -> list of (name, shape, fp32 tensor)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n, _, total, _ = struct.unpack_from("<IIIIQQ", data, 0)
    if magic != 0x54575447 or version != 1:
        raise SystemExit(f"{path}: not a graphtrain weights file version 1")
    out, at = [], 32 + 96 * n
    values = torch.frombuffer(bytearray(data[at:]), dtype=torch.float32)
    if values.numel() != total:
        raise SystemExit(f"{path}: {values.numel()} values, header says {total}")
    pos = 0
    for i in range(n):
        rec = data[32 + 96 * i: 32 + 96 * (i + 1)]
        name = rec[:64].split(b"\0", 1)[0].decode()
        ndim, s0, s1, s2, numel, _ = struct.unpack_from("<IIIIQQ", rec, 64)
        shape = (s0, s1, s2)[:ndim]
        out.append((name, shape, values[pos:pos + numel].view(shape)))
        pos += numel
    return out


def read_tokens(path):
    """GTTK file -> list (per step) of lists (per micro-batch) of (tokens, targets) [B, T]."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, steps, micro, B, T = struct.unpack_from("<IIIIII", data, 0)
    if magic != 0x4B545447 or version != 1:
        raise SystemExit(f"{path}: not a graphtrain token file version 1")
    ids = torch.frombuffer(bytearray(data[32:]), dtype=torch.int32).long()
    ids = ids.view(steps, micro, 2, B, T)
    return [[(ids[s, m, 0], ids[s, m, 1]) for m in range(micro)] for s in range(steps)]


def rel(a, b):
    """||a - b|| / ||b|| (0 when both are 0)."""
    nb = float(torch.linalg.vector_norm(b.double()))
    nd = float(torch.linalg.vector_norm(a.double() - b.double()))
    return nd / nb if nb > 0 else nd


def replay(c, weights, batches, precision, device, fp8=None, fp8_dtype=None):
    """Runs the steps in PyTorch; returns (losses, aux, lrs, grad_norms, step-1 grads by name).
    AdamW here mirrors graphtrain's update exactly (fp32 moments, bias correction, decoupled
    decay on matrices applied before the step, clipping coefficient min(1, clip / (norm + 1e-6))).
    An fp8 replay runs its activations in fp8_dtype (default: fp32 on the CPU, as graphtrain's
    CPU emulation keeps them, bf16 on a GPU, as its CUDA backend does)."""
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    if fp8 is not None:
        import torch_fp8
        dtype = fp8_dtype or (torch.float32 if device.type == "cpu" else torch.bfloat16)
        _FP8_LINEAR["fn"] = torch_fp8.make_linear(fp8)
    model = Model(c, dtype, device)
    by_name = {name: t for name, _, t in weights}
    named = [(gt_name(n), p) for n, p in model.named_parameters()]
    missing = [n for n, _ in named if n not in by_name]
    if missing or len(named) != len(by_name):
        raise SystemExit(f"parity: weights file and reference model disagree: missing {missing}, "
                         f"file has {sorted(set(by_name) - {n for n, _ in named})}")
    masters = []
    for n, p in named:
        if tuple(p.shape) != tuple(by_name[n].shape):
            raise SystemExit(f"parity: {n}: shape {tuple(by_name[n].shape)} in the file, "
                             f"{tuple(p.shape)} in the reference model")
        m = by_name[n].to(device=device, dtype=torch.float32).clone()
        masters.append(m)
        with torch.no_grad():
            p.copy_(m)
    ms = [torch.zeros_like(m) for m in masters]
    vs = [torch.zeros_like(m) for m in masters]
    losses, auxes, lrs, norms, grads1 = [], [], [], [], {}
    for step, micro in enumerate(batches):
        for p in model.parameters():
            p.grad = None
        ce_sum, aux_sum = 0.0, 0.0
        for tok, tgt in micro:
            ce, aux = model(tok.to(device), tgt.to(device))
            ((ce + aux) / len(micro)).backward()
            ce_sum += float(ce.detach()) / len(micro)
            aux_sum += float(aux.detach()) / len(micro)
        grads = [p.grad.double() for _, p in named]
        if step == 0:
            grads1 = {n: g.float().cpu() for (n, _), g in zip(named, grads)}
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        coef = min(1.0, c["clip"] / (norm + 1e-6)) if c["clip"] > 0 else 1.0
        lr = lr_at(c, step)
        t = step + 1
        bc1, bc2 = 1 - c["beta1"] ** t, 1 - c["beta2"] ** t
        with torch.no_grad():
            for (n, p), w, m, v, g in zip(named, masters, ms, vs, grads):
                g = g * coef
                m.copy_(c["beta1"] * m.double() + (1 - c["beta1"]) * g)
                v.copy_(c["beta2"] * v.double() + (1 - c["beta2"]) * g * g)
                # decay first, then the step (graphtrain's order, and PyTorch's fused AdamW's)
                wd = w.double()
                if p.ndim >= 2:
                    wd = wd - lr * c["weight_decay"] * wd
                denom = torch.sqrt(v.double()) / math.sqrt(bc2) + c["adam_eps"]
                w.copy_(wd - (lr / bc1) * m.double() / denom)
                p.copy_(w)
        if fp8 is not None:
            fp8.step_end()
        losses.append(ce_sum)
        auxes.append(aux_sum)
        lrs.append(lr)
        norms.append(norm)
    _FP8_LINEAR["fn"] = None
    return losses, auxes, lrs, norms, grads1


def cmd_parity(a):
    if torch is None:
        raise SystemExit("parity needs PyTorch (python3 -m pip install torch)")
    d = a.dir
    for name in ("config.json", "graphtrain_losses.json", "weights.gtw", "grads_step1.gtw",
                 "tokens.bin"):
        if not os.path.isfile(os.path.join(d, name)):
            raise SystemExit(f"parity: {os.path.join(d, name)} is missing; write the folder "
                             f"with `graphtrain bench [config] --parity {d}` first")
    with open(os.path.join(d, "config.json")) as f:
        c = config_from_graphtrain(json.load(f))
    with open(os.path.join(d, "graphtrain_losses.json")) as f:
        gt = json.load(f)
    weights = read_weights(os.path.join(d, "weights.gtw"))
    gt_grads = {n: t for n, _, t in read_weights(os.path.join(d, "grads_step1.gtw"))}
    batches = read_tokens(os.path.join(d, "tokens.bin"))[: gt["steps"]]
    device = torch.device(a.device if a.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open(os.path.join(d, "config.json")) as f:
        keys = json.load(f)
    dtype = keys.get("model.compute_dtype", "bf16")
    gt_prec = "fp32" if gt["backend"] == "cpu" or dtype == "fp32" else "bf16"
    if dtype.startswith("fp8_"):  # the same recipe, emulated (bench/torch_fp8.py)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import torch_fp8
        gt_prec = dtype
        engine = "scaled" if device.type == "cuda" and dtype != "fp8_sc" else "emulate"
        if a.precisions == "fp32,bf16":
            a.precisions = dtype
    print(f"parity: graphtrain on {gt['backend']} ({gt_prec}), {gt['steps']} steps, "
          f"reference on {device}")
    precs = a.precisions.split(",")
    if any(p.startswith("fp8_") and p != gt_prec for p in precs):
        raise SystemExit(f"parity: an fp8 recipe replays only a graphtrain run of that recipe "
                         f"(this one ran {gt_prec}); drop it from --precisions")
    runs = {p: replay(c, weights, batches, p, device,
                      torch_fp8.state_from_graphtrain(keys, p, engine) if p.startswith("fp8_")
                      else None)
            for p in precs}
    # bf16's own noise, PyTorch bf16 against PyTorch fp32: comparisons that involve bf16 allow
    # NOISE_FACTOR times it (MoE routing flips make it large), never less than the table
    noise_loss, noise = 0.0, {}
    if "fp32" in runs and "bf16" in runs:
        (l32, g32), (l16, g16) = (runs["fp32"][0], runs["fp32"][4]), (runs["bf16"][0], runs["bf16"][4])
        noise_loss = max(abs(x - y) / abs(y) for x, y in zip(l16, l32))
        noise = {n: rel(g16[n], g32[n]) for n in g32}
        worst = max(noise, key=noise.get)
        print(f"  torch bf16 vs torch fp32 (bf16 noise): loss {noise_loss:.3e}, grads "
              f"{noise[worst]:.3e} in {worst}")
    fp8_noisy = gt_prec.startswith("fp8_") and device.type == "cuda"
    if fp8_noisy:
        # fp8 on a GPU carries bf16 activations: a value that bf16 rounding moves across an fp8
        # rounding boundary lands a whole fp8 step (2^-3 relative, E4M3; 2^-2, E5M2) away. The
        # same recipe replayed with fp32 activations (exact emulation) against the bf16 replay
        # measures that sensitivity; graphtrain may differ from the bf16 replay by
        # NOISE_FACTOR times it, as the bf16 comparisons allow.
        ref = runs[gt_prec]
        f32 = replay(c, weights, batches, gt_prec, device,
                     torch_fp8.state_from_graphtrain(keys, gt_prec, "emulate"), torch.float32)
        noise_loss = max(abs(x - y) / abs(y) for x, y in zip(ref[0], f32[0]))
        noise = {n: rel(ref[4][n], f32[4][n]) for n in f32[4]}
        worst = max(noise, key=noise.get)
        print(f"  torch {gt_prec} bf16 vs the same recipe in fp32 (fp8 noise): loss "
              f"{noise_loss:.3e}, grads {noise[worst]:.3e} in {worst}")
    ok = True
    for prec in precs:
        losses, auxes, lrs, norms, grads = runs[prec]
        tol = TOLERANCES[(prec, gt_prec)]
        bf16 = "bf16" in (prec, gt_prec) or fp8_noisy
        tol_loss = max(tol["loss"], NOISE_FACTOR * noise_loss) if bf16 else tol["loss"]
        loss_err = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(losses, gt["loss"]))
        lr_err = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(lrs, gt["lr"]))
        errs = {n: rel(gt_grads[n], g) for n, g in grads.items()}
        tols = {n: max(tol["grad"], NOISE_FACTOR * noise.get(n, 0.0)) if bf16 else tol["grad"]
                for n in errs}
        worst = max(errs, key=lambda n: errs[n] / tols[n])
        all_err = rel(torch.cat([gt_grads[n].flatten() for n in grads]),
                      torch.cat([g.flatten() for g in grads.values()]))
        passed = loss_err <= tol_loss and errs[worst] <= tols[worst] and lr_err <= 1e-5
        ok &= passed
        print(f"  {prec:5} loss max rel err {loss_err:.3e} (tol {tol_loss:.1e}), "
              f"grad rel err {errs[worst]:.3e} in {worst} (tol {tols[worst]:.1e}; worst against "
              f"its tolerance), all grads {all_err:.3e}, lr {lr_err:.1e}: "
              f"{'PASS' if passed else 'FAIL'}")
        for s, (x, y) in enumerate(zip(losses, gt["loss"])):
            if a.verbose or s < 3 or s == len(losses) - 1:
                print(f"    step {s + 1:3}  graphtrain {y:.7f}  torch {x:.7f}  "
                      f"aux {gt['aux_loss'][s]:.3g}/{auxes[s]:.3g}  "
                      f"grad_norm {gt['grad_norm'][s]:.5g}/{norms[s]:.5g}")
        if abs(losses[0] - gt["loss"][0]) > 0.1 * abs(gt["loss"][0]):
            print("    hint: step 1 differs by >10%: the token batches or the initial weights "
                  "do not match what graphtrain used")
    print(f"parity: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------
# compare: one markdown table from graphtrain bench JSONs and torch bench JSONs (no torch needed)

def cmd_compare(a):
    gt_modes = ["eager", "attn", "attn+mlp", "full_iteration"]
    tr_modes = BENCH_MODES
    gt, tr = {}, {}
    for path in filter(None, a.graphtrain.split(",")):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"compare: skipping {path}: {e}", file=sys.stderr)
            continue
        for m in d["modes"]:
            # per-layer graphs of every unit: attn+moe_router for MoE, attn+mlp+mamba hybrid
            name = ("attn+mlp" if m["mode"].startswith(("attn+moe_router", "attn+mlp+mamba"))
                    else m["mode"])
            if m.get("ok"):
                gt.setdefault(d["workload"], {})[name] = m
        gt.setdefault(d["workload"], {})["_identical"] = d.get("losses_identical")
    for path in filter(None, a.torch.split(",")):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"compare: skipping {path}: {e}", file=sys.stderr)
            continue
        for r in d["results"]:
            if "error" not in r:
                tr.setdefault(r["workload"], {})[r["mode"]] = r
    fmt = lambda r: f"{r['median_ms']:.2f}" if r else "-"
    print("ms per step, median (graphtrain: gt_*, PyTorch: pt_*); ratio = best PyTorch / best graphtrain\n")
    print("| workload | " + " | ".join("gt_" + m for m in gt_modes) + " | " +
          " | ".join("pt_" + m for m in tr_modes) + " | ratio | MFU gt best | gt peak/eager max | losses identical |")
    print("|" + "---|" * (len(gt_modes) + len(tr_modes) + 5))
    for w in sorted(set(gt) | set(tr), key=lambda w: list(WORKLOADS).index(w) if w in WORKLOADS else 99):
        g, t = gt.get(w, {}), tr.get(w, {})
        gbest = min((g[m]["median_ms"] for m in gt_modes if m in g), default=None)
        tbest = min((t[m]["median_ms"] for m in tr_modes if m in t), default=None)
        ratio = f"{tbest / gbest:.2f}x" if gbest and tbest else "-"
        # a PyTorch mode measured for other workloads but not this one (a failure or a time
        # limit) may have been the best: the ratio says which modes it leaves out
        missing = [m for m in tr_modes if m not in t]
        if tbest and missing:
            ratio += " (without " + ", ".join(missing) + ")"
        mfu = max((g[m]["mfu"] for m in gt_modes if m in g), default=None)
        peak = max((g[m]["peak_ratio_to_eager"] for m in gt_modes
                    if m in g and g[m].get("peak_ratio_to_eager") is not None), default=None)
        print(f"| {w} | " + " | ".join(fmt(g.get(m)) for m in gt_modes) + " | " +
              " | ".join(fmt(t.get(m)) for m in tr_modes) +
              f" | {ratio} | {f'{100 * mfu:.1f}%' if mfu is not None else '-'} | "
              f"{f'{peak:.3f}' if peak is not None else '-'} | {g.get('_identical', '-')} |")
    if a.plot:
        return plot_compare(gt, tr, gt_modes, tr_modes, a.plot)
    return 0


def _xml(text):
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def plot_compare(gt, tr, gt_modes, tr_modes, path):
    """compare --plot: an SVG with a panel a workload, a bar a mode (graphtrain in blue, PyTorch
    in orange, each panel on its own ms scale), the ratio of the best of each in the title."""
    if not path.endswith(".svg"):
        print(f"compare: --plot writes an SVG image; name the file *.svg (got {path!r})",
              file=sys.stderr)
        return 2
    order = sorted(set(gt) | set(tr), key=lambda w: list(WORKLOADS).index(w) if w in WORKLOADS else 99)
    label_w, bar_w, row, width = 170, 520, 20, 900
    out, y = [], 40
    for w in order:
        g, t = gt.get(w, {}), tr.get(w, {})
        rows = [("gt " + m, g[m]["median_ms"], "gt") for m in gt_modes if m in g]
        rows += [("pt " + m, t[m]["median_ms"], "pt") for m in tr_modes if m in t]
        if not rows:
            continue
        gbest = min(((v, n) for n, v, k in rows if k == "gt"), default=None)
        tbest = min(((v, n) for n, v, k in rows if k == "pt"), default=None)
        title = w
        if gbest and tbest:
            title += (f": best PyTorch {tbest[0]:.2f} ms ({tbest[1][3:]}) / best graphtrain "
                      f"{gbest[0]:.2f} ms ({gbest[1][3:]}) = {tbest[0] / gbest[0]:.2f}x")
        out.append(f'<text x="12" y="{y + 14}" font-weight="bold">{_xml(title)}</text>')
        y += 24
        top = max(v for _, v, _ in rows)
        for name, v, kind in rows:
            bw = bar_w * v / top
            out.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end">{_xml(name)}</text>')
            out.append(f'<rect class="{kind}" x="{label_w}" y="{y + 3}" width="{bw:.1f}" '
                       f'height="{row - 6}"/>')
            out.append(f'<text x="{label_w + bw + 6:.1f}" y="{y + 14}">{v:.2f} ms</text>')
            y += row
        y += 14
    with open(path, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 10}" '
                'font-family="sans-serif" font-size="12">\n'
                '<style>.gt{fill:#2b5797}.pt{fill:#e08a2c}</style>\n'
                '<rect width="100%" height="100%" fill="white"/>\n'
                '<text x="12" y="22" font-size="15" font-weight="bold">ms per step, median: '
                'graphtrain (gt, blue) and PyTorch (pt, orange) side by side</text>\n')
        f.write("\n".join(out) + "\n</svg>\n")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="time PyTorch on the WORKLOADS.md workloads")
    b.add_argument("--workloads", default="tiny,gpt124m,llama1b,moe")
    b.add_argument("--modes", default=",".join(BENCH_MODES),
                   help=", ".join(BENCH_MODES + FP8_BENCH_MODES))
    b.add_argument("--steps", type=int, default=20, help="timed steps (median over them)")
    b.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    b.add_argument("--device", default="auto", help="auto, cuda or cpu")
    b.add_argument("--time-budget", type=float, default=0, help="seconds; skip what is left after")
    b.add_argument("--json", help="write the results here")
    q = sub.add_parser("parity", help="compare with a graphtrain run (bench --parity DIR)")
    q.add_argument("dir")
    q.add_argument("--precisions", default="fp32,bf16")
    q.add_argument("--device", default="auto")
    q.add_argument("--verbose", action="store_true", help="print every step")
    r = sub.add_parser("compare", help="markdown table of graphtrain and PyTorch bench JSONs")
    r.add_argument("--graphtrain", default="", help="comma-separated `graphtrain bench --json` files")
    r.add_argument("--torch", default="", help="comma-separated `bench --json` files of this script")
    r.add_argument("--plot", help="also draw the table as an SVG (one panel a workload)")
    a = p.parse_args(argv)
    return {"bench": cmd_bench, "parity": cmd_parity, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
