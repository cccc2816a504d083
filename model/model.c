/* The model's lifecycle and views: create (plan + allocate the four arenas), destroy, the
 * memory plan, named parameter tensors, unit lists and deterministic initial weights. */
#include "model/model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/philox.h"
#include "model/model_internal.h"

/* Philox counter word that separates initialization draws from dropout draws. */
#define GT_INIT_STREAM 0x494E4954u /* "INIT" */
#define GT_TWO_PI 6.283185307179586476925286766559

int gt_model_create(gt_model **out, const gt_config *cfg, gt_backend *b, gt_error *err) {
    *out = NULL;
    if (!b) return gt_error_set(err, GT_ERR_INVALID, "gt_model_create needs a backend");
    gt_model *m = malloc(sizeof *m);
    if (!m) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating the model");
    int rc = gt_model_build(m, cfg, b->act_bytes, err);
    m->b = b;
    if (!rc && m->dm.ms.H > 0 && !b->ops->mamba_ssd_fwd)
        rc = gt_error_set(err, GT_ERR_UNSUPPORTED,
                          "model.hybrid_override_pattern has Mamba layers ('M'), which the %s "
                          "backend cannot run (it has no Mamba kernels); set "
                          "runtime.device=cpu or cuda",
                          b->name);
    if (!rc) rc = gt_backend_alloc_arena(b, &m->params, err);
    if (!rc) rc = gt_backend_alloc_arena(b, &m->grads, err);
    if (!rc) rc = gt_backend_alloc_arena(b, &m->acts, err);
    if (!rc) gt_model_bind_recompute(m);
    if (!rc) rc = gt_backend_alloc_arena(b, &m->scratch, err);
    if (!rc) rc = gt_model_fp8_init(m, err);
    if (rc) {
        gt_model_destroy(m);
        return rc;
    }
    m->info.params = m->params_base;
    m->info.grads = m->grads_base;
    m->dscale = 1.0f;
    *out = m;
    return GT_OK;
}

void gt_model_destroy(gt_model *m) {
    if (!m) return;
    gt_model_release(m);
    free(m);
}

const gt_model_info *gt_model_get_info(const gt_model *m) {
    return &m->info;
}

void gt_model_print_plan(const gt_model *m, FILE *f, int verbose) {
    const gt_model_dims *dm = &m->dm;
    fprintf(f, "model: %d layers, d=%d, heads=%d/%d (hd %d), ffn=%d, vocab=%d, tokens/micro=%d",
            m->num_layers, dm->d, dm->H, dm->KV, dm->hd, dm->f, dm->V, dm->N);
    if (dm->E > 0)
        fprintf(f, ", experts=%d top-%d ffn=%d %s", dm->E, dm->k, dm->fe,
                dm->capacity ? "drop-and-pad" : "dropless");
    fprintf(f, "\n  parameters: %zu (%zu with alignment, %zu weight-decayed), %.3g GFLOP/token\n",
            m->n_real, m->info.n_params, m->info.n_decay, m->info.flops_per_token * 1e-9);
    if (verbose)
        for (int i = 0; i < m->n_tensors; i++) {
            const gt_model_tensor_desc *t = &m->tensors[i];
            fprintf(f, "    %-32s [%d", t->name, t->shape[0]);
            for (int j = 1; j < t->ndim; j++)
                fprintf(f, ", %d", t->shape[j]);
            fprintf(f, "] @ %zu%s\n", t->offset, t->decay ? "" : " (no decay)");
        }
    gt_arena_print(&m->params, f, 0);
    gt_arena_print(&m->grads, f, 0);
    gt_arena_print(&m->acts, f, verbose);
    gt_arena_print(&m->scratch, f, verbose);
}

int gt_model_num_tensors(const gt_model *m) {
    return m->n_tensors;
}

void gt_model_tensor(const gt_model *m, int i, const char **name, size_t *offset, int *ndim,
                     int shape[3]) {
    const gt_model_tensor_desc *t = &m->tensors[i];
    if (name) *name = t->name;
    if (offset) *offset = t->offset;
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->shape, sizeof t->shape);
}

void *gt_model_param(const gt_model *m, int i) {
    if (i < 0) return NULL;
    return (char *)m->params_base + m->tensors[i].offset * m->act_elem;
}

float *gt_model_grad(const gt_model *m, int i) {
    if (i < 0) return NULL;
    return m->grads_base + m->tensors[i].offset;
}

int gt_model_num_units(const gt_model *m, int layer) {
    if (layer < 0 || layer >= m->num_layers) return 0;
    return m->layers[layer].n_units;
}

gt_unit_kind gt_model_unit_kind(const gt_model *m, int layer, int unit) {
    if (layer < 0 || layer >= m->num_layers || unit < 0 || unit >= m->layers[layer].n_units)
        return GT_UNIT_KINDS;
    return m->layers[layer].kinds[unit];
}

const char *gt_unit_kind_name(gt_unit_kind k) {
    switch (k) {
    case GT_UNIT_ATTN:
        return "attn";
    case GT_UNIT_MLP:
        return "mlp";
    case GT_UNIT_MOE_ROUTER:
        return "moe_router";
    case GT_UNIT_MOE_PREPROCESS:
        return "moe_preprocess";
    case GT_UNIT_MOE:
        return "moe";
    case GT_UNIT_MAMBA:
        return "mamba";
    default:
        return "unknown";
    }
}

/* Standard normal for element idx: Box-Muller over one Philox draw keyed by (seed, idx), so
 * every value is independent of the order in which tensors are initialized. */
static double normal_at(uint64_t seed, uint64_t idx) {
    gt_philox4 c = {{(uint32_t)idx, (uint32_t)(idx >> 32), GT_INIT_STREAM, 0}};
    gt_philox4 r = gt_philox4x32_10(c, seed);
    double u1 = ((double)(r.v[0] >> 8) + 1.0) / 16777216.0; /* (0, 1] */
    double u2 = (double)(r.v[1] >> 8) / 16777216.0;
    return sqrt(-2.0 * log(u1)) * cos(GT_TWO_PI * u2);
}

/* Output projections (attention out, MLP / expert down) use std / sqrt(2 * layers), as
 * Megatron's scaled_init_method_normal does. */
static int is_output_projection(const char *name) {
    size_t n = strlen(name);
    return (n >= 4 && strcmp(name + n - 4, ".o_w") == 0) ||
           (n >= 7 && strcmp(name + n - 7, ".down_w") == 0);
}

/* Initialization is ~100 ns per element (a Philox draw, log and cos in double): 90 s for a
 * 1B-parameter model on one core. Every value depends only on (seed, index), so the work is
 * split over threads by index range and the result is the same for any thread count. */
#define INIT_MAX_THREADS 32

typedef struct init_job {
    const gt_model *m;
    uint64_t seed;
    float *host_master;
    int part, parts;
} init_job;

static void *init_part(void *arg) {
    const init_job *job = arg;
    const gt_model *m = job->m;
    double std = m->cfg.model.init_method_std;
    double out_std = std / sqrt(2.0 * m->num_layers);
    for (int i = 0; i < m->n_tensors; i++) {
        const gt_model_tensor_desc *t = &m->tensors[i];
        float *p = job->host_master + t->offset;
        int is_norm = strstr(t->name, "norm") != NULL;
        size_t lo = t->numel * (size_t)job->part / (size_t)job->parts;
        size_t hi = t->numel * (size_t)(job->part + 1) / (size_t)job->parts;
        if (gt_mamba_init_tensor(m, i, job->seed, p, lo, hi)) continue;
        if (t->ndim == 1) {
            for (size_t j = lo; j < hi; j++)
                p[j] = is_norm ? 1.0f : 0.0f;
            continue;
        }
        double s = is_output_projection(t->name) ? out_std : std;
        for (size_t j = lo; j < hi; j++)
            p[j] = (float)(s * normal_at(job->seed, t->offset + j));
    }
    return NULL;
}

int gt_model_init_params(const gt_model *m, uint64_t seed, float *host_master, gt_error *err) {
    double std = m->cfg.model.init_method_std;
    if (!(std > 0))
        return gt_error_set(err, GT_ERR_INVALID, "model.init_method_std is %g; it must be > 0",
                            std);
    memset(host_master, 0, m->info.n_params * sizeof(float));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    /* threads only pay off for large models */
    int parts = m->info.n_params < ((size_t)1 << 22) ? 1
                : cores < 1                          ? 1
                : cores > INIT_MAX_THREADS           ? INIT_MAX_THREADS
                                                     : (int)cores;
    init_job jobs[INIT_MAX_THREADS] = {{0}};
    pthread_t threads[INIT_MAX_THREADS];
    int running[INIT_MAX_THREADS] = {0};
    for (int k = 0; k < parts; k++)
        jobs[k] = (init_job){m, seed, host_master, k, parts};
    for (int k = 1; k < parts; k++)
        running[k] = pthread_create(&threads[k], NULL, init_part, &jobs[k]) == 0;
    init_part(&jobs[0]);
    /* a part whose thread could not start is done here, so the result never changes */
    for (int k = 1; k < parts; k++) {
        if (running[k])
            pthread_join(threads[k], NULL);
        else
            init_part(&jobs[k]);
    }
    return GT_OK;
}
