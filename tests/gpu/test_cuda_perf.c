/* GPU speed checks of the CUDA backend's heavy ops at the workloads' shapes (WORKLOADS.md):
 * median of 20 timed runs after warmup, with CUDA events on the op stream. Each check has a
 * floor far below the target, so a pathological regression fails; the printed figures are
 * what matters. */
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "gpu_fixture.h"

#define REPS 20

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef void (*op_fn)(gpu_env *e, void *ctx);

/* Median milliseconds of fn over REPS runs after 3 warmups. */
static float time_ms(gpu_env *e, op_fn fn, void *ctx) {
    cudaStream_t cs = gt_cuda_stream(e->gs);
    cudaEvent_t ev[REPS + 1];
    for (int i = 0; i <= REPS; i++)
        cudaEventCreate(&ev[i]);
    for (int i = 0; i < 3; i++)
        fn(e, ctx);
    cudaEventRecord(ev[0], cs);
    for (int i = 0; i < REPS; i++) {
        fn(e, ctx);
        cudaEventRecord(ev[i + 1], cs);
    }
    g_sync(e);
    float t[REPS];
    for (int i = 0; i < REPS; i++)
        cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]);
    for (int i = 0; i <= REPS; i++)
        cudaEventDestroy(ev[i]);
    qsort(t, REPS, sizeof t[0], cmp_float);
    return t[REPS / 2];
}

typedef struct mm_ctx {
    void *a, *w, *out;
    float *dw;
    int M, N, K;
} mm_ctx;

static void run_mm(gpu_env *e, void *p) {
    mm_ctx *c = p;
    e->gpu->ops->matmul_fwd(e->gpu, e->gs, c->out, c->a, c->w, NULL, NULL, c->M, c->N, c->K);
}
static void run_mm_bwd(gpu_env *e, void *p) {
    mm_ctx *c = p;
    e->gpu->ops->matmul_bwd_data(e->gpu, e->gs, c->a, c->out, c->w, c->M, c->N, c->K, 0);
    e->gpu->ops->matmul_bwd_weight(e->gpu, e->gs, c->dw, NULL, c->out, c->a, c->M, c->N, c->K, 1);
}

static void test_matmul_reaches_a_large_fraction_of_peak(void **state) {
    gpu_env *e = *state;
    mm_ctx c = {0};
    c.M = 8192, c.N = 5632 * 2, c.K = 2048; /* llama1b MLP up-projection */
    c.a = g_alloc(e, (size_t)c.M * c.K * 2);
    c.w = g_alloc(e, (size_t)c.N * c.K * 2);
    c.out = g_alloc(e, (size_t)c.M * c.N * 2);
    c.dw = g_alloc(e, (size_t)c.N * c.K * 4);
    GPU_PLAN(e, (run_mm(e, &c), run_mm_bwd(e, &c)));
    float ms = time_ms(e, run_mm, &c), msb = time_ms(e, run_mm_bwd, &c);
    double fl = 2.0 * c.M * c.N * c.K;
    printf("    matmul %dx%dx%d: fwd %.3f ms (%.0f TFLOP/s), bwd data+weight %.3f ms (%.0f "
           "TFLOP/s)\n",
           c.M, c.N, c.K, (double)ms, fl / ms * 1e-9, (double)msb, 2 * fl / msb * 1e-9);
    assert_true(fl / ms * 1e-9 > 200.0);
}

typedef struct att_ctx {
    void *qkv, *out, *dout, *dqkv;
    float *lse;
    gt_step_state *st;
    int B, T, H, KV, hd;
} att_ctx;

static void run_att_fwd(gpu_env *e, void *p) {
    att_ctx *c = p;
    gt_rng_site site = {1, 1, 0};
    e->gpu->ops->attention_fwd(e->gpu, e->gs, c->out, c->lse, c->qkv, c->B, c->T, c->H, c->KV,
                               c->hd, 0.0f, site, c->st);
}
static void run_att_bwd(gpu_env *e, void *p) {
    att_ctx *c = p;
    gt_rng_site site = {1, 1, 0};
    e->gpu->ops->attention_bwd(e->gpu, e->gs, c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T,
                               c->H, c->KV, c->hd, 0.0f, site, c->st);
}

static void att_case(gpu_env *e, const char *name, int B, int T, int H, int KV, int hd,
                     float cudnn_ms) {
    att_ctx c = {0};
    c.B = B, c.T = T, c.H = H, c.KV = KV, c.hd = hd;
    size_t nq = (size_t)B * T * (H + 2 * KV) * hd, no = (size_t)B * T * H * hd;
    float *h = rand_vec(e, nq, 1.0f);
    c.qkv = g_act(e, h, nq);
    c.dout = g_act(e, h, no);
    c.out = g_alloc(e, no * 2);
    c.dqkv = g_alloc(e, nq * 2);
    c.lse = g_alloc(e, (size_t)B * H * T * 4);
    gt_step_state init = default_state();
    c.st = g_alloc(e, sizeof init);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, c.st, &init, sizeof init);
    GPU_PLAN(e, (run_att_fwd(e, &c), run_att_bwd(e, &c)));
    float f = time_ms(e, run_att_fwd, &c), bw = time_ms(e, run_att_bwd, &c);
    double fl = 4.0 * B * H * (double)T * T * hd / 2; /* causal forward */
    printf("    attention %-8s B%d T%d H%d KV%d hd%d: fwd %.3f ms (%.0f TFLOP/s), bwd %.3f ms, "
           "fwd+bwd %.3f ms (cuDNN measured %.3f)\n",
           name, B, T, H, KV, hd, (double)f, fl / f * 1e-9, (double)bw, (double)(f + bw),
           (double)cudnn_ms);
    assert_true(f + bw < 100.0f * cudnn_ms);
    free(h);
}

static void test_attention_speed_at_workload_shapes(void **state) {
    gpu_env *e = *state;
    att_case(e, "tiny", 4, 256, 8, 8, 64, 0.030f);
    att_case(e, "gpt124m", 8, 1024, 12, 12, 64, 0.225f);
    att_case(e, "llama1b", 4, 2048, 16, 8, 128, 0.647f);
    att_case(e, "moe", 4, 1024, 16, 4, 64, 0.175f);
}

typedef struct ew_ctx {
    void *x, *y, *params;
    float *rstd, *dw, *master, *grads, *m, *v, *dwte;
    int32_t *tok;
    gt_step_state *st;
    int N, d, V;
    size_t n;
} ew_ctx;

static void run_rms(gpu_env *e, void *p) {
    ew_ctx *c = p;
    e->gpu->ops->rmsnorm_fwd(e->gpu, e->gs, c->y, c->rstd, c->x, c->x, c->N, c->d, 1e-5f);
    e->gpu->ops->rmsnorm_bwd(e->gpu, e->gs, c->y, c->dw, c->x, c->x, c->x, c->rstd, c->N, c->d, 1);
}
static void run_emb(gpu_env *e, void *p) {
    ew_ctx *c = p;
    e->gpu->ops->embedding_bwd(e->gpu, e->gs, c->dwte, NULL, c->x, c->tok, c->N, c->V, c->d, 0);
}
static void run_ce(gpu_env *e, void *p) {
    ew_ctx *c = p;
    e->gpu->ops->cross_entropy(e->gpu, e->gs, c->rstd, c->y, c->y, c->tok, c->N, c->V, 1e-4f);
}
static void run_opt(gpu_env *e, void *p) {
    ew_ctx *c = p;
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    e->gpu->ops->grad_norm(e->gpu, e->gs, c->st, c->grads, c->n, GT_NO_GRAD_ROWS, 1, 1, 1.0f);
    e->gpu->ops->adamw(e->gpu, e->gs, c->params, c->master, c->grads, GT_NO_GRAD_ROWS, c->m, c->v,
                       c->n, c->n, hp, c->st);
}

static void test_memory_bound_ops_speed(void **state) {
    gpu_env *e = *state;
    ew_ctx c = {0};
    c.N = 8192, c.d = 768, c.V = 50304, c.n = 124000000;
    c.x = g_alloc(e, (size_t)c.N * c.d * 2);
    c.y = g_alloc(e, (size_t)c.N * c.V * 2);
    c.rstd = g_alloc(e, (size_t)c.N * 4);
    c.dw = g_alloc(e, (size_t)c.d * 4);
    c.dwte = g_alloc(e, (size_t)c.V * c.d * 4);
    int32_t *tok = malloc((size_t)c.N * 4);
    for (int i = 0; i < c.N; i++)
        tok[i] = (int32_t)(env_next(e) % (uint64_t)c.V);
    c.tok = g_i32(e, tok, c.N);
    free(tok);
    c.params = g_alloc(e, c.n * 2);
    c.master = g_alloc(e, c.n * 4), c.grads = g_alloc(e, c.n * 4);
    c.m = g_alloc(e, c.n * 4), c.v = g_alloc(e, c.n * 4);
    gt_step_state init = default_state();
    c.st = g_alloc(e, sizeof init);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, c.st, &init, sizeof init);
    GPU_PLAN(e, (run_rms(e, &c), run_emb(e, &c), run_opt(e, &c)));
    float rms = time_ms(e, run_rms, &c), emb = time_ms(e, run_emb, &c);
    float ce = time_ms(e, run_ce, &c), opt = time_ms(e, run_opt, &c);
    printf("    rmsnorm fwd+bwd N%d d%d: %.3f ms\n", c.N, c.d, (double)rms);
    printf("    embedding_bwd N%d V%d d%d: %.3f ms\n", c.N, c.V, c.d, (double)emb);
    printf("    cross_entropy N%d V%d: %.3f ms (%.0f GB/s)\n", c.N, c.V, (double)ce,
           4.0 * c.N * c.V / ce * 1e-6);
    printf("    grad_norm + adamw n=%zu: %.3f ms (%.0f GB/s at 22 B/param)\n", c.n, (double)opt,
           22.0 * c.n / opt * 1e-6);
    assert_true(opt < 20.0f && ce < 20.0f && emb < 20.0f && rms < 20.0f);
}

typedef struct gmm_ctx {
    void *a, *w, *out, *dout, *da;
    float *dw;
    int32_t *offsets;
    int R, E, Nf, K;
} gmm_ctx;

static void run_gmm_fwd(gpu_env *e, void *p) {
    gmm_ctx *c = p;
    e->gpu->ops->moe_matmul_fwd(e->gpu, e->gs, c->out, c->a, c->w, c->offsets, c->R, c->E, c->Nf,
                                c->K);
}
static void run_gmm_bwd(gpu_env *e, void *p) {
    gmm_ctx *c = p;
    e->gpu->ops->moe_matmul_bwd_data(e->gpu, e->gs, c->da, c->dout, c->w, c->offsets, c->R, c->E,
                                     c->Nf, c->K);
    e->gpu->ops->moe_matmul_bwd_weight(e->gpu, e->gs, c->dw, c->dout, c->a, c->offsets, c->R, c->E,
                                       c->Nf, c->K, 1);
}

static void test_grouped_matmul_speed_at_the_moe_shape(void **state) {
    gpu_env *e = *state;
    gmm_ctx c = {0};
    c.R = 4096 * 8, c.E = 64, c.Nf = 2 * 384, c.K = 1024; /* moe workload, gate+up */
    int32_t off[65];
    for (int i = 0; i <= c.E; i++)
        off[i] = (int32_t)((int64_t)c.R * i / c.E);
    off[3] = off[2]; /* an empty expert and a double one */
    c.offsets = g_i32(e, off, c.E + 1);
    c.a = g_alloc(e, (size_t)c.R * c.K * 2), c.da = g_alloc(e, (size_t)c.R * c.K * 2);
    c.out = g_alloc(e, (size_t)c.R * c.Nf * 2), c.dout = g_alloc(e, (size_t)c.R * c.Nf * 2);
    c.w = g_alloc(e, (size_t)c.E * c.Nf * c.K * 2);
    c.dw = g_alloc(e, (size_t)c.E * c.Nf * c.K * 4);
    float f = time_ms(e, run_gmm_fwd, &c), bw = time_ms(e, run_gmm_bwd, &c);
    double fl = 2.0 * c.R * c.Nf * c.K;
    printf("    grouped matmul R%d E%d Nf%d K%d: fwd %.3f ms (%.0f TFLOP/s), bwd data+weight "
           "%.3f ms (%.0f TFLOP/s)\n",
           c.R, c.E, c.Nf, c.K, (double)f, fl / f * 1e-9, (double)bw, 2 * fl / bw * 1e-9);
    assert_true(fl / f * 1e-9 > 5.0);
}

int main(void) {
#define T(f) cmocka_unit_test_teardown(f, gpu_free_bufs)
    const struct CMUnitTest tests[] = {
        T(test_matmul_reaches_a_large_fraction_of_peak),
        T(test_attention_speed_at_workload_shapes),
        T(test_memory_bound_ops_speed),
        T(test_grouped_matmul_speed_at_the_moe_shape),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
