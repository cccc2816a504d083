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

One PASS/FAIL line per check; the exit status is 1 when any check fails. Tolerances: the
logit error is max |graphtrain - transformers| / max |transformers| over the sequence;
graphtrain's CPU backend is fp32 (1e-4 against transformers' fp32), its CUDA backend bf16
(3e-2 against either); bf16 references get 3e-2. Losses: 1e-4 (CPU) or 2e-2 relative (CUDA).
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
T = 64
# head size 64: the CUDA attention kernels take 64 and 128
SHAPE = dict(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, intermediate_size=512, rms_norm_eps=1e-6,
             max_position_embeddings=T, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
TOL = {"cpu": {"fp32": 1e-4, "bf16": 3e-2, "loss": 1e-4},
       "cuda": {"fp32": 3e-2, "bf16": 3e-2, "loss": 2e-2}}

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
    return [("llama", llama), ("qwen3", qwen3), ("qwen3_moe", moe)]


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


def rel_err(got, want):
    return float((got - want).abs().max() / want.abs().max())


def check_model(gt, work, name, model, device, torch_dev, tokens):
    d = os.path.join(work, name)
    hf, ck, back = (os.path.join(d, x) for x in ("hf", "ck", "back"))
    model.save_pretrained(hf, safe_serialization=True)
    run([gt, "import", "--from", "hf", hf, "--out", ck], "graphtrain import")
    got, _ = gt_logits(gt, ck, tokens, device, os.path.join(d, "logits.json"))
    for dt, tdt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        want = hf_logits(model, tokens, tdt, torch_dev)
        e = rel_err(got, want)
        tol = TOL[device][dt] if dt == "fp32" else TOL[device]["bf16"]
        report(e <= tol, f"{name} logits vs transformers {dt}",
               f"graphtrain {device} max error {e:.2e} (tolerance {tol:.0e}), argmax agrees at "
               f"{int((got.argmax(-1) == want.argmax(-1)).sum())}/{len(tokens)} positions")
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphtrain", default="build/graphtrain", help="the graphtrain binary")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda",
                    help="graphtrain's backend (transformers runs on cuda when there is one)")
    ap.add_argument("--work", default=None, help="folder for the models (default: a temporary one)")
    ap.add_argument("--skip-training", action="store_true", help="only the logits checks")
    a = ap.parse_args()
    torch_dev = "cuda" if torch.cuda.is_available() else "cpu"
    gt = os.path.abspath(a.graphtrain)
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
