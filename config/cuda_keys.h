/* The runtime.cuda.* keys beyond the key table: their environment aliases (GT_CUDA_ATTN ...),
 * read here and nowhere else, the settings a CUDA backend is created with, and the validation
 * rules of the kernel choices. */
#ifndef GT_CONFIG_CUDA_KEYS_H
#define GT_CONFIG_CUDA_KEYS_H

#include "config/config.h"
#include "config/rules.h"
#include "core/error.h"

/* Environment name of runtime.cuda key i (key order of gt_cuda_config), and the key's name. */
const char *gt_cuda_env_name(int i);
const char *gt_cuda_key_name(int i);

/* Reads GT_CUDA_ATTN, GT_CUDA_ATTN_BWD, GT_CUDA_MOE, GT_CUDA_PDL and GT_CUDA_GRAPH_MEMSET into
 * cfg->env.cuda_env (called by gt_config_read_env). */
void gt_config_read_cuda_env(gt_config *cfg);
/* The aliases' rule: an environment value fills its key while the key is auto; a key set to
 * another value than a set variable is refused (validation rule cuda_env_conflicts_with_key),
 * as is a variable with a value the key does not allow (cuda_env_unknown_value). Writes the
 * settings into cfg->runtime.cuda where that succeeds (called by gt_config_finalize), so the
 * printed configuration shows what runs. */
void gt_config_apply_cuda_env(gt_config *cfg);
/* The settings a CUDA backend runs with: the keys, with the environment applied as above;
 * GT_ERR_INVALID (naming the variable and the key) on an unknown value or a disagreement. */
int gt_config_cuda_settings(const gt_config *cfg, gt_cuda_config *out, gt_error *err);
/* "attention=auto attention_bwd=auto moe_gemm=auto pdl=auto graph_memset=auto" */
void gt_config_cuda_format(const gt_cuda_config *c, char *buf, size_t n);
/* The text value of runtime.cuda key i in c. */
const char *gt_config_cuda_value(const gt_cuda_config *c, int i);

/* Validation of the kernel choices (part of gt_config_validate): the aliases above, and every
 * op family of the model through the choosers (config/kernel_choice.h) for the device
 * runtime.gpu names: an error with runtime.device=cuda, a note with auto (the run may be on
 * the CPU), nothing with cpu but a note when a runtime.cuda key is set there. */
void gt_config_check_cuda(const gt_config *cfg, gt_report *r);

#endif
