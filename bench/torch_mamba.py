"""The Mamba-2 layer of graphtrain's hybrid models (model/model_mamba.c) in plain PyTorch, for
bench/torch_reference.py: rmsnorm -> in_proj (z | x | B | C | dt) -> causal depthwise conv1d +
SiLU over xBC -> SSD (dt + dt_bias through softplus, A = -exp(A_log), D skip) in mamba_ssm's
chunked form (ssd_minimal: segsum within chunks, states passed between chunks) -> RMSNorm gated
by z per group (Megatron's, norm after the gate) -> out_proj -> residual add. Parameter names
are graphtrain's (layers.N.mamba.*), so weights map one to one. Imports without torch.
"""
import math

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # torch_reference.py --help must work anywhere
    torch = None
    F = None
    nn = None

# MambaMixer's initial values (model_mamba.c uses the same)
A_INIT = (1.0, 16.0)
DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 1e-1, 1e-4


def mamba_dims(c):
    """(heads, head dim, groups, state, conv width, chunk) from the reference config."""
    P = c["mamba_head_dim"]
    H = c["mamba_heads"] or c["mamba_expand"] * c["d"] // P
    return H, P, c["mamba_groups"], c["mamba_state"], c["mamba_conv"], c["mamba_chunk"]


def segsum(x):
    """x [..., L] -> [..., L, L]: out[i, j] = sum_{j < k <= i} x[k] for j <= i, -inf above
    (mamba_ssm's ssd_minimal segsum, the stable form)."""
    L = x.shape[-1]
    x = x[..., None].expand(*x.shape, L)
    below = torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device), -1)
    s = torch.cumsum(x.masked_fill(~below, 0), dim=-2)
    return s.masked_fill(~torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device)),
                         -math.inf)


def ssd_chunked(x, dt, A, Bm, Cm, chunk):
    """y = the SSD scan from zero state, chunked as mamba_ssm's ssd_minimal_discrete computes it.
    x [B, T, H, P], dt [B, T, H] (after softplus), A [H], Bm, Cm [B, T, G, S]; fp32 in and out.
    A sequence that the chunk does not divide is padded with dt = 0 (no decay, no input)."""
    Bn, T, H, P = x.shape
    G = Bm.shape[2]
    pad = (-T) % chunk
    if pad:
        x, dt = F.pad(x, (0, 0, 0, 0, 0, pad)), F.pad(dt, (0, 0, 0, pad))
        Bm, Cm = F.pad(Bm, (0, 0, 0, 0, 0, pad)), F.pad(Cm, (0, 0, 0, 0, 0, pad))
    nc = x.shape[1] // chunk
    Bh = Bm.repeat_interleave(H // G, dim=2)  # [B, T', H, S]
    Ch = Cm.repeat_interleave(H // G, dim=2)
    X = (x * dt[..., None]).reshape(Bn, nc, chunk, H, P)
    Bc = Bh.reshape(Bn, nc, chunk, H, -1)
    Cc = Ch.reshape(Bn, nc, chunk, H, -1)
    a = (dt * A).reshape(Bn, nc, chunk, H).permute(0, 3, 1, 2)  # [B, H, c, l]
    a_cs = torch.cumsum(a, dim=-1)
    # 1. within chunks: (C B^T masked by the decay) x
    Lm = torch.exp(segsum(a))
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cc, Bc, Lm, X)
    # 2. each chunk's own state
    decay_states = torch.exp(a_cs[..., -1:] - a_cs)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, decay_states, X)
    # 3. states passed between chunks (zero initial state)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(a_cs[..., -1], (1, 0))))
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    # 4. the passed states' output
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, states, torch.exp(a_cs))
    return (y_diag + y_off).reshape(Bn, nc * chunk, H, P)[:, :T]


def ssd_sequential(x, dt, A, Bm, Cm):
    """The recurrence step by step (cpu_mamba.c's form): the oracle of ssd_chunked's tests."""
    Bn, T, H, P = x.shape
    G = Bm.shape[2]
    st = x.new_zeros(Bn, H, P, Bm.shape[-1])
    ys = []
    for t in range(T):
        Bh = Bm[:, t].repeat_interleave(H // G, 1)
        Ch = Cm[:, t].repeat_interleave(H // G, 1)
        st = torch.exp(dt[:, t] * A)[..., None, None] * st + \
            (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, :, None, :]
        ys.append(torch.einsum("bhps,bhs->bhp", st, Ch))
    return torch.stack(ys, 1)


def gated_rmsnorm(y, z, w, groups, eps):
    """rmsnorm(y * silu(z)) * w, the norm over groups of channels (norm_before_gate=False)."""
    u = y.float() * F.silu(z.float())
    ug = u.view(*u.shape[:-1], groups, -1)
    ug = ug * torch.rsqrt(ug.pow(2).mean(-1, keepdim=True) + eps)
    return (ug.view_as(u) * w.float()).to(y.dtype)


class Mamba(nn.Module if nn is not None else object):
    """One Mamba-2 unit with its pre-norm and residual; parameter shapes as graphtrain's."""

    def __init__(self, c, dtype, device):
        super().__init__()
        self.c = c
        H, P, G, S, K, _ = mamba_dims(c)
        d, di = c["d"], H * P
        conv, inp = di + 2 * G * S, 2 * di + 2 * G * S + H
        self.norm_w = nn.Parameter(torch.ones(d, dtype=dtype, device=device))
        self.in_proj_w = nn.Parameter(torch.empty(inp, d, dtype=dtype, device=device))
        self.conv1d_w = nn.Parameter(torch.empty(conv, K, dtype=dtype, device=device))
        self.conv1d_b = nn.Parameter(torch.empty(conv, dtype=dtype, device=device))
        self.dt_bias = nn.Parameter(torch.empty(H, dtype=dtype, device=device))
        self.A_log = nn.Parameter(torch.empty(H, dtype=dtype, device=device))
        self.D = nn.Parameter(torch.ones(H, dtype=dtype, device=device))
        self.gate_norm_w = nn.Parameter(torch.ones(di, dtype=dtype, device=device))
        self.out_proj_w = nn.Parameter(torch.empty(d, di, dtype=dtype, device=device))
        self.reset_ssm(torch.Generator(device=device).manual_seed(c["seed"]))

    def reset_ssm(self, g):
        """MambaMixer's A, dt and conv initialisation (in_proj and out_proj are the caller's)."""
        H = self.A_log.shape[0]
        dev = self.A_log.device
        with torch.no_grad():
            u = torch.rand(H, generator=g, device=dev)
            self.A_log.copy_(torch.log(A_INIT[0] + u * (A_INIT[1] - A_INIT[0])))
            u = torch.rand(H, generator=g, device=dev)
            dt = torch.exp(math.log(DT_MIN) + u * (math.log(DT_MAX) - math.log(DT_MIN)))
            dt = dt.clamp(min=DT_FLOOR)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            bound = 1.0 / math.sqrt(self.conv1d_w.shape[1])  # PyTorch's Conv1d default
            self.conv1d_w.uniform_(-bound, bound, generator=g)
            self.conv1d_b.uniform_(-bound, bound, generator=g)

    def mixer(self, h):
        """h [B, T, d] (normed) -> the mixer's output [B, T, d] before the residual."""
        H, P, G, S, K, chunk = mamba_dims(self.c)
        Bn, T, _ = h.shape
        di = H * P
        zxbcdt = F.linear(h, self.in_proj_w)
        z, xbc, dt = zxbcdt.split([di, di + 2 * G * S, H], -1)
        xbc = F.conv1d(xbc.transpose(1, 2), self.conv1d_w.unsqueeze(1), self.conv1d_b,
                       padding=K - 1, groups=xbc.shape[-1])[..., :T]
        xbc = F.silu(xbc).transpose(1, 2)
        x, Bm, Cm = xbc.split([di, G * S, G * S], -1)
        dtf = F.softplus(dt.float() + self.dt_bias.float())
        A = -torch.exp(self.A_log.float())
        xf = x.float().view(Bn, T, H, P)
        y = ssd_chunked(xf, dtf, A, Bm.float().view(Bn, T, G, S), Cm.float().view(Bn, T, G, S),
                        chunk)
        y = y + xf * self.D.float()[:, None]
        y = gated_rmsnorm(y.reshape(Bn, T, di).to(h.dtype), z, self.gate_norm_w, G,
                          self.c["eps"])
        return F.linear(y, self.out_proj_w)

    def forward(self, x):
        from_norm = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) +
                                            self.c["eps"])
        return x + self.mixer((from_norm * self.norm_w.float()).to(x.dtype))
