#!/usr/bin/env python3
"""Makes the Hugging Face fixtures of tests/train/test_hf_convert.c with transformers itself:
tiny random models saved by save_pretrained, with the logits transformers computes (fp32) for
fixed tokens and its greedy continuation of them. Run once where torch and transformers are
installed; the output is committed, so CI needs neither.

    python3 tests/train/hf_fixture.py tests/train/fixtures [NAME ...]   (default: all of them)

llama/   LlamaForCausalLM, GQA, weights stored as bf16 (the logits are of those bf16 values)
llama31/ LlamaForCausalLM with Llama 3.1's rotary scaling (rope_type llama3), fp32
llama32/ LlamaForCausalLM with tied embeddings and rotary scaling of factor 32, fp32
mixtral/ MixtralForCausalLM (every layer MoE, top-2 of 4), fp32, sharded into several files
qwen3/   Qwen3ForCausalLM (q_norm/k_norm per head, i.e. model.qk_layernorm), tied embeddings, fp32
qwen3_moe/ Qwen3MoeForCausalLM (every layer MoE, top-2 of 4, norm_topk_prob true), fp32
qwen3_hd/ Qwen3ForCausalLM with head_dim 12 != hidden / heads (model.kv_channels), fp32
qwen3_moe_raw/ Qwen3MoeForCausalLM with norm_topk_prob false (Megatron's
           moe_router_pre_softmax) and head_dim 12, fp32
"""
import json
import os
import sys

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

TOKENS = [3, 17, 42, 5, 60, 9, 33, 1]
LONG_TOKENS = [(7 * i + 3) % 64 for i in range(32)]
NEW_TOKENS = 8
COMMON = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5, max_position_embeddings=64,
              tie_word_embeddings=False)


def randomize(model, seed):
    """Weights far from the init's small values, so a wrong layout shows in the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))


def expected(model, tokens=TOKENS):
    model.eval()
    ids = torch.tensor([tokens])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
        # every position attends: without the mask, generate would hide the pad id's positions
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                             do_sample=False, pad_token_id=0)
    return {"transformers_version": transformers.__version__, "tokens": tokens,
            "logits": [[float(x) for x in row] for row in logits],
            "greedy": [int(t) for t in out[0, len(tokens):]]}


def save(model, out, name, expect, **kw):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True, **kw)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expect, f)


def make_llama(out):
    llama = LlamaForCausalLM(LlamaConfig(intermediate_size=48, rope_theta=10000.0, **COMMON))
    randomize(llama, 1)
    with torch.no_grad():  # the values the bf16 file holds; rotary buffers stay fp32
        for p in llama.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    exp = expected(llama)
    save(llama.to(torch.bfloat16), out, "llama", exp)


def make_mixtral(out):
    mixtral = MixtralForCausalLM(MixtralConfig(intermediate_size=16, num_local_experts=4,
                                               num_experts_per_tok=2, rope_theta=10000.0,
                                               router_jitter_noise=0.0, **COMMON))
    randomize(mixtral, 2)
    save(mixtral, out, "mixtral", expected(mixtral), max_shard_size="20KB")


def make_llama31(out):
    # Llama 3.1's rotary scaling; a long base and 32 positions, so the scaled low
    # frequencies turn far enough to move the logits
    llama31 = LlamaForCausalLM(LlamaConfig(
        intermediate_size=48, **dict(COMMON, head_dim=16, num_attention_heads=2,
                                     num_key_value_heads=1, max_position_embeddings=131072),
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}))
    randomize(llama31, 3)
    save(llama31, out, "llama31", expected(llama31, LONG_TOKENS))


def make_llama32(out):
    # Llama 3.2's shape of options: tied embeddings and rotary scaling of factor 32
    llama32 = LlamaForCausalLM(LlamaConfig(
        intermediate_size=48, **dict(COMMON, tie_word_embeddings=True,
                                     max_position_embeddings=131072),
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}))
    randomize(llama32, 4)
    save(llama32, out, "llama32", expected(llama32, LONG_TOKENS))


def make_qwen3(out):
    # Qwen3 as the small Qwen3 checkpoints are: tied embeddings, a large rotary base
    qwen3 = Qwen3ForCausalLM(Qwen3Config(
        intermediate_size=48, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **dict(COMMON, tie_word_embeddings=True)))
    randomize(qwen3, 5)
    save(qwen3, out, "qwen3", expected(qwen3, LONG_TOKENS))


def make_qwen3_moe(out):
    moe = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        intermediate_size=48, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **COMMON))
    randomize(moe, 6)
    save(moe, out, "qwen3_moe", expected(moe))


def make_qwen3_hd(out):
    # Qwen3-0.6B's kind of shape: heads wider than hidden / heads (there 16 x 128 over 1024)
    qwen3 = Qwen3ForCausalLM(Qwen3Config(
        intermediate_size=48, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **dict(COMMON, head_dim=12, tie_word_embeddings=True)))
    randomize(qwen3, 7)
    save(qwen3, out, "qwen3_hd", expected(qwen3, LONG_TOKENS))


def make_qwen3_moe_raw(out):
    # Qwen3MoeConfig's default router: softmax over all experts, top-k, not renormalized
    moe = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        intermediate_size=48, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **dict(COMMON, head_dim=12)))
    randomize(moe, 8)
    save(moe, out, "qwen3_moe_raw", expected(moe))


MAKERS = {"llama": make_llama, "mixtral": make_mixtral, "llama31": make_llama31,
          "llama32": make_llama32, "qwen3": make_qwen3, "qwen3_moe": make_qwen3_moe,
          "qwen3_hd": make_qwen3_hd, "qwen3_moe_raw": make_qwen3_moe_raw}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/train/fixtures"
    for name in sys.argv[2:] or list(MAKERS):
        torch.manual_seed(0)
        MAKERS[name](out)


if __name__ == "__main__":
    main()
