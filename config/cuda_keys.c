/* runtime.cuda.*: the environment aliases GT_CUDA_* (the only place they are read), the
 * settings a CUDA backend is created with, and the validation of the kernel choices through
 * the choosers of kernel_choice.h. */
#include "config/cuda_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/kernel_choice.h"
#include "config/keys.h"

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* key order of gt_cuda_config */
static const char *const k_key[GT_CUDA_CHOICES] = {
    "runtime.cuda.attention", "runtime.cuda.attention_bwd", "runtime.cuda.moe_gemm",
    "runtime.cuda.pdl", "runtime.cuda.graph_memset"};
static const char *const k_env[GT_CUDA_CHOICES] = {
    "GT_CUDA_ATTN", "GT_CUDA_ATTN_BWD", "GT_CUDA_MOE", "GT_CUDA_PDL", "GT_CUDA_GRAPH_MEMSET"};

const char *gt_cuda_env_name(int i) {
    return i >= 0 && i < GT_CUDA_CHOICES ? k_env[i] : "";
}
const char *gt_cuda_key_name(int i) {
    return i >= 0 && i < GT_CUDA_CHOICES ? k_key[i] : "";
}

static int *slot(gt_cuda_config *c, int i) {
    switch (i) {
    case 0:
        return (int *)&c->attention;
    case 1:
        return (int *)&c->attention_bwd;
    case 2:
        return (int *)&c->moe_gemm;
    case 3:
        return (int *)&c->pdl;
    default:
        return (int *)&c->graph_memset;
    }
}
static int get(const gt_cuda_config *c, int i) {
    return *slot((gt_cuda_config *)c, i);
}

const char *gt_config_cuda_value(const gt_cuda_config *c, int i) {
    const gt_key *k = gt_config_find_key(gt_cuda_key_name(i));
    int v = get(c, i);
    if (!k || v < 0) return "?";
    for (int j = 0; k->names[j]; j++)
        if (j == v) return k->names[j];
    return "?";
}

void gt_config_cuda_format(const gt_cuda_config *c, char *buf, size_t n) {
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < GT_CUDA_CHOICES && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s=%s", i ? " " : "",
                         gt_cuda_key_name(i) + strlen("runtime.cuda."), gt_config_cuda_value(c, i));
        if (w < 0) break;
        used += (size_t)w;
    }
}

void gt_config_read_cuda_env(gt_config *cfg) {
    for (int i = 0; i < GT_CUDA_CHOICES; i++) {
        const char *v = getenv(k_env[i]);
        snprintf(cfg->env.cuda_env[i], sizeof cfg->env.cuda_env[i], "%s", v ? v : "");
    }
}

/* Value index of the environment text of key i, or -1 (unknown, or too long to be a value). */
static int env_value(const gt_config *cfg, int i) {
    const gt_key *k = gt_config_find_key(k_key[i]);
    const char *v = cfg->env.cuda_env[i];
    for (int j = 0; k && k->names[j]; j++)
        if (!strcmp(k->names[j], v)) return j;
    return -1;
}

/* The reason an environment value is refused, with what to write instead. */
static void env_unknown(const gt_config *cfg, int i, char *buf, size_t n) {
    const char *v = cfg->env.cuda_env[i];
    char allowed[128];
    gt_config_list_names(gt_config_find_key(k_key[i])->names, allowed, sizeof allowed);
    const char *hint = "";
    if (!strcmp(v, "simt"))
        hint = " (the fp32 SIMT kernels are now called reference)";
    else if (!strcmp(v, "tc"))
        hint = i == 2 ? " (the WMMA grouped GEMMs were removed: use mma or wgmma)"
                      : " (the WMMA head size 128 kernels were removed; mma is the own tensor-core "
                        "attention)";
    snprintf(buf, n, "%s=%s is not one of %s%s", k_env[i], v, allowed, hint);
}

int gt_config_cuda_settings(const gt_config *cfg, gt_cuda_config *out, gt_error *err) {
    *out = cfg->runtime.cuda;
    for (int i = 0; i < GT_CUDA_CHOICES; i++) {
        if (!cfg->env.cuda_env[i][0]) continue;
        int e = env_value(cfg, i);
        if (e < 0) {
            char why[256];
            env_unknown(cfg, i, why, sizeof why);
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s; the variable is an alias of %s: set a value it allows, or "
                                "unset it for auto",
                                why, k_key[i]);
        }
        int key = get(out, i);
        if (key == 0) {
            *slot(out, i) = e;
        } else if (key != e) {
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s=%s disagrees with %s=%s; the variable is an alias of the key: "
                                "unset it, or set the key to the same value (or auto)",
                                k_env[i], cfg->env.cuda_env[i], k_key[i],
                                gt_config_cuda_value(out, i));
        }
    }
    return GT_OK;
}

void gt_config_apply_cuda_env(gt_config *cfg) {
    gt_cuda_config c;
    gt_error err = {0};
    /* on a refusal the keys stay as set: gt_config_validate reports the problem */
    if (gt_config_cuda_settings(cfg, &c, &err) == GT_OK) cfg->runtime.cuda = c;
}

/* ---- validation ---- */

static void check_env(const gt_config *cfg, gt_report *r) {
    for (int i = 0; i < GT_CUDA_CHOICES; i++) {
        if (!cfg->env.cuda_env[i][0]) continue;
        int e = env_value(cfg, i), key = get(&cfg->runtime.cuda, i);
        const char *const *keys = KEYS(k_key[i]);
        if (e < 0) {
            char why[256];
            env_unknown(cfg, i, why, sizeof why);
            gt_report_add(r, GT_SEVERITY_ERROR, "cuda_env_unknown_value", keys,
                          "set the variable to a value the key allows, or unset it (auto)",
                          "%s; the variable is an alias of %s", why, k_key[i]);
        } else if (key != 0 && key != e) {
            gt_report_add(r, GT_SEVERITY_ERROR, "cuda_env_conflicts_with_key", keys,
                          "unset the variable, or set the key to the same value (or auto)",
                          "the environment says %s=%s but the configuration sets %s=%s; an "
                          "alias and its key must agree",
                          k_env[i], cfg->env.cuda_env[i], k_key[i],
                          gt_config_cuda_value(&cfg->runtime.cuda, i));
        }
    }
}

/* One refused choice: an error when the run is on the GPU for sure, a note with device=auto. */
static void refused(const gt_config *cfg, gt_report *r, const char *rule, const char *const *keys,
                    const gt_error *why) {
    gt_severity sev = cfg->runtime.device == GT_DEVICE_CUDA ? GT_SEVERITY_ERROR : GT_SEVERITY_NOTE;
    gt_report_add(r, sev, rule, keys,
                  "set the key to a value the message names, or change the shape it names", "%s%s",
                  why->msg,
                  sev == GT_SEVERITY_NOTE ? " (a GPU run stops here; runtime.device=auto)" : "");
}

static void check_attention(const gt_config *cfg, const gt_cuda_config *c, const gt_cuda_caps *d,
                            gt_report *r) {
    const gt_model_config *m = &cfg->model;
    if (m->layer_pattern[0] && !strchr(m->layer_pattern, '*')) return; /* no attention layers */
    if (m->num_attention_heads <= 0 ||
        (m->kv_channels <= 0 && m->hidden_size % m->num_attention_heads))
        return;
    gt_attn_shape sh = {m->seq_length, gt_model_head_size(m), (float)m->attention_dropout, 0};
    gt_kernel fwd, bwd;
    gt_error err = {0};
    if (gt_choose_attention_fwd(d, c->attention, &sh, &fwd, &err) != GT_OK) {
        if (c->attention == GT_CUDA_ATTN_AUTO && cfg->runtime.device == GT_DEVICE_AUTO)
            gt_report_add(
                r, GT_SEVERITY_NOTE, "engine_gpu_head_size",
                KEYS("runtime.cuda.attention", "model.hidden_size", "model.num_attention_heads",
                     "model.kv_channels", "model.seq_length", "model.attention_dropout"),
                "choose a head size (model.kv_channels, or hidden_size / num_attention_heads) of "
                "64, or (without attention "
                "dropout) a seq_length that is a multiple of 128 for cuDNN, or "
                "runtime.cuda.attention=reference, or runtime.device=cpu",
                "%s; head size %d would stop a GPU run when the trainer is built", err.msg, sh.hd);
        else
            refused(cfg, r, "cuda_attention_choice",
                    KEYS("runtime.cuda.attention", "model.hidden_size", "model.num_attention_heads",
                         "model.kv_channels", "model.seq_length", "model.attention_dropout"),
                    &err);
        return;
    }
    if (gt_choose_attention_bwd(d, c->attention_bwd, fwd, &sh, &bwd, &err) != GT_OK)
        refused(cfg, r, "cuda_attention_bwd_choice",
                KEYS("runtime.cuda.attention_bwd", "runtime.cuda.attention", "model.hidden_size",
                     "model.num_attention_heads", "model.kv_channels", "model.seq_length"),
                &err);
}

static void check_moe(const gt_config *cfg, const gt_cuda_config *c, const gt_cuda_caps *d,
                      gt_report *r) {
    const gt_model_config *m = &cfg->model;
    int moe = m->layer_pattern[0] ? strchr(m->layer_pattern, 'E') != NULL : m->num_moe_experts > 0;
    int f = m->moe_ffn_hidden_size > 0 ? m->moe_ffn_hidden_size : m->ffn_hidden_size;
    if (!moe || m->num_moe_experts <= 0 || f <= 0) return;
    /* the gate/up product (2f x d) and the down product (d x f), forward and backward */
    gt_kernel k;
    gt_error err = {0};
    if (gt_choose_moe_gemm(d, c->moe_gemm, 2 * f, m->hidden_size, &k, &err) != GT_OK ||
        gt_choose_moe_gemm(d, c->moe_gemm, m->hidden_size, f, &k, &err) != GT_OK)
        refused(cfg, r, "cuda_moe_gemm_choice",
                KEYS("runtime.cuda.moe_gemm", "model.hidden_size", "model.moe_ffn_hidden_size"),
                &err);
}

void gt_config_check_cuda(const gt_config *cfg, gt_report *r) {
    check_env(cfg, r);
    gt_cuda_config c;
    gt_error err = {0};
    if (gt_config_cuda_settings(cfg, &c, &err) != GT_OK) return; /* reported by check_env */
    if (cfg->runtime.device == GT_DEVICE_CPU) {
        for (int i = 0; i < GT_CUDA_CHOICES; i++)
            if (get(&c, i) != 0) {
                gt_report_add(r, GT_SEVERITY_NOTE, "cuda_keys_unused_on_cpu",
                              KEYS(k_key[i], "runtime.device"),
                              "set runtime.device=auto or cuda to use it, or leave the key at auto",
                              "%s=%s chooses CUDA kernels, but runtime.device=cpu runs the fp32 "
                              "reference backend",
                              k_key[i], gt_config_cuda_value(&c, i));
                break;
            }
        return;
    }
    gt_cuda_caps d;
    gt_cuda_caps_of_gpu(cfg->runtime.gpu, &d);
    check_attention(cfg, &c, &d, r);
    check_moe(cfg, &c, &d, r);
    int on = 0;
    if (gt_choose_pdl(&d, c.pdl, &on, &err) != GT_OK)
        refused(cfg, r, "cuda_pdl_choice", KEYS("runtime.cuda.pdl", "runtime.gpu"), &err);
}
