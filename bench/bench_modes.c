/* Bench modes (which Bridge graph settings a run uses) and the static figures of a workload:
 * parameter counts, FLOPs per step (WORKLOADS.md formula) and the step-time limit. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "config/cuda_keys.h"

#include "config/gpus.h"

static const struct {
    const char *name;
    uint32_t bit;
} scope_names[] = {
    {"full_iteration", GT_SCOPE_FULL_ITERATION},
    {"attn", GT_SCOPE_ATTN},
    {"mlp", GT_SCOPE_MLP},
    {"moe", GT_SCOPE_MOE},
    {"moe_router", GT_SCOPE_MOE_ROUTER},
    {"moe_preprocess", GT_SCOPE_MOE_PREPROCESS},
    {"mamba", GT_SCOPE_MAMBA},
};
#define N_SCOPE_NAMES ((int)(sizeof scope_names / sizeof scope_names[0]))

void gt_bench_options_init(gt_bench_options *o) {
    memset(o, 0, sizeof *o);
    o->steps = 30;
    o->warmup = 3;
}

void gt_bench_scope_name(uint32_t scope, char *buf, size_t n) {
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < N_SCOPE_NAMES; i++) {
        if (!(scope & scope_names[i].bit)) continue;
        int w = snprintf(buf + used, n > used ? n - used : 0, "%s%s", used ? "+" : "",
                         scope_names[i].name);
        if (w > 0) used += (size_t)w;
        if (used >= n) break;
    }
    if (!used && n) snprintf(buf, n, "none");
}

static void mode_set(gt_bench_mode *m, gt_graph_impl impl, uint32_t scope) {
    m->impl = impl;
    m->scope = scope;
    if (impl == GT_GRAPH_IMPL_NONE || scope == 0) {
        m->impl = GT_GRAPH_IMPL_NONE;
        m->scope = 0;
        snprintf(m->name, sizeof m->name, "eager");
    } else {
        gt_bench_scope_name(scope, m->name, sizeof m->name);
    }
}

void gt_bench_mode_from_config(gt_bench_mode *m, const gt_config *cfg) {
    mode_set(m, cfg->model.cuda_graph_impl, cfg->model.cuda_graph_scope);
}

/* One entry of the list: "eager", "full_iteration", or scopes joined by '+'. */
static int parse_one(gt_bench_mode *m, const char *item, int moe, gt_error *err) {
    if (!strcmp(item, "eager") || !strcmp(item, "none")) {
        mode_set(m, GT_GRAPH_IMPL_NONE, 0);
        return GT_OK;
    }
    if (!strcmp(item, "full_iteration")) {
        mode_set(m, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
        return GT_OK;
    }
    uint32_t scope = 0;
    char buf[GT_BENCH_NAME_MAX];
    if (strlen(item) >= sizeof buf)
        return gt_error_set(err, GT_ERR_INVALID, "bench: mode '%.40s...' is too long", item);
    snprintf(buf, sizeof buf, "%s", item);
    char *save = NULL;
    for (char *tok = strtok_r(buf, "+", &save); tok; tok = strtok_r(NULL, "+", &save)) {
        int found = 0;
        for (int i = 0; i < N_SCOPE_NAMES; i++)
            if (!strcmp(tok, scope_names[i].name)) {
                found = 1;
                if (scope_names[i].bit == GT_SCOPE_FULL_ITERATION)
                    return gt_error_set(err, GT_ERR_INVALID,
                                        "bench: mode '%s' combines full_iteration with "
                                        "scoped graphs; use full_iteration on its own",
                                        item);
                if (moe && scope_names[i].bit == GT_SCOPE_MLP)
                    scope |= GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS;
                else
                    scope |= scope_names[i].bit;
            }
        if (!found)
            return gt_error_set(err, GT_ERR_INVALID,
                                "bench: unknown mode or scope '%s' in '%s'; modes are eager, "
                                "full_iteration, all, or scopes joined by '+' from attn, mlp, "
                                "moe, moe_router, moe_preprocess, mamba",
                                tok, item);
    }
    if (!moe && (scope & (GT_SCOPE_MOE | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS)))
        return gt_error_set(err, GT_ERR_INVALID,
                            "bench: mode '%s' graphs MoE units but the model has no experts "
                            "(model.num_moe_experts=0); use attn or attn+mlp",
                            item);
    if (!scope) return gt_error_set(err, GT_ERR_INVALID, "bench: empty mode in the mode list");
    mode_set(m, GT_GRAPH_IMPL_TE, scope);
    return GT_OK;
}

int gt_bench_parse_modes(gt_bench_options *o, const char *list, int moe, gt_error *err) {
    o->n_modes = 0;
    if (!list || !*list)
        return gt_error_set(err, GT_ERR_INVALID,
                            "bench: --modes needs a value, e.g. "
                            "eager,attn,attn+mlp,full_iteration or all");
    if (!strcmp(list, "all")) list = "eager,attn,attn+mlp,full_iteration";
    char buf[512];
    if (strlen(list) >= sizeof buf)
        return gt_error_set(err, GT_ERR_INVALID, "bench: --modes list is too long");
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_modes == GT_BENCH_MAX_MODES)
            return gt_error_set(err, GT_ERR_INVALID, "bench: at most %d modes per run",
                                GT_BENCH_MAX_MODES);
        gt_bench_mode m;
        int rc = parse_one(&m, tok, moe, err);
        if (rc) return rc;
        for (int i = 0; i < o->n_modes; i++)
            if (!strcmp(o->modes[i].name, m.name))
                return gt_error_set(err, GT_ERR_INVALID, "bench: mode '%s' is listed twice",
                                    m.name);
        o->modes[o->n_modes++] = m;
    }
    if (!o->n_modes) return gt_error_set(err, GT_ERR_INVALID, "bench: --modes lists no mode");
    return GT_OK;
}

/* Megatron's moe_layer_freq: layer i is MoE when i % freq == 0. */
static int layer_is_moe(const gt_model_config *mc, int layer) {
    if (mc->num_moe_experts <= 0) return 0;
    int freq = mc->moe_layer_freq > 0 ? mc->moe_layer_freq : 1;
    return layer % freq == 0;
}

void gt_bench_workload_compute(gt_bench_workload *w, const gt_config *cfg, double n_params,
                               double model_flops_per_token) {
    gt_error cuda_err = {0};
    /* a refused alias stops the run before this; keep the keys as set then */
    if (gt_config_cuda_settings(cfg, &w->cuda, &cuda_err) != GT_OK) w->cuda = cfg->runtime.cuda;
    const gt_model_config *mc = &cfg->model;
    double d = mc->hidden_size, V = mc->vocab_size, T = mc->seq_length;
    double H = mc->num_attention_heads;
    double KV = mc->num_query_groups > 0 ? mc->num_query_groups : H;
    double hd = gt_model_head_size(mc);
    int mb = cfg->train.micro_batch_size > 0 ? cfg->train.micro_batch_size : 1;
    int seqs = cfg->train.global_batch_size > mb ? cfg->train.global_batch_size : mb;
    double attn = d * (H + 2 * KV) * hd + H * hd * d; /* qkv + output projection */
    double active = 0, gemm = 0;
    for (int l = 0; l < mc->num_layers; l++) {
        active += attn;
        gemm += attn;
        if (layer_is_moe(mc, l)) {
            double E = mc->num_moe_experts, k = mc->moe_router_topk;
            int fe = mc->moe_ffn_hidden_size > 0 ? mc->moe_ffn_hidden_size : mc->ffn_hidden_size;
            double expert = 3 * d * fe; /* gate, up, down */
            active += d * E + k * expert;
            gemm += d * E + E * expert;
        } else {
            active += 3 * d * mc->ffn_hidden_size;
            gemm += 3 * d * mc->ffn_hidden_size;
        }
    }
    active += V * d; /* output head; the embedding lookup is not a GEMM */
    gemm += V * d;
    w->tokens_per_step = (int)(seqs * T);
    w->n_params = n_params;
    w->n_active = active;
    w->n_gemm = gemm;
    w->flops_from_model = model_flops_per_token > 0;
    if (w->flops_from_model)
        w->flops_per_step = model_flops_per_token * w->tokens_per_step;
    else
        w->flops_per_step =
            6.0 * active * w->tokens_per_step + 6.0 * mc->num_layers * seqs * T * T * H * hd;
    w->bytes_per_step = GT_BENCH_ADAMW_BYTES * n_params + GT_BENCH_GEMM_PASSES * 2.0 * gemm;
    /* runtime.gpu accepts only the table's names, so the lookup finds one */
    w->gpu_defaulted = !cfg->runtime.gpu[0];
    const gt_gpu_spec *gpu = gt_gpu_find(w->gpu_defaulted ? GT_GPU_DEFAULT : cfg->runtime.gpu);
    if (!gpu) gpu = gt_gpu_find(GT_GPU_DEFAULT);
    snprintf(w->gpu, sizeof w->gpu, "%s", gpu->name);
    /* an fp8 step does the same FLOPs (counted as bf16's), at the fp8 tensor-core rate */
    w->peak_fp8 = gt_compute_dtype_fp8_recipe(cfg->model.compute_dtype) != GT_FP8_RECIPE_NONE;
    w->peak_flops = w->peak_fp8 ? gpu->fp8_flops : gpu->bf16_flops;
    w->peak_bytes_s = gpu->bytes_per_s;
    w->limit_ms = 1e3 * (w->flops_per_step / w->peak_flops + w->bytes_per_step / w->peak_bytes_s);
}
