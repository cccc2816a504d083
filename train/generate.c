/* graphtrain generate's prefill and decode loop; see generate.h. */
#include "train/generate.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config/cuda_keys.h"
#include "core/clock.h"
#include "model/model_decode.h"
#include "train/checkpoint.h"
#include "train/generate_testing.h"
#include "train/hf_convert.h"

#define GEN_PREFILL_BLOCK 128

void gt_generate_result_free(gt_generate_result *r) {
    if (!r) return;
    free(r->ids);
    free(r->logits);
    r->ids = NULL;
    r->logits = NULL;
    r->n = 0;
}

int gt_generate_check(const gt_config *cfg, const int32_t *prompt, int n_prompt,
                      const gt_generate_opts *o, gt_error *err) {
    int V = cfg->model.vocab_size;
    if (n_prompt < 1 || o->max_new_tokens < 1)
        return gt_error_set(err, GT_ERR_INVALID,
                            "generate needs a prompt of at least one token and --max-new-tokens "
                            ">= 1");
    if (!(o->temperature >= 0) || o->top_k < 0 || !(o->top_p > 0 && o->top_p <= 1))
        return gt_error_set(err, GT_ERR_INVALID,
                            "--temperature %g, --top-k %d, --top-p %g: the temperature must be "
                            ">= 0, top-k >= 0 and top-p in (0, 1]",
                            (double)o->temperature, o->top_k, (double)o->top_p);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return gt_error_set(err, GT_ERR_INVALID,
                                "prompt token %d is %d, outside the model's vocabulary [0, %d)", i,
                                prompt[i], V);
    if ((long long)n_prompt + o->max_new_tokens > 1 << 24)
        return gt_error_set(err, GT_ERR_INVALID,
                            "a prompt of %d tokens and %d new ones exceed the KV cache's %d "
                            "positions; ask for fewer tokens",
                            n_prompt, o->max_new_tokens, 1 << 24);
    return GT_OK;
}

int gt_generate_config(const gt_config *in, int seq_len, gt_config **out, gt_error *err) {
    gt_config *cfg = malloc(sizeof *cfg);
    if (!cfg) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    *cfg = *in;
    cfg->train.micro_batch_size = 1;
    cfg->model.seq_length = seq_len;
    cfg->model.attention_dropout = cfg->model.hidden_dropout = 0;
    /* dropless: a token's experts never depend on the other tokens of the batch */
    cfg->model.moe_expert_capacity_factor = -1;
    cfg->model.recompute_granularity = GT_RECOMPUTE_NONE;
    cfg->model.recompute_modules = 0;
    /* sampling reads the bf16 weights: the fp8 copies and their scales belong to training */
    cfg->model.compute_dtype = GT_DTYPE_BF16;
    *out = cfg;
    return GT_OK;
}

/* --device, as train's runtime.device: auto takes a usable GPU, else the CPU with a note */
static int make_backend(const gt_config *cfg, const char *device, gt_backend **b, gt_error *err) {
    const char *dev = device ? device : "auto";
    if (!strcmp(dev, "cpu")) return gt_backend_create_cpu(b, err);
    if (strcmp(dev, "cuda") && strcmp(dev, "auto"))
        return gt_error_set(err, GT_ERR_INVALID, "--device %s: use cpu, cuda or auto", dev);
    gt_cuda_config cuda;
    int rc = gt_config_cuda_settings(cfg, &cuda, err);
    if (rc) return gt_error_wrap(err, "--device %s: ", dev);
    gt_error cuda_err = {0};
    rc = gt_backend_create_cuda(b, 0, &cuda, &cuda_err);
    if (rc == GT_OK) return GT_OK;
    if (!strcmp(dev, "cuda") || rc == GT_ERR_INVALID) {
        *err = cuda_err;
        return gt_error_wrap(err, "--device %s: ", dev);
    }
    fprintf(stderr, "graphtrain generate: note: using the CPU backend (fp32 reference): %s\n",
            cuda_err.msg);
    return gt_backend_create_cpu(b, err);
}

/* Everything one generation holds on its backend */
typedef struct gen {
    gt_backend *b;
    gt_stream *s;
    gt_model *m;
    gt_decoder *d;
    gt_graph *g;
    gt_step_state *st;
    int T;                 /* the prefill's positions: the prompt, padded on cuda */
    int32_t *tok;          /* [T] device: the prompt, then zeros */
    float *lf;             /* [V] device: the logits in fp32 (keep_logits) */
    gt_decode_state *host; /* pinned */
    float *host_lf;        /* [V] pinned */
} gen;

static void gen_destroy(gen *g) {
    if (!g->b) return;
    gt_backend *b = g->b;
    if (g->g) b->ops->graph_destroy(b, g->g);
    if (g->st) b->ops->free(b, g->st);
    if (g->tok) b->ops->free(b, g->tok);
    if (g->lf) b->ops->free(b, g->lf);
    if (g->host) b->ops->host_free(b, g->host);
    if (g->host_lf) b->ops->host_free(b, g->host_lf);
    gt_decoder_destroy(g->d);
    gt_model_destroy(g->m);
    if (g->s) b->ops->stream_destroy(b, g->s);
    gt_backend_destroy(b);
}

/* The model, decoder and buffers, a planning pass over the prefill and a decode step (the
 * cuda backend plans every GEMM and scratch region there), the weights and the prompt */
static int gen_create(gen *g, const gt_config *cfg_in, const float *master, size_t n_params,
                      const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                      int keep_logits, gt_error *err) {
    memset(g, 0, sizeof *g);
    int V = cfg_in->model.vocab_size, rc = make_backend(cfg_in, o->device, &g->b, err);
    if (rc) return rc;
    gt_backend *b = g->b;
    /* the GPU's attention kernels take whole blocks of 128 positions: the prefill runs the
     * prompt padded to them (the padding's rows are never read) */
    int T = b->kind == GT_BACKEND_CUDA
                ? (n_prompt + GEN_PREFILL_BLOCK - 1) / GEN_PREFILL_BLOCK * GEN_PREFILL_BLOCK
                : n_prompt;
    gt_config *cfg = NULL;
    rc = gt_generate_config(cfg_in, T, &cfg, err);
    g->T = T;
    if (!rc) rc = b->ops->stream_create(b, &g->s, err);
    if (!rc) rc = gt_model_create(&g->m, cfg, b, err);
    free(cfg);
    if (!rc && gt_model_get_info(g->m)->n_params != n_params)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "the weights hold %zu parameters but the configuration describes %zu",
                          n_params, gt_model_get_info(g->m)->n_params);
    if (!rc) rc = gt_decoder_create(&g->d, g->m, n_prompt + o->max_new_tokens, err);
    if (!rc) rc = b->ops->alloc(b, sizeof *g->st, (void **)&g->st, err);
    if (!rc) rc = b->ops->alloc(b, (size_t)T * sizeof *g->tok, (void **)&g->tok, err);
    if (!rc) rc = b->ops->host_alloc(b, sizeof *g->host, (void **)&g->host, err);
    if (!rc && keep_logits) rc = b->ops->alloc(b, (size_t)V * sizeof *g->lf, (void **)&g->lf, err);
    if (!rc && keep_logits)
        rc = b->ops->host_alloc(b, (size_t)V * sizeof *g->host_lf, (void **)&g->host_lf, err);
    if (rc) return rc;
    gt_sample_params sp = {o->temperature, o->top_k, o->top_p, 0, o->seed};
    b->planning = 1;
    gt_decoder_prefill(g->d, g->s, g->tok, n_prompt, g->st);
    gt_decoder_step(g->d, g->s);
    gt_decoder_sample(g->d, g->s, sp);
    rc = b->ops->plan_finish(b, err);
    if (rc) return gt_error_wrap(err, "planning the prefill and the decode step: ");
    gt_step_state st;
    memset(&st, 0, sizeof st);
    st.nan_step = st.inject_nan = -1;
    b->ops->memcpy_h2d(b, g->s, g->st, &st, sizeof st);
    /* from_float reads device memory: the master weights go up in fp32 first, then are
     * rounded to the model's bf16 on the device, as the trainer does */
    float *staged = NULL;
    rc = b->ops->alloc(b, n_params * sizeof *staged, (void **)&staged, err);
    if (rc) return gt_error_wrap(err, "staging the weights on the device: ");
    b->ops->memcpy_h2d(b, g->s, staged, master, n_params * sizeof *staged);
    b->ops->from_float(b, g->s, gt_model_get_info(g->m)->params, staged, n_params);
    rc = b->ops->stream_sync(b, g->s, err);
    b->ops->free(b, staged);
    if (rc) return rc;
    b->ops->memcpy_h2d(b, g->s, g->tok, prompt, (size_t)n_prompt * sizeof *prompt);
    /* the first draw follows the prompt's last token, at the position after it */
    g->host->token = prompt[n_prompt - 1];
    g->host->pos = n_prompt - 1;
    g->host->draws = 0;
    b->ops->memcpy_h2d(b, g->s, gt_decoder_state(g->d), g->host, sizeof *g->host);
    return b->ops->stream_sync(b, g->s, err);
}

/* After a draw: the id (and the logits it came from) on the host */
static int read_draw(gen *g, gt_generate_result *r, int V, gt_error *err) {
    gt_backend *b = g->b;
    if (g->lf) {
        b->ops->to_float(b, g->s, g->lf, gt_decoder_logits(g->d), (size_t)V);
        b->ops->memcpy_d2h(b, g->s, g->host_lf, g->lf, (size_t)V * sizeof *g->lf);
    }
    b->ops->memcpy_d2h(b, g->s, g->host, gt_decoder_state(g->d), sizeof *g->host);
    int rc = b->ops->stream_sync(b, g->s, err);
    if (rc) return rc;
    if (g->lf) memcpy(r->logits + (size_t)r->n * V, g->host_lf, (size_t)V * sizeof *g->host_lf);
    r->ids[r->n++] = g->host->token;
    return GT_OK;
}

static int run(gen *g, const gt_generate_opts *o, int n_prompt, int V, gt_generate_result *r,
               gt_error *err) {
    gt_backend *b = g->b;
    gt_generate_stats *stt = &r->stats;
    gt_sample_params sp = {o->temperature, o->top_k, o->top_p, 0, o->seed};
    snprintf(stt->backend, sizeof stt->backend, "%s", b->kind == GT_BACKEND_CUDA ? "cuda" : "cpu");
    stt->prefill_tokens = n_prompt;
    double t0 = gt_now_ms();
    gt_decoder_prefill(g->d, g->s, g->tok, n_prompt, g->st);
    gt_decoder_sample(g->d, g->s, sp);
    int rc = read_draw(g, r, V, err);
    stt->prefill_ms = gt_now_ms() - t0;
    if (rc || r->ids[0] == o->stop_id || o->max_new_tokens == 1) return rc;
    if (!o->no_graph) {
        gt_graph_info info;
        rc = b->ops->begin_capture(b, g->s, GT_CAPTURE_THREAD_LOCAL, err);
        if (rc) return gt_error_wrap(err, "capturing the decode step: ");
        gt_decoder_step(g->d, g->s);
        gt_decoder_sample(g->d, g->s, sp);
        rc = b->ops->end_capture(b, g->s, &g->g, &info, err);
        if (rc) return gt_error_wrap(err, "capturing the decode step: ");
        stt->graph = 1;
    }
    t0 = gt_now_ms();
    while (r->n < o->max_new_tokens) {
        if (g->g) {
            rc = b->ops->graph_launch(b, g->g, g->s, err);
            if (rc) return rc;
        } else {
            gt_decoder_step(g->d, g->s);
            gt_decoder_sample(g->d, g->s, sp);
        }
        rc = read_draw(g, r, V, err);
        if (rc) return rc;
        /* after the first launch, which may set up the graph on the device */
        if (!stt->decode_steps++) b->ops->mem_info(b, &stt->free_before, NULL, &stt->peak_before);
        if (r->ids[r->n - 1] == o->stop_id) break;
    }
    stt->decode_ms = gt_now_ms() - t0;
    b->ops->mem_info(b, &stt->free_after, NULL, &stt->peak_after);
    return GT_OK;
}

int gt_generate_model(const gt_config *cfg_in, const float *master, size_t n_params,
                      const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                      int keep_logits, gt_generate_result *r, gt_error *err) {
    memset(r, 0, sizeof *r);
    int rc = gt_generate_check(cfg_in, prompt, n_prompt, o, err);
    if (rc) return rc;
    int V = cfg_in->model.vocab_size;
    r->ids = malloc((size_t)o->max_new_tokens * sizeof *r->ids);
    if (keep_logits) r->logits = malloc((size_t)o->max_new_tokens * V * sizeof *r->logits);
    if (!r->ids || (keep_logits && !r->logits))
        rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    gen g = {0};
    if (!rc) rc = gen_create(&g, cfg_in, master, n_params, prompt, n_prompt, o, keep_logits, err);
    if (!rc) rc = run(&g, o, n_prompt, V, r, err);
    gen_destroy(&g);
    if (rc) gt_generate_result_free(r);
    return rc;
}

int gt_generate_load(const char *ckpt, gt_config **cfg_out, float **master, size_t *n_params,
                     gt_error *err) {
    *cfg_out = NULL;
    *master = NULL;
    gt_config *cfg = malloc(sizeof *cfg);
    if (!cfg) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    char file[1100];
    gt_ckpt_meta meta = {0};
    float *m = NULL, *v = NULL;
    int rc = gt_hf_checkpoint_config(ckpt, cfg, file, sizeof file, err);
    if (!rc) rc = gt_ckpt_read(file, &meta, master, &m, &v, err);
    free(m);
    free(v);
    if (rc) {
        free(cfg);
        free(*master);
        *master = NULL;
        return rc;
    }
    *n_params = (size_t)meta.n_params;
    *cfg_out = cfg;
    return GT_OK;
}

int gt_generate(const char *ckpt, const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                gt_generate_result *r, gt_error *err) {
    memset(r, 0, sizeof *r);
    gt_config *cfg;
    float *master;
    size_t n;
    int rc = gt_generate_load(ckpt, &cfg, &master, &n, err);
    if (!rc) rc = gt_generate_model(cfg, master, n, prompt, n_prompt, o, 0, r, err);
    free(master);
    free(cfg);
    if (rc) gt_error_wrap(err, "generate --checkpoint %s: ", ckpt);
    return rc;
}
