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

static bool fp8(const gt_config *c) {
    return c->model.compute_dtype != GT_DTYPE_BF16 && c->model.compute_dtype != GT_DTYPE_FP32;
}
static bool recompute(const gt_config *c) {
    return c->model.recompute_granularity != GT_RECOMPUTE_NONE;
}
static bool packed(const gt_config *c) {
    return c->dataset.packed_sequence;
}
/* Mamba layers past the CUDA kernels' shape limits (config/cuda_limits.h) off the CPU */
static bool mamba(const gt_config *c) {
    const gt_model_config *m = &c->model;
    return strchr(m->layer_pattern, 'M') != NULL && c->runtime.device != GT_DEVICE_CPU &&
           (m->mamba_d_conv > GT_CUDA_MAMBA_MAX_CONV ||
            (long)m->mamba_head_dim * m->mamba_state_dim > GT_CUDA_MAMBA_MAX_STATE);
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
static bool dp(const gt_config *c) {
    return c->runtime.num_gpus > 1 || c->ddp.data_parallel_size > 1;
}
static bool offload(const gt_config *c) {
    return c->model.cpu_offloading;
}
static bool pad_vocab(const gt_config *c) {
    return c->model.should_pad_vocab;
}

#define MULTI_GPU                                                                                  \
    "; it needs the multi-GPU runtime (NCCL communicators, sharded layers and their "              \
    "collectives), which graphtrain does not have yet: graphtrain runs on one GPU"

/* clang-format off */
static const unsupported k_unsupported[] = {
    {"engine_no_fp8", {"model.compute_dtype"}, fp8,
     "fp8 and fp4 compute (Bridge's -c fp8_cs, fp8_mx, fp8_ds, nvfp4) are not implemented: graphtrain computes in bf16 on the GPU and fp32 on the CPU, so the run would not be the fp8 run asked for",
     "set model.compute_dtype=bf16 (-c bf16)"},
    {"engine_no_recompute", {"model.recompute_granularity", "model.recompute_method", "model.recompute_num_layers"}, recompute,
     "activation recompute (full or selective) is not implemented: graphtrain keeps every activation in its static arena, so the memory this setting saves would not be saved",
     "set model.recompute_granularity=none; if memory is short, lower train.micro_batch_size or model.seq_length"},
    {"engine_no_packed_sequences", {"dataset.packed_sequence"}, packed,
     "packed sequences (several documents per sequence, cu_seqlens) are not implemented: the loader feeds fixed-length sequences and attention would cross document boundaries",
     "set dataset.packed_sequence=false"},
    {"engine_no_mamba", {"model.mamba_d_conv", "model.mamba_state_dim", "model.mamba_head_dim", "runtime.device"}, mamba,
     "the CUDA Mamba kernels take mamba_d_conv up to 8 and mamba_head_dim x mamba_state_dim up to 32768 (a head's fp32 state lives in one block's shared memory), so the trainer would refuse these Mamba layers on a GPU",
     "lower model.mamba_d_conv (Megatron's default 4) or model.mamba_head_dim / model.mamba_state_dim (64 x 128 by default), or set runtime.device=cpu"},
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
    {"engine_single_gpu", {"runtime.num_gpus", "ddp.data_parallel_size"}, dp,
     "data parallelism over several GPUs is not implemented (no gradient all-reduce); a run would use one GPU and train on a fraction of the batches asked for" MULTI_GPU,
     "set runtime.num_gpus=1 (-ng 1) and ddp.data_parallel_size=0 or 1"},
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
