/* graphtrain generate's sampling loop; see generate.h. */
#include "train/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/hf_convert.h"

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct cand {
    float logit;
    int id;
} cand;

static int by_logit(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

/* One id from logits[V]: greedy, or softmax(logits / T) cut to the top k and to the smallest
 * set whose probability reaches top_p, drawn with the generator. */
static int sample(const float *logits, int V, const gt_generate_opts *o, cand *c, uint64_t *rng) {
    for (int i = 0; i < V; i++)
        c[i] = (cand){logits[i], i};
    if (o->temperature <= 0) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    qsort(c, (size_t)V, sizeof *c, by_logit);
    int n = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(c[i].logit - c[0].logit) / o->temperature);
    double keep = 0;
    int m = 0;
    while (m < n && (m == 0 || keep < o->top_p * sum)) {
        keep += exp((double)(c[m].logit - c[0].logit) / o->temperature);
        m++;
    }
    double u = (double)(splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0) * keep, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += exp((double)(c[i].logit - c[0].logit) / o->temperature);
        if (u < acc) return c[i].id;
    }
    return c[m - 1].id;
}

typedef struct runner {
    gt_backend *b;
    gt_stream *s;
    gt_model *m;
    gt_step_state *st;
    int32_t *tok; /* [L] device */
} runner;

static void runner_destroy(runner *r) {
    if (!r->b) return;
    if (r->st) r->b->ops->free(r->b, r->st);
    if (r->tok) r->b->ops->free(r->b, r->tok);
    gt_model_destroy(r->m);
    if (r->s) r->b->ops->stream_destroy(r->b, r->s);
    gt_backend_destroy(r->b);
}

static int runner_create(runner *r, gt_config *cfg, const float *master, int L, gt_error *err) {
    memset(r, 0, sizeof *r);
    cfg->train.micro_batch_size = 1;
    cfg->model.seq_length = L;
    cfg->model.attention_dropout = cfg->model.hidden_dropout = 0;
    /* dropless: the padding after the sequence must not take capacity from its tokens */
    cfg->model.moe_expert_capacity_factor = -1;
    int rc = gt_backend_create_cpu(&r->b, err);
    if (!rc) rc = r->b->ops->stream_create(r->b, &r->s, err);
    if (!rc) rc = gt_model_create(&r->m, cfg, r->b, err);
    if (!rc) rc = r->b->ops->alloc(r->b, sizeof *r->st, (void **)&r->st, err);
    if (!rc) rc = r->b->ops->alloc(r->b, (size_t)L * sizeof *r->tok, (void **)&r->tok, err);
    if (rc) return rc;
    gt_step_state st;
    memset(&st, 0, sizeof st);
    st.nan_step = st.inject_nan = -1;
    r->b->ops->memcpy_h2d(r->b, r->s, r->st, &st, sizeof st);
    const gt_model_info *in = gt_model_get_info(r->m);
    r->b->ops->from_float(r->b, r->s, in->params, master, in->n_params);
    return r->b->ops->stream_sync(r->b, r->s, err);
}

int gt_generate(const char *ckpt, const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                int32_t **out, int *n_out, gt_error *err) {
    *out = NULL;
    *n_out = 0;
    gt_config *cfg = malloc(sizeof *cfg);
    if (!cfg) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    char file[1100];
    gt_ckpt_meta meta = {0};
    float *master = NULL, *m = NULL, *v = NULL;
    int rc = gt_hf_checkpoint_config(ckpt, cfg, file, sizeof file, err);
    if (!rc) rc = gt_ckpt_read(file, &meta, &master, &m, &v, err);
    free(m);
    free(v);
    int V = cfg->model.vocab_size, L = n_prompt + o->max_new_tokens;
    if (!rc && (n_prompt < 1 || o->max_new_tokens < 1))
        rc =
            gt_error_set(err, GT_ERR_INVALID,
                         "generate needs a prompt of at least one token and --max-new-tokens >= 1");
    for (int i = 0; !rc && i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "prompt token %d is %d, outside the model's vocabulary [0, %d)", i,
                              prompt[i], V);
    runner r = {0};
    if (!rc) rc = runner_create(&r, cfg, master, L, err);
    const gt_model_info *in = rc ? NULL : gt_model_get_info(r.m);
    if (!rc && in->n_params != meta.n_params)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "%s holds %llu parameters but its run_config.txt describes %zu", file,
                          (unsigned long long)meta.n_params, in->n_params);
    int32_t *seq = calloc((size_t)L, sizeof *seq);
    float *row = malloc((size_t)V * sizeof *row);
    cand *c = malloc((size_t)V * sizeof *c);
    if (!rc && (!seq || !row || !c)) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    uint64_t rng = o->seed;
    int len = n_prompt;
    if (!rc) memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    while (!rc && len < L) {
        memcpy(r.tok, seq, (size_t)L * sizeof *seq); /* CPU backend: host memory */
        const void *lg = gt_model_forward_logits(r.m, r.s, r.tok, r.st);
        const char *last = (const char *)lg + (size_t)(len - 1) * V * r.b->act_bytes;
        r.b->ops->to_float(r.b, r.s, row, last, (size_t)V);
        rc = r.b->ops->stream_sync(r.b, r.s, err);
        if (rc) break;
        int id = sample(row, V, o, c, &rng);
        seq[len++] = id;
        if (id == o->stop_id) break;
    }
    if (!rc) {
        *n_out = len - n_prompt;
        *out = malloc((size_t)(*n_out ? *n_out : 1) * sizeof **out);
        if (!*out)
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        else
            memcpy(*out, seq + n_prompt, (size_t)*n_out * sizeof **out);
    }
    free(seq);
    free(row);
    free(c);
    runner_destroy(&r);
    free(master);
    free(cfg);
    if (rc) gt_error_wrap(err, "generate --checkpoint %s: ", ckpt);
    return rc;
}
