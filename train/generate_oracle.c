/* The full-recompute generation, the KV-cache decoder's test oracle; see generate_testing.h.
 * One model of the whole length L = prompt + new tokens: each token reruns the forward over
 * all L positions (the ones after the sequence so far hold zeros, which causal attention and
 * dropless routing keep out of the earlier positions) and draws from row len - 1. */
#include <stdlib.h>
#include <string.h>

#include "backend/decode_ops.h"
#include "model/model.h"
#include "train/generate_testing.h"

typedef struct oracle {
    gt_backend *b;
    gt_stream *s;
    gt_model *m;
    gt_step_state *st;
    gt_decode_state *ds;
    int32_t *tok; /* [L] */
    float *ws;    /* [V] */
} oracle;

static void oracle_destroy(oracle *o) {
    if (!o->b) return;
    gt_backend *b = o->b;
    b->ops->free(b, o->st);
    b->ops->free(b, o->ds);
    b->ops->free(b, o->tok);
    b->ops->free(b, o->ws);
    gt_model_destroy(o->m);
    if (o->s) b->ops->stream_destroy(b, o->s);
    gt_backend_destroy(b);
}

static int oracle_create(oracle *o, const gt_config *cfg, const float *master, size_t n_params,
                         int L, gt_error *err) {
    memset(o, 0, sizeof *o);
    int rc = gt_backend_create_cpu(&o->b, err);
    gt_backend *b = o->b;
    if (!rc) rc = b->ops->stream_create(b, &o->s, err);
    if (!rc) rc = gt_model_create(&o->m, cfg, b, err);
    if (!rc && gt_model_get_info(o->m)->n_params != n_params)
        rc = gt_error_set(err, GT_ERR_INVALID, "the weights hold %zu parameters, the model %zu",
                          n_params, gt_model_get_info(o->m)->n_params);
    if (!rc) rc = b->ops->alloc(b, sizeof *o->st, (void **)&o->st, err);
    if (!rc) rc = b->ops->alloc(b, sizeof *o->ds, (void **)&o->ds, err);
    if (!rc) rc = b->ops->alloc(b, (size_t)L * sizeof *o->tok, (void **)&o->tok, err);
    if (!rc)
        rc = b->ops->alloc(b, (size_t)cfg->model.vocab_size * sizeof *o->ws, (void **)&o->ws, err);
    if (rc) return rc;
    o->st->nan_step = o->st->inject_nan = -1;
    b->ops->from_float(b, o->s, gt_model_get_info(o->m)->params, master, n_params);
    return b->ops->stream_sync(b, o->s, err);
}

int gt_generate_recompute(const gt_config *cfg_in, const float *master, size_t n_params,
                          const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                          gt_generate_result *r, gt_error *err) {
    memset(r, 0, sizeof *r);
    int rc = gt_generate_check(cfg_in, prompt, n_prompt, o, err);
    int L = n_prompt + o->max_new_tokens, V = cfg_in->model.vocab_size;
    gt_config *cfg = NULL;
    if (!rc) rc = gt_generate_config(cfg_in, L, &cfg, err);
    if (rc) return rc;
    oracle q = {0};
    rc = oracle_create(&q, cfg, master, n_params, L, err);
    r->ids = malloc((size_t)o->max_new_tokens * sizeof *r->ids);
    r->logits = malloc((size_t)o->max_new_tokens * V * sizeof *r->logits);
    if (!rc && (!r->ids || !r->logits)) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    const gt_decode_ops *dops = rc ? NULL : gt_cpu_decode_ops();
    gt_sample_params sp = {o->temperature, o->top_k, o->top_p, 0, o->seed};
    int len = n_prompt;
    if (!rc) {
        memcpy(q.tok, prompt, (size_t)n_prompt * sizeof *prompt); /* CPU: host memory */
        *q.ds = (gt_decode_state){prompt[n_prompt - 1], n_prompt - 1, 0, 0};
    }
    while (!rc && len < L) {
        const float *lg = gt_model_forward_logits(q.m, q.s, q.tok, q.st);
        const float *row = lg + (size_t)(len - 1) * V;
        dops->sample(q.b, q.s, q.ds, row, V, sp, q.ws);
        rc = q.b->ops->stream_sync(q.b, q.s, err);
        if (rc) break;
        memcpy(r->logits + (size_t)r->n * V, row, (size_t)V * sizeof *row);
        r->ids[r->n++] = q.tok[len++] = q.ds->token;
        if (q.ds->token == o->stop_id) break;
    }
    oracle_destroy(&q);
    free(cfg);
    if (rc) gt_generate_result_free(r);
    return rc;
}
