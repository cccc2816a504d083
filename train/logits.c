/* graphtrain logits: a checkpoint's forward pass on the CPU or CUDA backend; see logits.h. */
#include "train/logits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config/cuda_keys.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/hf_convert.h"

typedef struct lg_run {
    gt_backend *b;
    gt_stream *s;
    gt_model *m;
    gt_step_state *st; /* device */
    int32_t *tok;      /* [T] device */
    float *master;     /* [n_params] device, fp32 */
} lg_run;

static void lg_destroy(lg_run *r) {
    if (!r->b) return;
    if (r->st) r->b->ops->free(r->b, r->st);
    if (r->tok) r->b->ops->free(r->b, r->tok);
    if (r->master) r->b->ops->free(r->b, r->master);
    gt_model_destroy(r->m);
    if (r->s) r->b->ops->stream_destroy(r->b, r->s);
    gt_backend_destroy(r->b);
}

static int make_backend(const gt_config *cfg, gt_device_kind device, gt_backend **b,
                        gt_error *err) {
    if (device == GT_DEVICE_CPU) return gt_backend_create_cpu(b, err);
    gt_cuda_config cuda;
    int rc = gt_config_cuda_settings(cfg, &cuda, err);
    if (rc) return rc;
    gt_error cuda_err = {0};
    rc = gt_backend_create_cuda(b, 0, &cuda, &cuda_err);
    if (rc == GT_OK) return GT_OK;
    if (device == GT_DEVICE_CUDA || rc == GT_ERR_INVALID) {
        *err = cuda_err;
        return gt_error_wrap(err, "--device %s: ", device == GT_DEVICE_CUDA ? "cuda" : "auto");
    }
    return gt_backend_create_cpu(b, err); /* auto without a usable GPU */
}

/* The model for T tokens on its backend, the master weights cast into its parameters, every
 * shape planned by one planning pass of the forward. */
static int lg_create(lg_run *r, gt_config *cfg, gt_device_kind device, const float *master,
                     size_t n_params, int T, gt_error *err) {
    memset(r, 0, sizeof *r);
    cfg->train.micro_batch_size = 1;
    cfg->model.seq_length = T;
    cfg->model.attention_dropout = cfg->model.hidden_dropout = 0;
    cfg->model.moe_expert_capacity_factor = -1; /* dropless: every token's own experts */
    cfg->model.recompute_granularity = GT_RECOMPUTE_NONE;
    int rc = make_backend(cfg, device, &r->b, err);
    if (!rc) rc = r->b->ops->stream_create(r->b, &r->s, err);
    if (!rc) rc = gt_model_create(&r->m, cfg, r->b, err);
    const gt_model_info *in = rc ? NULL : gt_model_get_info(r->m);
    if (!rc && in->n_params != n_params)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "the checkpoint holds %zu parameters but its run_config.txt describes "
                          "%zu",
                          n_params, in->n_params);
    if (!rc) rc = r->b->ops->alloc(r->b, sizeof *r->st, (void **)&r->st, err);
    if (!rc) rc = r->b->ops->alloc(r->b, (size_t)T * sizeof *r->tok, (void **)&r->tok, err);
    if (!rc) rc = r->b->ops->alloc(r->b, n_params * sizeof(float), (void **)&r->master, err);
    if (rc) return rc;
    r->b->planning = 1;
    gt_model_forward_logits(r->m, r->s, r->tok, r->st);
    rc = r->b->ops->plan_finish(r->b, err);
    r->b->planning = 0;
    if (rc) return gt_error_wrap(err, "planning the forward: ");
    gt_step_state st;
    memset(&st, 0, sizeof st);
    st.nan_step = st.inject_nan = -1;
    r->b->ops->memcpy_h2d(r->b, r->s, r->st, &st, sizeof st);
    r->b->ops->memcpy_h2d(r->b, r->s, r->master, master, n_params * sizeof(float));
    r->b->ops->from_float(r->b, r->s, in->params, r->master, n_params);
    return r->b->ops->stream_sync(r->b, r->s, err);
}

static double next_token_loss(const float *lg, const int32_t *tokens, int T, int V) {
    double sum = 0;
    for (int t = 0; t + 1 < T; t++) {
        const float *row = lg + (size_t)t * V;
        double mx = row[0];
        for (int v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        double z = exp((double)row[0] - mx); /* >= exp(0 - range): log(z) is defined */
        for (int v = 1; v < V; v++)
            z += exp((double)row[v] - mx);
        sum += log(z) + mx - row[tokens[t + 1]];
    }
    return T > 1 ? sum / (T - 1) : 0.0;
}

int gt_checkpoint_logits(const char *ckpt, gt_device_kind device, const int32_t *tokens, int T,
                         float **logits, int *V, double *loss, gt_error *err) {
    *logits = NULL;
    gt_config *cfg = malloc(sizeof *cfg);
    if (!cfg) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    char file[1100];
    gt_ckpt_meta meta = {0};
    float *master = NULL, *m = NULL, *v = NULL;
    int rc = gt_hf_checkpoint_config(ckpt, cfg, file, sizeof file, err);
    if (!rc) rc = gt_ckpt_read(file, &meta, &master, &m, &v, err);
    free(m);
    free(v);
    int nv = cfg->model.vocab_size;
    if (!rc && T < 1) rc = gt_error_set(err, GT_ERR_INVALID, "logits needs at least one token");
    for (int i = 0; !rc && i < T; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "token %d is %d, outside the model's vocabulary [0, %d)", i,
                              tokens[i], nv);
    lg_run r = {0};
    if (!rc) rc = lg_create(&r, cfg, device, master, (size_t)meta.n_params, T, err);
    float *out = rc ? NULL : malloc((size_t)T * nv * sizeof *out), *dev = NULL;
    if (!rc && !out) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the logits");
    if (!rc) rc = r.b->ops->alloc(r.b, (size_t)T * nv * sizeof(float), (void **)&dev, err);
    if (!rc) {
        r.b->ops->memcpy_h2d(r.b, r.s, r.tok, tokens, (size_t)T * sizeof *tokens);
        const void *lg = gt_model_forward_logits(r.m, r.s, r.tok, r.st);
        r.b->ops->to_float(r.b, r.s, dev, lg, (size_t)T * nv);
        r.b->ops->memcpy_d2h(r.b, r.s, out, dev, (size_t)T * nv * sizeof(float));
        rc = r.b->ops->stream_sync(r.b, r.s, err);
        if (!rc) rc = gt_backend_check(r.b, err);
    }
    if (dev) r.b->ops->free(r.b, dev);
    lg_destroy(&r);
    free(master);
    free(cfg);
    if (rc) {
        free(out);
        return gt_error_wrap(err, "logits --checkpoint %s: ", ckpt);
    }
    *logits = out;
    *V = nv;
    *loss = next_token_loss(out, tokens, T, nv);
    return GT_OK;
}
