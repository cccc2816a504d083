/* The Hugging Face view of a graphtrain model: which transformers architecture expresses it
 * (LlamaForCausalLM for dense models, MixtralForCausalLM for models whose every layer is MoE:
 * softmax router, top-k renormalized, SwiGLU experts; with model.qk_layernorm,
 * Qwen3ForCausalLM and Qwen3MoeForCausalLM, norm_topk_prob true) and each HF tensor as a block of
 * rows of the flat parameter array. Fused tensors split by rows: qkv_w into q, k, v (q heads, then
 * k, then v) and gate_up into gate, up. Both sides rotate pairs (i, i + head_dim/2) (HF's
 * rotate_half), so q and k rows keep their order. */
#ifndef GT_MODEL_HF_NAMES_H
#define GT_MODEL_HF_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "config/config.h"
#include "core/error.h"

#define GT_HF_NAME_MAX 96

typedef enum { GT_HF_LLAMA, GT_HF_MIXTRAL, GT_HF_QWEN3, GT_HF_QWEN3_MOE } gt_hf_arch;

/* 1 for the architectures whose every layer is MoE */
static inline int gt_hf_arch_moe(gt_hf_arch a) {
    return a == GT_HF_MIXTRAL || a == GT_HF_QWEN3_MOE;
}

typedef struct gt_hf_tensor {
    char name[GT_HF_NAME_MAX]; /* model.layers.0.self_attn.q_proj.weight */
    size_t offset;             /* first element in the flat parameter array */
    int ndim;
    int64_t shape[2]; /* rows, columns (1-D: shape[0]) */
} gt_hf_tensor;

typedef struct gt_hf_map {
    gt_hf_arch arch;
    gt_hf_tensor *t; /* [n], in the order HF lists them */
    int n;
    size_t n_params; /* the flat parameter array's length (padding included) */
} gt_hf_map;

const char *gt_hf_arch_name(gt_hf_arch a);

/* The map of cfg's model. A model no HF architecture expresses (Qwen2-style qkv-only biases,
 * layer patterns, MoE on some layers only) is refused naming the key. Every element of every
 * parameter tensor is covered exactly once. */
int gt_hf_map_create(gt_hf_map *map, const gt_config *cfg, gt_error *err);
void gt_hf_map_destroy(gt_hf_map *map);
int64_t gt_hf_numel(const gt_hf_tensor *t);

/* config.json and generation_config.json for cfg (NULL when out of memory). */
cJSON *gt_hf_config_json(const gt_config *cfg, const gt_hf_map *map);
cJSON *gt_hf_generation_config_json(const gt_config *cfg);

/* Sets cfg's model keys from a config.json. An architecture or option graphtrain cannot
 * express is refused naming it; dir names the folder in messages. */
int gt_hf_config_apply(gt_config *cfg, const cJSON *hf, const char *dir, gt_error *err);

#endif
