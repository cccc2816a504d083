/* The settings graphtrain cannot carry out yet, in one table (feature -> keys -> message):
 * Bridge accepts them, so they are not mistakes, but a run would quietly do less than they
 * say, so each is an error in validate, train and bench. A feature that lands removes its line. */
#include <stdbool.h>
#include <string.h>

#include "config/cuda_limits.h"
#include "config/keys.h"
#include "config/rules.h"

typedef struct unsupported {
    const char *rule;
    const char *keys[4];                /* the first is the one whose value is quoted */
    bool (*applies)(const gt_config *); /* is the setting in use? */
    const char *why;                    /* what is missing, and what a run would do instead */
    const char *fix;                    /* what to set instead */
} unsupported;

/* an fp8 recipe the CPU backend emulates (tensorwise, delayed, blockwise) */
static bool fp8_hopper(const gt_config *c) {
    gt_fp8_recipe r = gt_compute_dtype_fp8_recipe(c->model.compute_dtype);
    return r == GT_FP8_RECIPE_TENSORWISE || r == GT_FP8_RECIPE_DELAYED ||
           r == GT_FP8_RECIPE_BLOCKWISE;
}
static bool fp8_blackwell(const gt_config *c) {
    return c->model.compute_dtype == GT_DTYPE_FP8_MX || c->model.compute_dtype == GT_DTYPE_NVFP4;
}
/* the expert GEMMs take per-tensor scales (model/model_fp8_moe.c), not blockwise tiles */
static bool fp8_blockwise_moe(const gt_config *c) {
    return c->model.compute_dtype == GT_DTYPE_FP8_SC && c->model.num_moe_experts > 0;
}
static bool packed(const gt_config *c) {
    return c->dataset.packed_sequence;
}
/* Mamba layers past the CUDA kernels' shape limits (config/cuda_limits.h) off the CPU */
static bool mamba(const gt_config *c) {
    const gt_model_config *m = &c->model;
    return strchr(m->layer_pattern, 'M') != NULL && c->runtime.device != GT_DEVICE_CPU &&
           m->mamba_d_conv > GT_CUDA_MAMBA_MAX_CONV;
}
static bool has_mamba(const gt_config *c) {
    return strchr(c->model.layer_pattern, 'M') != NULL;
}
/* blockwise fp8 on the GPU: cuBLASLt's block-scaled GEMMs take K tiles of 128 whole, and every
 * width of a dense linear layer is the K of one of its GEMMs (in: the forward, out: the data
 * gradient, tokens per micro-batch: the weight gradient), so each must be a multiple of 128;
 * Mamba's projections likewise (hidden size, d_inner, in_proj's width) */
#define FP8_SC_TILE 128
static bool fp8_sc_off_tiles(long n) {
    return n % FP8_SC_TILE != 0;
}
static bool fp8_sc_shape(const gt_config *c) {
    const gt_model_config *m = &c->model;
    if (m->compute_dtype != GT_DTYPE_FP8_SC || c->runtime.device == GT_DEVICE_CPU) return false;
    long heads = m->num_attention_heads > 0 ? m->num_attention_heads : 1;
    long kv = m->num_query_groups > 0 ? m->num_query_groups : heads;
    long hd = m->hidden_size / heads;
    long seq = c->dataset.seq_length > 0 ? c->dataset.seq_length : m->seq_length;
    bool bad = fp8_sc_off_tiles(m->hidden_size) || fp8_sc_off_tiles(heads * hd) ||
               fp8_sc_off_tiles((heads + 2 * kv) * hd) || fp8_sc_off_tiles(m->ffn_hidden_size) ||
               fp8_sc_off_tiles((long)c->train.micro_batch_size * seq);
    if (has_mamba(c)) {
        long mh = m->mamba_num_heads > 0 ? m->mamba_num_heads
                  : m->mamba_head_dim > 0
                      ? (long)m->mamba_expand * m->hidden_size / m->mamba_head_dim
                      : 0;
        long inner = mh * m->mamba_head_dim;
        long in = 2 * inner + 2L * m->mamba_num_groups * m->mamba_state_dim + mh;
        bad = bad || fp8_sc_off_tiles(inner) || fp8_sc_off_tiles(in);
    }
    return bad;
}
/* full recompute plans the attention, MLP and MoE blocks (model/recompute.c), not Mamba's */
static bool mamba_full_recompute(const gt_config *c) {
    return has_mamba(c) && c->model.recompute_granularity == GT_RECOMPUTE_FULL;
}
/* fp8 Mamba projections on the GPU: cuBLASLt's fp8 GEMMs want every dimension (hidden size,
 * d_inner and in_proj's 2 d_inner + 2 groups state + heads) a multiple of 16 */
static bool mamba_fp8(const gt_config *c) {
    const gt_model_config *m = &c->model;
    if (!has_mamba(c) || !fp8_hopper(c) || c->runtime.device == GT_DEVICE_CPU) return false;
    long heads = m->mamba_num_heads > 0 ? m->mamba_num_heads
                 : m->mamba_head_dim > 0
                     ? (long)m->mamba_expand * m->hidden_size / m->mamba_head_dim
                     : 0;
    long inner = heads * m->mamba_head_dim;
    long in = 2 * inner + 2L * m->mamba_num_groups * m->mamba_state_dim + heads;
    return m->hidden_size % 16 || inner % 16 || in % 16;
}
static bool tp(const gt_config *c) {
    return c->model.tensor_model_parallel_size > 1;
}
static bool pp(const gt_config *c) {
    return c->model.pipeline_model_parallel_size > 1;
}
static bool cp(const gt_config *c) {
    return c->model.context_parallel_size > 1;
}
static bool ep(const gt_config *c) {
    return c->model.expert_model_parallel_size > 1;
}
static bool offload(const gt_config *c) {
    return c->model.cpu_offloading;
}
static bool pad_vocab(const gt_config *c) {
    return c->model.should_pad_vocab;
}

#define MULTI_GPU                                                                                  \
    "; it needs sharded layers and their collectives, which graphtrain does not have: its "        \
    "multi-GPU runtime is data parallelism (NCCL) only"

/* clang-format off */
static const unsupported k_unsupported[] = {
    {"engine_no_fp8_blockwise_shape", {"model.compute_dtype", "model.hidden_size", "model.ffn_hidden_size", "train.micro_batch_size"}, fp8_sc_shape,
     "blockwise fp8 on the GPU runs cuBLASLt's block-scaled GEMMs, which take the reduction dimension in whole 1x128 tiles; every width of a linear layer (hidden size, attention heads x head dim, the qkv width, ffn_hidden_size, Mamba's d_inner and in_proj width) and the tokens per micro-batch (micro_batch_size x seq_length) is the reduction dimension of one of its GEMMs, and this model has one that is not a multiple of 128",
     "make those sizes multiples of 128, use -c fp8_cs or fp8_ds on the GPU (any multiple of 16), or runtime.device=cpu for the blockwise emulation"},
    {"engine_fp8_blackwell_format", {"model.compute_dtype"}, fp8_blackwell,
     "MXFP8 (-c fp8_mx) and NVFP4 (-c nvfp4) are Blackwell (sm_100) tensor-core formats: Hopper (sm_90) has no such GEMMs and the CPU backend does not emulate them",
     "use an fp8 recipe Hopper runs: -c fp8_cs (current scaling), fp8_ds (delayed scaling) or fp8_sc (blockwise, 1x128 / 128x128 scales)"},
    {"engine_no_fp8_blockwise_moe", {"model.compute_dtype", "model.num_moe_experts"}, fp8_blockwise_moe,
     "blockwise fp8 expert GEMMs (the grouped gate/up and down GEMMs with 1x128 / 128x128 scales) are not implemented: graphtrain's fp8 experts take per-tensor scales (one per expert weight, one for all routed tokens), which -c fp8_sc does not promise",
     "use -c fp8_cs (current scaling) or fp8_ds (delayed scaling) for MoE models, whose expert GEMMs run in fp8 with per-tensor scales, or -c bf16"},
    {"engine_no_packed_sequences", {"dataset.packed_sequence"}, packed,
     "packed sequences (several documents per sequence, cu_seqlens) are not implemented: the loader feeds fixed-length sequences and attention would cross document boundaries",
     "set dataset.packed_sequence=false"},
    {"engine_no_mamba", {"model.mamba_d_conv", "runtime.device"}, mamba,
     "the CUDA Mamba convolution takes mamba_d_conv up to 8 (its taps live in registers), so the trainer would refuse these Mamba layers on a GPU",
     "lower model.mamba_d_conv (Megatron's default 4), or set runtime.device=cpu"},
    {"engine_no_mamba_full_recompute", {"model.recompute_granularity", "model.hybrid_override_pattern"}, mamba_full_recompute,
     "full recompute of Mamba layers is not implemented: their activations would be kept, so the memory full recompute saves on them would not be saved",
     "use model.recompute_granularity=selective with the modules of the attention and MLP layers (core_attn, mlp, layernorm), or none"},
    {"engine_no_fp8_mamba", {"model.compute_dtype", "model.hybrid_override_pattern", "model.mamba_num_heads", "runtime.device"}, mamba_fp8,
     "fp8 Mamba projections on the GPU need the hidden size, d_inner (heads x head_dim) and in_proj's width (2 d_inner + 2 groups x state + heads) to be multiples of 16, as cuBLASLt's fp8 GEMMs do; this shape has one that is not",
     "choose mamba_num_heads / mamba_head_dim / mamba_num_groups / mamba_state_dim so those widths are multiples of 16, use -c bf16 for this model, or runtime.device=cpu (the fp8 emulation takes any shape)"},
    {"engine_no_tensor_parallel", {"model.tensor_model_parallel_size"}, tp,
     "tensor parallelism is not implemented" MULTI_GPU,
     "set model.tensor_model_parallel_size=1 (-tp 1), e.g. with a *_1gpu recipe"},
    {"engine_no_pipeline_parallel", {"model.pipeline_model_parallel_size"}, pp,
     "pipeline parallelism is not implemented (also no pipeline schedule)" MULTI_GPU,
     "set model.pipeline_model_parallel_size=1 (-pp 1), e.g. with a *_1gpu recipe"},
    {"engine_no_context_parallel", {"model.context_parallel_size"}, cp,
     "context parallelism is not implemented (also no ring attention)" MULTI_GPU,
     "set model.context_parallel_size=1 (-cp 1), e.g. with a *_1gpu recipe"},
    {"engine_no_expert_parallel", {"model.expert_model_parallel_size"}, ep,
     "expert parallelism is not implemented (also no all-to-all token dispatch)" MULTI_GPU,
     "set model.expert_model_parallel_size=1 (-ep 1), e.g. with a *_1gpu recipe"},
    {"engine_no_cpu_offloading", {"model.cpu_offloading"}, offload,
     "offloading activations or weights to host memory is not implemented: everything stays in device memory",
     "set model.cpu_offloading=false"},
    {"engine_no_vocab_padding", {"model.should_pad_vocab", "model.make_vocab_size_divisible_by"}, pad_vocab,
     "padding the vocabulary to a multiple of make_vocab_size_divisible_by x tensor_model_parallel_size is not implemented: the embedding and output head would keep vocab_size rows",
     "set model.should_pad_vocab=false, or set model.vocab_size to the padded size yourself"},
};
/* clang-format on */

void gt_check_unsupported(const gt_config *c, gt_report *r) {
    for (size_t i = 0; i < sizeof k_unsupported / sizeof k_unsupported[0]; i++) {
        const unsupported *u = &k_unsupported[i];
        if (!u->applies(c)) continue;
        const gt_key *k = gt_config_find_key(u->keys[0]);
        char value[GT_PATTERN_MAX] = "?";
        if (k) gt_config_format_value(c, k, value, sizeof value);
        const char *keys[5] = {u->keys[0], u->keys[1], u->keys[2], u->keys[3], NULL};
        gt_finding *f = gt_report_add(r, GT_SEVERITY_ERROR, u->rule, keys, u->fix,
                                      "%s=%s is valid in Bridge, but graphtrain cannot run it yet: "
                                      "%s",
                                      u->keys[0], value, u->why);
        r->unsupported++;
        if (f) f->unsupported = true;
    }
}
