/* Times the CUDA backend's Mamba conv1d and gated-RMSNorm ops (k_mamba_conv.cu, k_mamba.cu) alone,
 * eager, on one layer's shape, and prints each op's time per call and the bandwidth of the bytes it
 * must move (every input read once, every output written once), against which the kernels
 * are judged. Usage: mamba_ew_bench [B T H P G S K [reps]] (default: the hybrid workload's
 * layer, 4 2048 32 64 1 128 4, 50 reps). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/backend.h"
#include "config/cuda_keys.h"
#include "config/keys.h"

#define DEFAULT_REPS 50
#define BENCH_EPS 1e-5f

typedef struct bench {
    gt_backend *b;
    gt_stream *s;
    gt_error err;
    uint64_t rng;
} bench;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(bench *e, const char *what) {
    fprintf(stderr, "mamba_ew_bench: %s: %s\n", what, e->err.msg[0] ? e->err.msg : "failed");
    exit(1);
}

static void bench_sync(bench *e, const char *what) {
    if (e->b->ops->stream_sync(e->b, e->s, &e->err) != GT_OK ||
        gt_backend_check(e->b, &e->err) != GT_OK)
        die(e, what);
}

/* a device buffer of n values uniform in [-1, 1], fp32 or act dtype */
static void *dev_rand(bench *e, size_t n, int act) {
    float *h = malloc(n * sizeof *h), *f = NULL;
    void *d = NULL;
    if (!h) die(e, "host memory");
    for (size_t i = 0; i < n; i++) {
        e->rng = e->rng * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((e->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
    if (e->b->ops->alloc(e->b, n * sizeof(float), (void **)&f, &e->err)) die(e, "alloc");
    e->b->ops->memcpy_h2d(e->b, e->s, f, h, n * sizeof(float));
    if (act) {
        if (e->b->ops->alloc(e->b, n * e->b->act_bytes, &d, &e->err)) die(e, "alloc");
        e->b->ops->from_float(e->b, e->s, d, f, n);
    }
    bench_sync(e, "upload");
    free(h);
    if (!act) return f;
    e->b->ops->free(e->b, f);
    return d;
}

static void report(const char *op, double s_per_call, double bytes) {
    printf("%-28s %9.1f us  %7.0f GB/s of %6.1f MB\n", op, 1e6 * s_per_call,
           bytes / s_per_call / 1e9, bytes / 1e6);
}

int main(int argc, char **argv) {
    gt_mamba_shape sh = {.B = 4, .T = 2048, .H = 32, .P = 64, .G = 8, .S = 128, .K = 4};
    int reps = DEFAULT_REPS;
    if (argc >= 8) {
        sh.B = atoi(argv[1]), sh.T = atoi(argv[2]), sh.H = atoi(argv[3]), sh.P = atoi(argv[4]);
        sh.G = atoi(argv[5]), sh.S = atoi(argv[6]), sh.K = atoi(argv[7]);
        if (argc >= 9) reps = atoi(argv[8]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: mamba_ew_bench [B T H P G S K [reps]]\n");
        return 2;
    }
    sh.chunk = sh.T;
    if (reps < 1) reps = 1;
    bench e = {.rng = 0x9E3779B97F4A7C15ull};
    gt_config cfg;
    gt_cuda_config opts;
    gt_config_defaults(&cfg);
    gt_config_read_env(&cfg);
    if (gt_config_cuda_settings(&cfg, &opts, &e.err) != GT_OK ||
        gt_backend_create_cuda(&e.b, 0, &opts, &e.err) != GT_OK ||
        e.b->ops->stream_create(e.b, &e.s, &e.err) != GT_OK)
        die(&e, "cuda backend");
    size_t N = (size_t)sh.B * sh.T, in = (size_t)gt_mamba_in(sh), C = (size_t)gt_mamba_conv(sh);
    size_t di = (size_t)gt_mamba_inner(sh), K = (size_t)sh.K, a = e.b->act_bytes;
    void *zx = dev_rand(&e, N * in, 1), *cw = dev_rand(&e, C * K, 1), *cb = dev_rand(&e, C, 1);
    void *xbc = dev_rand(&e, N * C, 1), *dxbc = dev_rand(&e, N * C, 1);
    void *dz = dev_rand(&e, N * in, 1), *y = dev_rand(&e, N * di, 1);
    void *out = dev_rand(&e, N * di, 1), *dout = dev_rand(&e, N * di, 1);
    void *dy = dev_rand(&e, N * di, 1), *gw = dev_rand(&e, di, 1);
    float *dcw = dev_rand(&e, C * K, 0), *dcb = dev_rand(&e, C, 0);
    float *rstd = dev_rand(&e, N * sh.G, 0), *dgw = dev_rand(&e, di, 0);
    float *ws = dev_rand(&e, gt_mamba_ws_floats(sh), 0);
    const gt_backend_ops *o = e.b->ops;
    printf("B=%d T=%d H=%d P=%d G=%d S=%d K=%d: %zu tokens, %zu conv channels, d_inner %zu, "
           "%d reps\n",
           sh.B, sh.T, sh.H, sh.P, sh.G, sh.S, sh.K, N, C, di, reps);
    for (int op = 0; op < 4; op++) {
        double t0 = 0;
        for (int r = -1; r < reps; r++) { /* r = -1: the warm-up call */
            if (r == 0) {
                bench_sync(&e, "warm-up");
                t0 = now_s();
            }
            if (op == 0) o->mamba_conv_fwd(e.b, e.s, xbc, zx, cw, cb, sh);
            if (op == 1) o->mamba_conv_bwd(e.b, e.s, dz, dcw, dcb, dxbc, zx, cw, cb, sh, 1);
            if (op == 2) o->mamba_gated_norm_fwd(e.b, e.s, out, rstd, y, zx, gw, BENCH_EPS, sh);
            if (op == 3)
                o->mamba_gated_norm_bwd(e.b, e.s, dy, dz, dgw, dout, y, zx, gw, rstd, ws, sh, 1);
        }
        bench_sync(&e, "timed calls");
        double per = (now_s() - t0) / reps;
        if (op == 0) report("mamba_conv_fwd", per, 2.0 * N * C * a);
        if (op == 1) report("mamba_conv_bwd", per, 3.0 * N * C * a);
        if (op == 2) report("mamba_gated_norm_fwd", per, 3.0 * N * di * a);
        if (op == 3) /* y, z, dout read and dy, dz written once: the least it can move */
            report("mamba_gated_norm_bwd", per, 5.0 * N * di * a);
    }
    gt_backend_destroy(e.b);
    return 0;
}
