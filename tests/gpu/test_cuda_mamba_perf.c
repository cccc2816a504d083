/* GPU speed of the chunked SSD scan (k_mamba_ssd.cu) at the hybrid workload's Mamba shapes
 * (recipes/hybrid.yaml: micro-batch 4, seq 2048, 32 heads of 64, 8 groups, state 128): median
 * of 20 timed runs after warmup, forward, backward and both, at chunk lengths 64, 128 and 256.
 * bench/mamba_ssm_ssd_timing.py prints mamba_ssm's Triton figure for the same shapes. The
 * floor is far below the target, so only a pathological regression fails. */
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "gpu_fixture.h"

#define REPS 20
#define WARMUP 3
/* the sequential scan this replaced took tens of ms per layer at these shapes */
#define FLOOR_FWD_BWD_MS 40.0f

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct ssd_ctx {
    gt_mamba_shape sh;
    void *xbc, *zx, *dt_bias, *A_log, *D, *y, *dy, *dxbc, *dz;
    float *ws, *st, *gb, *ga, *gd; /* st: the state the forward keeps for the backward */
} ssd_ctx;

static void run_fwd(gpu_env *e, const ssd_ctx *c) {
    e->gpu->ops->mamba_ssd_fwd(e->gpu, e->gs, c->y, c->xbc, c->zx, c->dt_bias, c->A_log, c->D,
                               c->ws, c->st, c->sh);
}
static void run_bwd(gpu_env *e, const ssd_ctx *c) {
    e->gpu->ops->mamba_ssd_bwd(e->gpu, e->gs, c->dxbc, c->dz, c->gb, c->ga, c->gd, c->dy, c->xbc,
                               c->zx, c->dt_bias, c->A_log, c->D, c->ws, c->st, c->sh, 0);
}

/* Median milliseconds of the forward (what 1), backward (2) or both (3). */
static float time_ms(gpu_env *e, const ssd_ctx *c, int what) {
    cudaStream_t cs = gt_cuda_stream(e->gs);
    cudaEvent_t ev[REPS + 1];
    for (int i = 0; i <= REPS; i++)
        cudaEventCreate(&ev[i]);
    for (int i = 0; i < WARMUP + REPS; i++) {
        if (i == WARMUP) cudaEventRecord(ev[0], cs);
        if (what & 1) run_fwd(e, c);
        if (what & 2) run_bwd(e, c);
        if (i >= WARMUP) cudaEventRecord(ev[i - WARMUP + 1], cs);
    }
    g_sync(e);
    gt_error err = {0};
    if (gt_backend_check(e->gpu, &err) != GT_OK) fail_msg("%s", err.msg);
    float t[REPS];
    for (int i = 0; i < REPS; i++)
        cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]);
    for (int i = 0; i <= REPS; i++)
        cudaEventDestroy(ev[i]);
    qsort(t, REPS, sizeof t[0], cmp_float);
    return t[REPS / 2];
}

/* Inputs in the ranges a trained layer sees: unit activations, MambaMixer's initial A and dt. */
static ssd_ctx make_ctx(gpu_env *e, gt_mamba_shape sh) {
    ssd_ctx c = {.sh = sh};
    size_t N = (size_t)sh.B * sh.T, H = (size_t)sh.H, C = (size_t)gt_mamba_conv(sh);
    size_t in = (size_t)gt_mamba_in(sh), di = (size_t)gt_mamba_inner(sh);
    float *hA = malloc(H * sizeof *hA), *hb = malloc(H * sizeof *hb);
    for (size_t h = 0; h < H; h++) {
        hA[h] = logf(1.0f + 15.0f * (float)h / (float)H); /* A in [1, 16) */
        hb[h] = -3.0f;                                    /* dt about 0.05 */
    }
    float *hx = rand_vec(e, N * C, 1.0f), *hz = rand_vec(e, N * in, 1.0f);
    float *hdy = rand_vec(e, N * di, 1.0f), *hD = rand_vec(e, H, 1.0f);
    c.xbc = g_act(e, hx, N * C), c.zx = g_act(e, hz, N * in), c.dy = g_act(e, hdy, N * di);
    c.A_log = g_act(e, hA, H), c.dt_bias = g_act(e, hb, H), c.D = g_act(e, hD, H);
    c.y = g_act(e, NULL, N * di), c.dxbc = g_act(e, NULL, N * C), c.dz = g_act(e, hz, N * in);
    c.ws = g_f32(e, NULL, gt_mamba_ws_floats(sh));
    c.st = g_f32(e, NULL, gt_mamba_ssd_state_floats(sh, GT_BACKEND_CUDA));
    c.gb = g_f32(e, NULL, H), c.ga = g_f32(e, NULL, H), c.gd = g_f32(e, NULL, H);
    free(hA), free(hb), free(hx), free(hz), free(hdy), free(hD);
    return c;
}

static void test_ssd_speed_at_the_hybrid_shapes(void **state) {
    gpu_env *e = *state;
    const int chunks[] = {64, 128, 256};
    float at128 = 0.0f;
    for (int i = 0; i < 3; i++) {
        gt_mamba_shape sh = {
            .B = 4, .T = 2048, .H = 32, .P = 64, .G = 8, .S = 128, .K = 4, .chunk = chunks[i]};
        ssd_ctx c = make_ctx(e, sh);
        /* the forward's timing leaves the state the backward's reads */
        float f = time_ms(e, &c, 1), b = time_ms(e, &c, 2), fb = time_ms(e, &c, 3);
        printf("    mamba ssd B%d T%d H%d P%d G%d S%d chunk %d: fwd %.3f ms, bwd %.3f ms, "
               "fwd+bwd %.3f ms\n",
               sh.B, sh.T, sh.H, sh.P, sh.G, sh.S, sh.chunk, (double)f, (double)b, (double)fb);
        if (chunks[i] == 128) at128 = fb;
        env_free_all(e);
    }
    assert_true(at128 < FLOOR_FWD_BWD_MS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_ssd_speed_at_the_hybrid_shapes, gpu_free_bufs),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
