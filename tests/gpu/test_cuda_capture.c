/* GPU tests of CUDA graph capture through the backend: a captured op sequence replays to the
 * same bits as eager, a capture that synchronizes is rejected cleanly (no graph left alive,
 * the backend keeps working), and a global-mode capture of a whole training step (forward,
 * backward, gradient norm, AdamW) succeeds and replays bitwise equal to eager step by step.
 * Programmatic dependent launch (kernels starting while their predecessor finishes) changes
 * no bit, eager or replayed, nor does replacing a graph's memset nodes by fill kernels (which
 * write what memset nodes of every element size and shape write); an unknown runtime.cuda.pdl or
 * graph_memset setting is refused. */
#include "backend/cuda/cuda_backend.h" /* gt_cuda_impl: pdl, graph_fill */
#include "gpu_fixture.h"

/* A tiny one-layer model step on the GPU, all buffers fixed. */
enum { BB = 2, TT = 96, HH = 4, KVH = 2, HD = 64, DM = HH * HD, VOC = 512, FF = 384 };
#define NTOK (BB * TT)
#define QKV_W ((HH + 2 * KVH) * HD)

typedef struct model {
    gt_backend *b;
    gt_stream *s;
    int32_t *tokens, *targets;
    gt_step_state *st;
    /* parameters (bf16) and their fp32 master, grads, moments: one flat array each */
    void *params;
    float *master, *grads, *m, *v;
    size_t nparam;
    void *wte, *wqkv, *wo, *wgu, *wdown, *wlm, *norm_w; /* views into params */
    float *dwte, *dwqkv, *dwo, *dwgu, *dwdown, *dwlm, *dnorm_w;
    /* activations */
    void *x, *xn, *qkv, *att, *x2, *xn2, *gu, *hmid, *x3, *logits;
    float *rstd, *rstd2, *lse, *losses;
    void *dx, *dxn, *dqkv, *datt, *dctx, *dgu, *dhmid;
} model;

/* elements rounded up so every view is 256-byte aligned as bf16 and as fp32 */
static size_t pad_elems(size_t n) {
    return (n + 127) & ~(size_t)127;
}

static void model_build(gpu_env *e, model *md) {
    md->b = e->gpu;
    md->s = e->gs;
    size_t sizes[7] = {(size_t)VOC * DM,
                       (size_t)QKV_W * DM,
                       (size_t)DM * DM,
                       (size_t)2 * FF * DM,
                       (size_t)DM * FF,
                       (size_t)VOC * DM,
                       DM};
    size_t off[7], n = 0;
    for (int i = 0; i < 7; i++) {
        off[i] = n;
        n += pad_elems(sizes[i]);
    }
    md->nparam = n;
    float *h = rand_vec(e, n, 0.05f);
    for (size_t i = off[6]; i < off[6] + DM; i++)
        h[i] = 1.0f;
    md->master = g_f32(e, h, n);
    md->params = g_act(e, h, n);
    md->grads = g_f32(e, NULL, n);
    md->m = g_f32(e, NULL, n);
    md->v = g_f32(e, NULL, n);
    void **pv[7] = {&md->wte, &md->wqkv, &md->wo, &md->wgu, &md->wdown, &md->wlm, &md->norm_w};
    float **gv[7] = {&md->dwte,   &md->dwqkv, &md->dwo,    &md->dwgu,
                     &md->dwdown, &md->dwlm,  &md->dnorm_w};
    for (int i = 0; i < 7; i++) {
        *pv[i] = (char *)md->params + off[i] * 2;
        *gv[i] = md->grads + off[i];
    }
    free(h);
    int32_t tok[NTOK], tg[NTOK];
    for (int i = 0; i < NTOK; i++) {
        tok[i] = (int32_t)(env_next(e) % VOC);
        tg[i] = (int32_t)(env_next(e) % VOC);
    }
    md->tokens = g_i32(e, tok, NTOK);
    md->targets = g_i32(e, tg, NTOK);
    gt_step_state init = default_state();
    init.step = 0;
    init.micro = 0;
    md->st = g_alloc(e, sizeof init);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, md->st, &init, sizeof init);
    size_t nd = (size_t)NTOK * DM;
    md->x = g_act(e, NULL, nd), md->xn = g_act(e, NULL, nd), md->x2 = g_act(e, NULL, nd);
    md->xn2 = g_act(e, NULL, nd), md->x3 = g_act(e, NULL, nd), md->att = g_act(e, NULL, nd);
    md->qkv = g_act(e, NULL, (size_t)NTOK * QKV_W);
    md->gu = g_act(e, NULL, (size_t)NTOK * 2 * FF), md->hmid = g_act(e, NULL, (size_t)NTOK * FF);
    md->logits = g_act(e, NULL, (size_t)NTOK * VOC);
    md->rstd = g_f32(e, NULL, NTOK), md->rstd2 = g_f32(e, NULL, NTOK);
    md->lse = g_f32(e, NULL, (size_t)BB * HH * TT), md->losses = g_f32(e, NULL, NTOK);
    md->dx = g_act(e, NULL, nd), md->dxn = g_act(e, NULL, nd), md->datt = g_act(e, NULL, nd);
    md->dctx = g_act(e, NULL, nd);
    md->dqkv = g_act(e, NULL, (size_t)NTOK * QKV_W);
    md->dgu = g_act(e, NULL, (size_t)NTOK * 2 * FF);
    md->dhmid = g_act(e, NULL, (size_t)NTOK * FF);
}

/* One training step: every op below runs on md->s with per-step values in md->st. */
static void model_step(model *md) {
    gt_backend *b = md->b;
    const gt_backend_ops *o = b->ops;
    gt_stream *s = md->s;
    gt_rng_site site = {7, 1, 0}, site2 = {7, 2, 0};
    gt_lr_schedule sc = {1e-3f, 1e-4f, 2, 50, 2, 0.0f, 0, 0};
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    float p = 0.1f;
    o->step_begin(b, s, md->st, sc);
    o->memset0(b, s, md->grads, md->nparam * sizeof(float));
    /* forward */
    o->embedding_fwd(b, s, md->x, md->tokens, md->wte, NTOK, DM);
    o->rmsnorm_fwd(b, s, md->xn, md->rstd, md->x, md->norm_w, NTOK, DM, 1e-5f);
    o->matmul_fwd(b, s, md->qkv, md->xn, md->wqkv, NULL, NULL, NTOK, QKV_W, DM);
    o->rope_fwd(b, s, md->qkv, BB, TT, HH, KVH, HD, 10000.0f);
    o->attention_fwd(b, s, md->att, md->lse, md->qkv, BB, TT, HH, KVH, HD, p, site, md->st);
    o->matmul_fwd(b, s, md->x2, md->att, md->wo, NULL, NULL, NTOK, DM, DM);
    o->dropout_fwd(b, s, md->x2, md->x2, (size_t)NTOK * DM, p, site2, md->st);
    o->add(b, s, md->x2, md->x2, md->x, (size_t)NTOK * DM);
    o->rmsnorm_fwd(b, s, md->xn2, md->rstd2, md->x2, md->norm_w, NTOK, DM, 1e-5f);
    o->matmul_fwd(b, s, md->gu, md->xn2, md->wgu, NULL, NULL, NTOK, 2 * FF, DM);
    o->swiglu_fwd(b, s, md->hmid, md->gu, NTOK, FF);
    o->matmul_fwd(b, s, md->x3, md->hmid, md->wdown, NULL, NULL, NTOK, DM, FF);
    o->add(b, s, md->x3, md->x3, md->x2, (size_t)NTOK * DM);
    o->matmul_fwd(b, s, md->logits, md->x3, md->wlm, NULL, NULL, NTOK, VOC, DM);
    o->cross_entropy(b, s, md->losses, md->logits, md->logits, md->targets, NTOK, VOC, 1.0f / NTOK);
    o->loss_accumulate(b, s, md->st, md->losses, NTOK, 1.0f / NTOK);
    /* backward (dx is the residual stream gradient) */
    o->matmul_bwd_weight(b, s, md->dwlm, NULL, md->logits, md->x3, NTOK, VOC, DM, 1);
    o->matmul_bwd_data(b, s, md->dx, md->logits, md->wlm, NTOK, VOC, DM, 0);
    o->matmul_bwd_weight(b, s, md->dwdown, NULL, md->dx, md->hmid, NTOK, DM, FF, 1);
    o->matmul_bwd_data(b, s, md->dhmid, md->dx, md->wdown, NTOK, DM, FF, 0);
    o->swiglu_bwd(b, s, md->dgu, md->dhmid, md->gu, NTOK, FF);
    o->matmul_bwd_weight(b, s, md->dwgu, NULL, md->dgu, md->xn2, NTOK, 2 * FF, DM, 1);
    o->matmul_bwd_data(b, s, md->dxn, md->dgu, md->wgu, NTOK, 2 * FF, DM, 0);
    o->rmsnorm_bwd(b, s, md->dx, md->dnorm_w, md->dxn, md->x2, md->norm_w, md->rstd2, NTOK, DM, 1);
    o->dropout_bwd(b, s, md->datt, md->dx, (size_t)NTOK * DM, p, site2, md->st);
    o->matmul_bwd_weight(b, s, md->dwo, NULL, md->datt, md->att, NTOK, DM, DM, 1);
    o->matmul_bwd_data(b, s, md->dctx, md->datt, md->wo, NTOK, DM, DM, 0);
    o->attention_bwd(b, s, md->dqkv, md->dctx, md->qkv, md->att, md->lse, BB, TT, HH, KVH, HD, p,
                     site, md->st);
    o->rope_bwd(b, s, md->dqkv, BB, TT, HH, KVH, HD, 10000.0f);
    o->matmul_bwd_weight(b, s, md->dwqkv, NULL, md->dqkv, md->xn, NTOK, QKV_W, DM, 1);
    o->matmul_bwd_data(b, s, md->dxn, md->dqkv, md->wqkv, NTOK, QKV_W, DM, 0);
    o->rmsnorm_bwd(b, s, md->dx, md->dnorm_w, md->dxn, md->x, md->norm_w, md->rstd, NTOK, DM, 1);
    o->embedding_bwd(b, s, md->dwte, NULL, md->dx, md->tokens, NTOK, VOC, DM, 0);
    o->micro_next(b, s, md->st);
    /* optimizer */
    o->grad_norm(b, s, md->st, md->grads, md->nparam, GT_NO_GRAD_ROWS, 1, 1, hp.clip_grad);
    o->adamw(b, s, md->params, md->master, md->grads, GT_NO_GRAD_ROWS, md->m, md->v, md->nparam,
             md->nparam, hp, md->st);
    o->step_end(b, s, md->st);
}

static void model_plan(gpu_env *e, model *md) {
    GPU_PLAN(e, model_step(md));
    g_sync(e);
}

static void read_losses(gpu_env *e, model *md, float *loss, float *gnorm) {
    gt_step_state hs;
    read_state(e, &hs, md->st);
    *loss = hs.loss;
    *gnorm = hs.grad_norm;
}

static void test_capture_of_a_short_sequence_replays_equal_to_eager(void **state) {
    gpu_env *e = *state;
    gt_error err = {0};
    int M = 64, N = 128, K = 96;
    float *a = rand_vec(e, (size_t)M * K, 1.0f), *w = rand_vec(e, (size_t)N * K, 1.0f);
    float *nw = rand_vec(e, N, 1.0f);
    float *eager = malloc((size_t)M * N * 4), *replay = malloc((size_t)M * N * 4);
    void *ga = g_act(e, a, (size_t)M * K), *gw = g_act(e, w, (size_t)N * K);
    void *gnw = g_act(e, nw, N), *h = g_act(e, NULL, (size_t)M * N);
    void *out = g_act(e, NULL, (size_t)M * N);
    float *rstd = g_f32(e, NULL, M);
    gt_backend *b = e->gpu;
    size_t MN = (size_t)M * N;
/* a plain block, not do-while: cppcheck cannot parse a do-while passed into GPU_PLAN */
#define SEQ()                                                                                      \
    {                                                                                              \
        b->ops->matmul_fwd(b, e->gs, h, ga, gw, NULL, NULL, M, N, K);                              \
        b->ops->rmsnorm_fwd(b, e->gs, out, rstd, h, gnw, M, N, 1e-5f);                             \
        b->ops->add(b, e->gs, out, out, h, MN);                                                    \
        b->ops->swiglu_fwd(b, e->gs, h, out, M, N / 2);                                            \
    }
    GPU_PLAN(e, SEQ());
    SEQ();
    g_read_act(e, eager, h, (size_t)M * N);
    b->ops->memset0(b, e->gs, h, (size_t)M * N * 2);
    b->ops->memset0(b, e->gs, out, (size_t)M * N * 2);
    g_sync(e);
    assert_int_equal(b->ops->begin_capture(b, e->gs, GT_CAPTURE_THREAD_LOCAL, &err), GT_OK);
    SEQ();
    gt_graph *g = NULL;
    gt_graph_info info = {0};
    if (b->ops->end_capture(b, e->gs, &g, &info, &err)) fail_msg("%s", err.msg);
    assert_non_null(g);
    assert_int_equal(b->ops->live_graphs(b), 1);
    printf("    captured %d nodes, capture %.3f ms, instantiate %.3f ms\n", info.nodes,
           info.capture_ms, info.instantiate_ms);
    assert_true(info.nodes >= 4);
    g_read_act(e, replay, h, (size_t)M * N);
    size_t nz = 0;
    for (size_t i = 0; i < (size_t)M * N; i++)
        nz += replay[i] != 0.0f;
    assert_int_equal(nz, 0); /* capturing does not execute */
    if (b->ops->graph_launch(b, g, e->gs, &err)) fail_msg("%s", err.msg);
    g_read_act(e, replay, h, (size_t)M * N);
    assert_memory_equal(replay, eager, (size_t)M * N * 4);
    b->ops->graph_destroy(b, g);
    assert_int_equal(b->ops->live_graphs(b), 0);
#undef SEQ
    free(a), free(w), free(nw), free(eager), free(replay);
}

static void test_capture_that_synchronizes_is_rejected_cleanly(void **state) {
    gpu_env *e = *state;
    gt_error err = {0};
    gt_backend *b = e->gpu;
    size_t n = 1000;
    float *x = rand_vec(e, n, 1.0f), *got = malloc(n * 4), *want = malloc(n * 4);
    void *gx = g_act(e, x, n), *gy = g_act(e, NULL, n);
    assert_int_equal(b->ops->begin_capture(b, e->gs, GT_CAPTURE_THREAD_LOCAL, &err), GT_OK);
    b->ops->add(b, e->gs, gy, gx, gx, n);
    gt_error serr = {0};
    int src = b->ops->stream_sync(b, e->gs, &serr); /* illegal inside a capture */
    printf("    sync inside capture: %s\n", serr.msg);
    assert_int_not_equal(src, GT_OK);
    gt_graph *g = (gt_graph *)&err; /* must be reset to NULL */
    int rc = b->ops->end_capture(b, e->gs, &g, NULL, &err);
    printf("    end_capture: %s\n", err.msg);
    assert_int_equal(rc, GT_ERR_DEVICE);
    assert_null(g);
    assert_non_null(strstr(err.msg, "cudaError"));
    assert_int_equal(b->ops->live_graphs(b), 0);
    /* the backend still works */
    b->ops->add(b, e->gs, gy, gx, gx, n);
    g_read_act(e, got, gy, n);
    for (size_t i = 0; i < n; i++)
        want[i] = bf16_round(2.0f * x[i]);
    assert_memory_equal(got, want, n * 4);
    free(x), free(got), free(want);
}

static void test_global_capture_of_a_training_step_replays_bitwise_equal_to_eager(void **state) {
    gpu_env *e = *state;
    gt_error err = {0};
    gt_backend *b = e->gpu;
    enum { STEPS = 4 };
    float eager_loss[STEPS], eager_gn[STEPS], graph_loss[STEPS], graph_gn[STEPS];
    model md;
    memset(&md, 0, sizeof md);
    model_build(e, &md);
    model_plan(e, &md);
    /* eager: STEPS steps from the initial state */
    size_t np = md.nparam;
    float *master0 = malloc(np * 4), *final_eager = malloc(np * 4), *final_graph = malloc(np * 4);
    g_read_f32(e, master0, md.master, np);
    gt_step_state st0;
    read_state(e, &st0, md.st);
    for (int i = 0; i < STEPS; i++) {
        model_step(&md);
        read_losses(e, &md, &eager_loss[i], &eager_gn[i]);
    }
    g_read_f32(e, final_eager, md.master, np);
    /* reset everything the step reads, then capture the whole step in global mode */
    b->ops->memcpy_h2d(b, e->gs, md.master, master0, np * 4);
    b->ops->from_float(b, e->gs, md.params, md.master, np);
    b->ops->memset0(b, e->gs, md.m, np * 4);
    b->ops->memset0(b, e->gs, md.v, np * 4);
    b->ops->memcpy_h2d(b, e->gs, md.st, &st0, sizeof st0);
    g_sync(e);
    assert_int_equal(b->ops->begin_capture(b, e->gs, GT_CAPTURE_GLOBAL, &err), GT_OK);
    model_step(&md);
    gt_graph *g = NULL;
    gt_graph_info info = {0};
    if (b->ops->end_capture(b, e->gs, &g, &info, &err)) fail_msg("%s", err.msg);
    printf("    full step graph: %d nodes, capture %.3f ms, instantiate %.3f ms\n", info.nodes,
           info.capture_ms, info.instantiate_ms);
    assert_true(info.nodes >= 30);
    for (int i = 0; i < STEPS; i++) {
        if (b->ops->graph_launch(b, g, e->gs, &err)) fail_msg("%s", err.msg);
        read_losses(e, &md, &graph_loss[i], &graph_gn[i]);
        printf("    step %d: eager loss %.7f gnorm %.6f | graph loss %.7f gnorm %.6f\n", i,
               (double)eager_loss[i], (double)eager_gn[i], (double)graph_loss[i],
               (double)graph_gn[i]);
    }
    g_read_f32(e, final_graph, md.master, np);
    b->ops->graph_destroy(b, g);
    assert_int_equal(b->ops->live_graphs(b), 0);
    assert_memory_equal(eager_loss, graph_loss, sizeof eager_loss);
    assert_memory_equal(eager_gn, graph_gn, sizeof eager_gn);
    assert_memory_equal(final_eager, final_graph, np * 4);
    assert_true(eager_loss[STEPS - 1] < eager_loss[0]); /* it trains */
    free(master0), free(final_eager), free(final_graph);
}

/* The state a step reads, back to what it was when `master0` and `st0` were taken. */
static void model_reset(gpu_env *e, model *md, const float *master0, const gt_step_state *st0) {
    gt_backend *b = e->gpu;
    size_t np = md->nparam;
    b->ops->memcpy_h2d(b, e->gs, md->master, master0, np * 4);
    b->ops->from_float(b, e->gs, md->params, md->master, np);
    b->ops->memset0(b, e->gs, md->m, np * 4);
    b->ops->memset0(b, e->gs, md->v, np * 4);
    b->ops->memcpy_h2d(b, e->gs, md->st, st0, sizeof *st0);
    g_sync(e);
}

/* Every kernel waits for its predecessor in GT_PDL_ENTRY before touching memory, so letting
 * kernels launch early must change nothing: STEPS steps with programmatic launch off, on, and
 * on inside a replayed graph give the same losses, norms and master weights, bit for bit. A
 * kernel that read its input before the wait would race with the kernel writing it; the tiny
 * model's short kernels are where such a race shows. */
static void test_programmatic_launch_changes_no_bit(void **state) {
    gpu_env *e = *state;
    gt_error err = {0};
    gt_backend *b = e->gpu;
    enum { STEPS = 6, RUNS = 4 };
    float loss[RUNS][STEPS], gn[RUNS][STEPS];
    model md;
    memset(&md, 0, sizeof md);
    model_build(e, &md);
    model_plan(e, &md);
    size_t np = md.nparam;
    float *master0 = malloc(np * 4), *final[RUNS];
    g_read_f32(e, master0, md.master, np);
    gt_step_state st0;
    read_state(e, &st0, md.st);
    gt_cuda_impl *im = b->impl;
    int saved = im->pdl, saved_fill = im->graph_fill;
    for (int run = 0; run < RUNS; run++) {
        final[run] = malloc(np * 4);
        /* run 0: plain launches; 1: programmatic; 2: in a graph with its memset nodes; 3: in
         * a graph whose memset nodes became k_graph_fill kernel nodes */
        im->pdl = run > 0;
        im->graph_fill = run == 3;
        model_reset(e, &md, master0, &st0);
        gt_graph *g = NULL;
        if (run >= 2) {
            gt_graph_info info = {0};
            assert_int_equal(b->ops->begin_capture(b, e->gs, GT_CAPTURE_GLOBAL, &err), GT_OK);
            model_step(&md);
            if (b->ops->end_capture(b, e->gs, &g, &info, &err)) fail_msg("%s", err.msg);
            printf("    run %d: %d nodes, %d memset nodes replaced by kernels\n", run, info.nodes,
                   info.memsets_replaced);
            if (run == 2) assert_int_equal(info.memsets_replaced, 0);
            if (run == 3) assert_true(info.memsets_replaced > 0);
        }
        for (int i = 0; i < STEPS; i++) {
            if (g) {
                if (b->ops->graph_launch(b, g, e->gs, &err)) fail_msg("%s", err.msg);
            } else {
                model_step(&md);
            }
            read_losses(e, &md, &loss[run][i], &gn[run][i]);
        }
        g_read_f32(e, final[run], md.master, np);
        if (g) b->ops->graph_destroy(b, g);
    }
    im->pdl = saved;
    im->graph_fill = saved_fill;
    assert_int_equal(b->ops->live_graphs(b), 0);
    static const char *const what[RUNS] = {"", "programmatic launch",
                                           "programmatic launch in a graph",
                                           "programmatic launch in a graph of fill kernels"};
    for (int run = 1; run < RUNS; run++) {
        printf("    %s: step %d loss %.7f against %.7f with plain launches\n", what[run], STEPS,
               (double)loss[run][STEPS - 1], (double)loss[0][STEPS - 1]);
        assert_memory_equal(loss[0], loss[run], sizeof loss[0]);
        assert_memory_equal(gn[0], gn[run], sizeof gn[0]);
        assert_memory_equal(final[0], final[run], np * 4);
    }
    assert_true(loss[0][STEPS - 1] < loss[0][0]); /* it trains */
    free(master0);
    for (int run = 0; run < RUNS; run++)
        free(final[run]);
}

/* The memset-to-kernel pass on a chain of memset nodes of every element size, 1-D and 2-D,
 * aligned and not, overlapping so that their order shows: the graph with the pass must
 * leave the bytes that the same graph of memset nodes leaves, which the host model below
 * must match too. Each node's in-edge comes from the previous one, a kernel once replaced, so
 * the programmatic in-edges are exercised. */
typedef struct fill_case {
    size_t off, pitch, width, height;
    unsigned value, elem;
} fill_case;

static void host_fill(unsigned char *buf, const fill_case *c) {
    for (size_t y = 0; y < c->height; y++)
        for (size_t x = 0; x < c->width; x++)
            for (unsigned k = 0; k < c->elem; k++)
                buf[c->off + y * c->pitch + x * c->elem + k] =
                    (unsigned char)(c->value >> (8 * k)); /* little-endian */
}

static void run_fill_graph(cudaGraph_t g, void *dbuf, unsigned char *out, size_t bytes) {
    cudaGraphExec_t ex = NULL;
    assert_int_equal(cudaMemset(dbuf, 0x5A, bytes), cudaSuccess);
    assert_int_equal(cudaGraphInstantiate(&ex, g, 0), cudaSuccess);
    assert_int_equal(cudaGraphLaunch(ex, 0), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(out, dbuf, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaGraphExecDestroy(ex);
}

static void test_fill_kernels_write_what_the_memset_nodes_would(void **state) {
    (void)state;
    enum { BYTES = 1 << 20, NCASE = 7 };
    static const fill_case cases[NCASE] = {
        {3, 0, 1000, 1, 0xA5u, 1},           /* bytes, unaligned */
        {2, 0, 777, 1, 0x1234u, 2},          /* 16-bit, unaligned for 16-byte stores */
        {16, 0, 1025, 1, 0xDEADBEEFu, 4},    /* 32-bit: 16-byte stores and a tail */
        {4096, 512, 100, 9, 0x01020304u, 4}, /* 2-D, rows 16-byte aligned */
        {70, 300, 77, 5, 0xBEEFu, 2},        /* 2-D, rows not aligned */
        {0, 0, 600000, 1, 0u, 1},            /* large zeroing over the ones before */
        {100, 0, 50, 1, 0x3Cu, 1},           /* on top of the zeroing */
    };
    unsigned char *want = malloc(BYTES), *got = malloc(BYTES);
    memset(want, 0x5A, BYTES);
    void *dbuf = NULL;
    assert_int_equal(cudaMalloc(&dbuf, BYTES), cudaSuccess);
    cudaGraph_t g = NULL, plain = NULL;
    assert_int_equal(cudaGraphCreate(&g, 0), cudaSuccess);
    cudaGraphNode_t prev = NULL;
    for (int i = 0; i < NCASE; i++) {
        const fill_case *c = &cases[i];
        struct cudaMemsetParams mp;
        memset(&mp, 0, sizeof mp);
        mp.dst = (char *)dbuf + c->off;
        mp.pitch = c->pitch ? c->pitch : c->width * c->elem;
        mp.value = c->value;
        mp.elementSize = c->elem;
        mp.width = c->width;
        mp.height = c->height;
        cudaGraphNode_t n = NULL;
        assert_int_equal(cudaGraphAddMemsetNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0, &mp),
                         cudaSuccess);
        prev = n;
        fill_case h = *c;
        h.pitch = mp.pitch;
        host_fill(want, &h);
    }
    assert_int_equal(cudaGraphClone(&plain, g), cudaSuccess);
    run_fill_graph(plain, dbuf, got, BYTES); /* the memset nodes themselves */
    assert_memory_equal(got, want, BYTES);
    gt_error err = {0};
    int replaced = 0;
    if (gt_cuda_graph_memsets_to_kernels(g, 1, &replaced, &err)) fail_msg("%s", err.msg);
    printf("    %d memset nodes replaced by fill kernels (programmatic launch on)\n", replaced);
    assert_int_equal(replaced, NCASE);
    size_t n = 0;
    assert_int_equal(cudaGraphGetNodes(g, NULL, &n), cudaSuccess);
    assert_int_equal(n, NCASE);
    run_fill_graph(g, dbuf, got, BYTES);
    assert_memory_equal(got, want, BYTES);
    cudaGraphDestroy(plain);
    cudaGraphDestroy(g);
    cudaFree(dbuf);
    free(want);
    free(got);
}

static void test_unknown_pdl_setting_is_refused(void **state) {
    (void)state;
    gt_error err = {0};
    gt_backend *b = NULL;
    gt_cuda_config opts;
    memset(&opts, 0, sizeof opts);
    opts.pdl = (gt_cuda_pdl)7;
    int rc = gt_backend_create_cuda(&b, 0, &opts, &err);
    if (rc == GT_OK) {
        gt_backend_destroy(b);
        fail_msg("runtime.cuda.pdl=7 was accepted");
    }
    printf("    refused: %s\n", err.msg);
    assert_int_equal(rc, GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "runtime.cuda.pdl"));
    assert_non_null(strstr(err.msg, "auto, on or off"));
    memset(&opts, 0, sizeof opts);
    opts.graph_memset = (gt_cuda_graph_memset)7;
    rc = gt_backend_create_cuda(&b, 0, &opts, &err);
    if (rc == GT_OK) {
        gt_backend_destroy(b);
        fail_msg("runtime.cuda.graph_memset=7 was accepted");
    }
    printf("    refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "runtime.cuda.graph_memset"));
    assert_non_null(strstr(err.msg, "kernel or node"));
}

int main(void) {
#define T(f) cmocka_unit_test_teardown(f, gpu_free_bufs)
    const struct CMUnitTest tests[] = {
        T(test_capture_of_a_short_sequence_replays_equal_to_eager),
        T(test_capture_that_synchronizes_is_rejected_cleanly),
        T(test_global_capture_of_a_training_step_replays_bitwise_equal_to_eager),
        T(test_programmatic_launch_changes_no_bit),
        T(test_fill_kernels_write_what_the_memset_nodes_would),
        T(test_unknown_pdl_setting_is_refused),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
