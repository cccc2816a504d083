#!/usr/bin/env python3
"""graphtrain against transformers on small random models (the GPU parity run of issue 35).

For a small random LlamaForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM made here with
transformers: save_pretrained, `graphtrain import`, `graphtrain logits` on the chosen backend
for fixed tokens, and compare with transformers' logits in fp32 and in bf16; `graphtrain
export` of the import must load back in transformers as the same class with the same logits.
Then a tiny Qwen3-shaped graphtrain model (model.qk_layernorm) is trained a few steps,
exported, and transformers' loss on a fresh batch must equal graphtrain's loss on it.

    python3 bench/hf_parity.py --graphtrain build/graphtrain --device cuda   # the GPU run
    python3 bench/hf_parity.py --graphtrain build-asan/graphtrain --device cpu

One PASS/FAIL line per check; the exit status is 1 when any check fails. Tolerances: on the
CPU the logit error is max |graphtrain - transformers| / max |transformers| over the sequence;
graphtrain's CPU backend is fp32 (1e-4 against transformers' fp32; bf16 references get 3e-2),
its CUDA backend bf16 (against the noise floor below). Losses: 1e-4 (CPU) or 2e-2 relative (CUDA).

The noise floor: a model's own bf16 error is not a constant. A random MoE with sharp routers
(router weights 10x the others, so that few tokens sit near a tie) amplifies bf16 rounding
through its experts' gates: on the Qwen3-MoE shapes here transformers' bf16 logits differ from
its own fp32 ones by several times 3e-2 at their worst position. So on CUDA each check
measures F, the relative L2 error (||a - b|| / ||b||, the measure of the GPU tests) of
transformers' bf16 logits against its fp32 ones on the positions checked, and passes when
graphtrain's relative L2 error is at most max(1e-2, 1.25 F) against fp32 and max(1e-2, 2 F)
against bf16 (FLOOR_X, L2_MIN): graphtrain may be as far from exact as bf16 itself is, a
quarter more, no further. The max error over the positions is printed beside it, with the
floor's, but not judged: one position of one random batch decides it, and where a gate
amplifies rounding at that position it moves by more than the floor's own max does.
`--moe-sweep` prints F beside graphtrain's error for MoE variants (expert count, router
scale, top-k) to show where it comes from.

MoE models and router ties: graphtrain's CUDA backend computes in bf16, so a token whose k-th
and (k+1)-th router logits are close may be routed to another expert than in transformers'
fp32, a jump in the logits no tolerance describes. For each position the script reads
transformers' fp32 router logits (output_router_logits=True) and the router inputs x, and takes
per layer the top-k margin m = l_(k) - l_(k+1) and the bound
    b = 2u * sum_i |x_i| (|w_(k),i| + |w_(k+1),i|) + u (|l_(k)| + |l_(k+1)|),  u = 2^-8,
how far bf16 rounding of the router input and weights (relative error u each, first term) and
of the two logits themselves (second term) can move the margin. A position is clear when
m > SAFETY x b at every layer. Where either side is bf16 (graphtrain on the GPU, or
transformers' bf16 reference) the tolerance applies to the clear positions; the others are
counted and their error printed. graphtrain's CPU (fp32) against transformers' fp32 holds
every position to 1e-4.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

VOCAB = 512
T = 128  # cuDNN takes head size 128 (qwen3_moe_raw) at sequences that are multiples of 128
# head size 64: the CUDA attention kernels take 64 and 128
SHAPE = dict(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, intermediate_size=512, rms_norm_eps=1e-6,
             max_position_embeddings=T, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
BF16_U = 2.0 ** -8  # bf16's unit roundoff: 8 significant bits
SAFETY = 1.0  # margin above the worst-case move of bf16 rounding at every layer
TOL = {"cpu": {"fp32": 1e-4, "bf16": 3e-2, "loss": 1e-4},
       "cuda": {"fp32": 3e-2, "bf16": 3e-2, "loss": 2e-2}}
# On CUDA the logit tolerance is also at least this multiple of the measured noise floor:
# graphtrain's bf16 against fp32 may err as much as transformers' bf16 does (plus a quarter),
# and two bf16 computations may differ by both their errors
FLOOR_X = {"fp32": 1.25, "bf16": 2.0}
L2_MIN = 1e-2  # a CUDA tolerance below this is not asked for, whatever the floor
SWEEP_BATCHES = 3  # token batches per --moe-sweep variant

failures = []


def report(ok, what, detail):
    print(f"{'PASS' if ok else 'FAIL'} {what}: {detail}", flush=True)
    if not ok:
        failures.append(what)


def run(args, what):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{what}: {' '.join(args)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def models():
    llama = LlamaForCausalLM(LlamaConfig(**SHAPE))
    qwen3 = Qwen3ForCausalLM(Qwen3Config(**dict(SHAPE, tie_word_embeddings=True)))
    moe = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        **dict(SHAPE, intermediate_size=512), moe_intermediate_size=256, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[]))
    # Qwen3MoeConfig's default router (norm_topk_prob false: model.moe_router_pre_softmax) and
    # heads of 128 over hidden 256 / 4 heads (model.kv_channels), as Qwen3-0.6B's are
    raw = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        **dict(SHAPE, intermediate_size=512, head_dim=128), moe_intermediate_size=256,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[]))
    return [("llama", llama), ("qwen3", qwen3), ("qwen3_moe", moe), ("qwen3_moe_raw", raw)]


def randomize(model, seed):
    """Norm weights away from 1 (so q_norm/k_norm matter), other weights larger than the init;
    router weights larger still, so that bf16 rounding rarely swaps an expert near a tie (a
    swap is a jump in the logits no tolerance describes)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))


def hf_logits(model, tokens, dtype, device):
    m = copy.deepcopy(model).to(device=device, dtype=dtype).eval()  # the fp32 model stays
    with torch.no_grad():
        return m(torch.tensor([tokens], device=device)).logits[0].float().cpu()


def gt_logits(gt, ckpt, tokens, device, out):
    run([gt, "logits", "--checkpoint", ckpt, "--device", device, "--out", out, "--tokens",
         ",".join(map(str, tokens))], "graphtrain logits")
    with open(out) as f:
        j = json.load(f)
    return torch.tensor(j["logits"]), j["loss"]


def rel_err(got, want, rows=None):
    """max |got - want| over the rows (default all) / max |want| over the whole sequence"""
    diff = (got - want).abs() if rows is None else (got - want)[rows].abs()
    return float(diff.max() / want.abs().max()) if diff.numel() else 0.0


def rel_l2(got, want, rows=None):
    """||got - want|| / ||want|| over the rows (default all): the measure of the GPU tests"""
    g, w = (got, want) if rows is None else (got[rows], want[rows])
    return float((g - w).norm() / w.norm()) if w.numel() else 0.0


def router_margins(model, tokens):
    """Per position: the smallest top-k margin over the MoE layers of transformers' fp32 router
    logits, and that margin over its bf16 bound b (module docstring); None for dense models."""
    gates = [lay.mlp.gate for lay in model.model.layers if hasattr(lay.mlp, "gate")]
    if not gates:
        return None
    k = model.config.num_experts_per_tok
    inputs = []
    hooks = [g.register_forward_pre_hook(lambda mod, a: inputs.append(a[0].reshape(
        -1, a[0].shape[-1]).detach())) for g in gates]
    m = model.float().eval()
    try:
        with torch.no_grad():
            out = m(torch.tensor([tokens]), output_router_logits=True)
    finally:
        for h in hooks:
            h.remove()
    margin = torch.full((len(tokens),), float("inf"))
    ratio = torch.full((len(tokens),), float("inf"))
    for logits, x, g in zip(out.router_logits, inputs, gates):
        logits = logits.float().reshape(len(tokens), -1)
        top, idx = logits.topk(k + 1, dim=-1)
        mg = top[:, k - 1] - top[:, k]
        w = g.weight.detach().float().abs()
        wa, wb = w[idx[:, k - 1]], w[idx[:, k]]  # [T, d] the two experts' rows
        bound = (2 * BF16_U * (x.abs() * (wa + wb)).sum(-1)
                 + BF16_U * (top[:, k - 1].abs() + top[:, k].abs()))
        margin = torch.minimum(margin, mg)
        ratio = torch.minimum(ratio, mg / bound)
    return margin, ratio


def check_model(gt, work, name, model, device, torch_dev, tokens):
    d = os.path.join(work, name)
    hf, ck, back = (os.path.join(d, x) for x in ("hf", "ck", "back"))
    model.save_pretrained(hf, safe_serialization=True)
    run([gt, "import", "--from", "hf", hf, "--out", ck], "graphtrain import")
    got, _ = gt_logits(gt, ck, tokens, device, os.path.join(d, "logits.json"))
    ties = router_margins(model, tokens)
    clear = None
    if ties is not None:
        margin, ratio = ties
        clear = ratio > SAFETY
        print(f"     {name} router: per position the smallest top-k margin over the layers "
              f"(min {float(margin.min()):.3g}, median {float(margin.median()):.3g}); "
              f"margin / bf16 bound min {float(ratio.min()):.3g}, median "
              f"{float(ratio.median()):.3g}; clear (margin > {SAFETY:g} x bound at every "
              f"layer): {int(clear.sum())}/{len(tokens)} positions, near a tie: "
              f"{[i for i in range(len(tokens)) if not clear[i]]}", flush=True)
    wants = {dt: hf_logits(model, tokens, tdt, torch_dev)
             for dt, tdt in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    # transformers' own bf16 error against its fp32 on the rows checked: the noise floor of
    # bf16 for this model (module docstring), max and rel L2
    rows = None if clear is None else clear
    floor_max = rel_err(wants["bf16"], wants["fp32"], rows)
    floor_l2 = rel_l2(wants["bf16"], wants["fp32"], rows)
    if device == "cuda":
        print(f"     {name} noise floor: transformers bf16 vs its fp32: max error {floor_max:.2e}"
              f", rel L2 {floor_l2:.2e}", flush=True)
    for dt, want in wants.items():
        agree = f"argmax agrees at {int((got.argmax(-1) == want.argmax(-1)).sum())}/" \
                f"{len(tokens)} positions"
        whole = clear is None or (device == "cpu" and dt == "fp32")  # fp32 both: ties too
        r = None if whole else clear
        e, l2 = rel_err(got, want, r), rel_l2(got, want, r)
        where = "" if whole else f" at the {int(clear.sum())} positions clear of router ties"
        ties = ""
        if not whole:
            ties = (f"; {int((~clear).sum())} near a tie, max error there "
                    f"{rel_err(got, want, ~clear):.2e}")
        if device == "cuda":
            tol = max(L2_MIN, FLOOR_X[dt] * floor_l2)
            ok = l2 <= tol
            detail = (f"graphtrain cuda rel L2 {l2:.2e}{where} (tolerance {tol:.2e}: "
                      f"{FLOOR_X[dt]:g} x the floor), max error {e:.2e} (floor's {floor_max:.2e})")
        else:
            tol = TOL[device][dt] if dt == "fp32" else TOL[device]["bf16"]
            ok = e <= tol
            detail = f"graphtrain cpu max error {e:.2e}{where} (tolerance {tol:.0e})"
        ok = ok and (whole or int(clear.sum()) > 0)
        report(ok, f"{name} logits vs transformers {dt}", f"{detail}{ties}; {agree}")
    run([gt, "export", "--checkpoint", ck, "--to", "hf", back], "graphtrain export")
    again = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32)
    same_class = type(again).__name__ == type(model).__name__
    e = rel_err(hf_logits(again, tokens, torch.float32, torch_dev),
                hf_logits(model, tokens, torch.float32, torch_dev))
    report(same_class and e <= 1e-6, f"{name} export loads in transformers",
           f"{type(again).__name__} (want {type(model).__name__}), logits differ by {e:.2e}")


def check_training(gt, work, device, torch_dev):
    """A tiny Qwen3-shaped model trained by graphtrain, exported; transformers continues it."""
    d = os.path.join(work, "trained")
    ck, hf = os.path.join(d, "ck"), os.path.join(d, "hf")
    run([gt, "train", "--recipe", "tiny", f"runtime.device={device}", "model.num_layers=2",
         "model.hidden_size=256", "model.num_attention_heads=4", "model.num_query_groups=2",
         "model.ffn_hidden_size=512", f"model.vocab_size={VOCAB}", f"model.seq_length={T}",
         "model.qk_layernorm=true", "model.cuda_graph_impl=none", "runtime.gemm_table=",
         "train.micro_batch_size=2", "train.global_batch_size=2", "train.train_iters=20",
         "scheduler.lr_warmup_iters=2", "optimizer.lr=3e-3", f"checkpoint.save={ck}"],
        "graphtrain train")
    run([gt, "export", "--checkpoint", ck, "--to", "hf", hf], "graphtrain export")
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    report(type(model).__name__ == "Qwen3ForCausalLM", "trained model exports as Qwen3",
           type(model).__name__)
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (T,), generator=g).tolist()  # a batch it has not seen
    _, gt_loss = gt_logits(gt, ck, tokens, device, os.path.join(d, "logits.json"))
    m = model.to(torch_dev).eval()
    with torch.no_grad():
        ids = torch.tensor([tokens], device=torch_dev)
        hf_loss = float(m(ids, labels=ids).loss)
    e = abs(gt_loss - hf_loss) / abs(hf_loss)
    tol = TOL[device]["loss"]
    report(e <= tol, "trained model's loss in transformers",
           f"graphtrain {device} {gt_loss:.6f}, transformers fp32 {hf_loss:.6f}, relative "
           f"difference {e:.2e} (tolerance {tol:.0e})")


def moe_sweep(gt, device, torch_dev):
    """Qwen3-MoE variants with no router choice to get wrong (top-k over every expert, or one
    expert) and with the router's scale and the expert width varied: per variant the error of
    graphtrain on `device` against graphtrain's fp32 CPU backend and against transformers in
    fp32 and bf16, over every position. Information for finding a backend difference; no
    tolerance applies."""
    variants = [
        ("base: 4 experts, top 2, normalized", dict(num_experts=4, num_experts_per_tok=2), 0.5),
        ("every expert: 4 of 4, normalized", dict(num_experts=4, num_experts_per_tok=4), 0.5),
        ("every expert, router std 0.05", dict(num_experts=4, num_experts_per_tok=4), 0.05),
        ("every expert, not normalized", dict(num_experts=4, num_experts_per_tok=4,
                                              norm_topk_prob=False), 0.5),
        ("one expert of one", dict(num_experts=1, num_experts_per_tok=1), 0.5),
        ("one expert of one, width 512", dict(num_experts=1, num_experts_per_tok=1,
                                              moe_intermediate_size=512), 0.5),
        ("8 experts, top 8, width 128", dict(num_experts=8, num_experts_per_tok=8,
                                             moe_intermediate_size=128), 0.5),
        ("raw: 4 experts, top 2, not normalized, heads of 128",
         dict(num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, head_dim=128), 0.5),
    ]
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(0, VOCAB, (T,), generator=g).tolist() for _ in range(SWEEP_BATCHES)]
    with tempfile.TemporaryDirectory() as work:
        for i, (what, over, router_std) in enumerate(variants):
            cfg = dict(moe_intermediate_size=256, norm_topk_prob=True, decoder_sparse_step=1,
                       mlp_only_layers=[])
            cfg.update(over)
            model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**{**SHAPE, "intermediate_size": 512,
                                                          **cfg}))
            randomize(model, 40 + i)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith("mlp.gate.weight"):
                        p.mul_(router_std / 0.5)
            d = os.path.join(work, f"v{i}")
            hf, ck = os.path.join(d, "hf"), os.path.join(d, "ck")
            model.save_pretrained(hf, safe_serialization=True)
            try:
                run([gt, "import", "--from", "hf", hf, "--out", ck], "graphtrain import")
            except RuntimeError as e:
                print(f"SWEEP {what}: {e}", flush=True)
                continue
            for bi, tokens in enumerate(batches):
                try:
                    got, _ = gt_logits(gt, ck, tokens, device, os.path.join(d, "a.json"))
                    cpu, _ = gt_logits(gt, ck, tokens, "cpu", os.path.join(d, "b.json"))
                except RuntimeError as e:
                    print(f"SWEEP {what}: {e}", flush=True)
                    break
                f32 = hf_logits(model, tokens, torch.float32, torch_dev)
                b16 = hf_logits(model, tokens, torch.bfloat16, torch_dev)
                print(f"SWEEP {what} [batch {bi}] max | rel L2: graphtrain {device} vs "
                      f"graphtrain cpu {rel_err(got, cpu):.2e} | {rel_l2(got, cpu):.2e}, vs "
                      f"transformers fp32 {rel_err(got, f32):.2e} | {rel_l2(got, f32):.2e}, bf16 "
                      f"{rel_err(got, b16):.2e} | {rel_l2(got, b16):.2e}; graphtrain cpu vs "
                      f"transformers fp32 {rel_err(cpu, f32):.2e}; transformers bf16 vs fp32 "
                      f"{rel_err(b16, f32):.2e} | {rel_l2(b16, f32):.2e}", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphtrain", default="build/graphtrain", help="the graphtrain binary")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda",
                    help="graphtrain's backend (transformers runs on cuda when there is one)")
    ap.add_argument("--work", default=None, help="folder for the models (default: a temporary one)")
    ap.add_argument("--skip-training", action="store_true", help="only the logits checks")
    ap.add_argument("--moe-sweep", action="store_true",
                    help="only Qwen3-MoE variants that take the router's choice away (every "
                         "expert, one expert), with graphtrain's CPU backend beside the chosen "
                         "one: where an error between the backends comes from")
    a = ap.parse_args()
    torch_dev = "cuda" if torch.cuda.is_available() else "cpu"
    gt = os.path.abspath(a.graphtrain)
    if a.moe_sweep:
        return moe_sweep(os.path.abspath(a.graphtrain), a.device, torch_dev)
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        g = torch.Generator().manual_seed(3)
        tokens = torch.randint(0, VOCAB, (T,), generator=g).tolist()
        for i, (name, model) in enumerate(models()):
            randomize(model, 10 + i)
            try:
                check_model(gt, work, name, model, a.device, torch_dev, tokens)
            except RuntimeError as e:
                report(False, f"{name}", str(e))
        if not a.skip_training:
            try:
                check_training(gt, work, a.device, torch_dev)
            except RuntimeError as e:
                report(False, "training", str(e))
    print(f"{'FAIL' if failures else 'PASS'}: {len(failures)} of the checks failed"
          if failures else "PASS: every check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
