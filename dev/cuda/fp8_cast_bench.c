/* The per-tensor fp8 casts of the CUDA backend (backend/cuda/k_fp8.cu) timed outside the
 * engine, to see how near memory bandwidth they run: for each shape the pair (q and q^T in one
 * pass), the transposed and the plain cast, under delayed scaling (the cast alone) and current
 * scaling (the amax pass and the cast), then blockwise (fp8_sc: 1 x 128 tiles and 128 x 128
 * blocks, backend/cuda/k_fp8_block.cu), as microseconds per cast and GB/s of bf16 read plus fp8
 * written (scales not counted). Usage: fp8_cast_bench [rows cols ...] (default 8192 2048 2048
 * 8192). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "config/cuda_keys.h"
#include "config/keys.h"

#define WARMUP_CASTS 5
#define TIMED_CASTS 50
#define MAX_SHAPES 8

typedef struct bench {
    gt_backend *b;
    gt_stream *s;
    void *x;          /* bf16 [rows, cols] */
    uint8_t *q, *qt;  /* fp8 [rows, cols] and [cols, rows] */
    float *scale_inv; /* two halves: q's scales, then qt's (blockwise: one per tile) */
    size_t scales;    /* floats in each half */
    gt_fp8_meta *meta;
    gt_step_state *st;
} bench;

enum { CAST_PAIR, CAST_TRANSPOSED, CAST_PLAIN };
static const char *const cast_names[] = {"pair", "transposed", "plain"};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void one_cast(bench *k, int kind, int rows, int cols, gt_fp8_cast_spec spec) {
    const gt_backend_ops *o = k->b->ops;
    if (kind == CAST_PAIR)
        o->fp8_cast_pair(k->b, k->s, k->q, k->scale_inv, k->qt, k->scale_inv + k->scales, k->x,
                         rows, cols, spec, k->meta, k->st);
    else
        o->fp8_cast(k->b, k->s, kind == CAST_TRANSPOSED ? k->qt : k->q, k->scale_inv, k->x, rows,
                    cols, kind == CAST_TRANSPOSED, spec, k->meta, k->st);
}

/* Seconds per cast, or a negative value with the error printed */
static double time_cast(bench *k, int kind, int rows, int cols, gt_fp8_cast_spec spec) {
    gt_error err = {0};
    k->b->planning = 1;
    one_cast(k, kind, rows, cols, spec);
    if (k->b->ops->plan_finish(k->b, &err) != GT_OK) {
        fprintf(stderr, "fp8_cast_bench: plan_finish: %s\n", err.msg);
        return -1.0;
    }
    for (int i = 0; i < WARMUP_CASTS; i++)
        one_cast(k, kind, rows, cols, spec);
    if (k->b->ops->stream_sync(k->b, k->s, &err) != GT_OK) {
        fprintf(stderr, "fp8_cast_bench: %s\n", err.msg);
        return -1.0;
    }
    double t0 = now_s();
    for (int i = 0; i < TIMED_CASTS; i++)
        one_cast(k, kind, rows, cols, spec);
    if (k->b->ops->stream_sync(k->b, k->s, &err) != GT_OK) {
        fprintf(stderr, "fp8_cast_bench: %s\n", err.msg);
        return -1.0;
    }
    return (now_s() - t0) / TIMED_CASTS;
}

static int alloc_buffers(bench *k, int rows, int cols) {
    gt_error err = {0};
    size_t n = (size_t)rows * cols;
    /* the most a blockwise cast writes: 1 x 128 tiles along the longer side */
    k->scales = gt_fp8_scale_count(rows, cols, 1);
    if (gt_fp8_scale_count(cols, rows, 1) > k->scales)
        k->scales = gt_fp8_scale_count(cols, rows, 1);
    void **bufs[] = {
        &k->x,          (void **)&k->q, (void **)&k->qt, (void **)&k->scale_inv, (void **)&k->meta,
        (void **)&k->st};
    size_t bytes[] = {
        n * k->b->act_bytes,  n, n, 2 * k->scales * sizeof(float), sizeof(gt_fp8_meta),
        sizeof(gt_step_state)};
    for (int i = 0; i < 6; i++)
        if (k->b->ops->alloc(k->b, bytes[i], bufs[i], &err) != GT_OK) {
            fprintf(stderr, "fp8_cast_bench: alloc of %zu bytes: %s\n", bytes[i], err.msg);
            return -1;
        }
    /* x uniform in [-4, 4): finite, non-zero amax, codes over the whole E4M3 range */
    float *h = malloc(n * sizeof *h);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        h[i] = (float)(rng >> 40) / (float)(1u << 24) * 8.0f - 4.0f;
    }
    float *hx = NULL;
    if (k->b->ops->alloc(k->b, n * sizeof(float), (void **)&hx, &err) != GT_OK) {
        fprintf(stderr, "fp8_cast_bench: %s\n", err.msg);
        free(h);
        return -1;
    }
    k->b->ops->memcpy_h2d(k->b, k->s, hx, h, n * sizeof(float));
    k->b->ops->from_float(k->b, k->s, k->x, hx, n);
    gt_fp8_meta m = {1.0f, 1.0f, 0.0f, (int32_t)GT_FP8_E4M3};
    k->b->ops->memcpy_h2d(k->b, k->s, k->meta, &m, sizeof m);
    gt_step_state st;
    memset(&st, 0, sizeof st);
    k->b->ops->memcpy_h2d(k->b, k->s, k->st, &st, sizeof st);
    int rc = k->b->ops->stream_sync(k->b, k->s, &err);
    k->b->ops->free(k->b, hx);
    free(h);
    if (rc != GT_OK) fprintf(stderr, "fp8_cast_bench: %s\n", err.msg);
    return rc == GT_OK ? 0 : -1;
}

static void free_buffers(bench *k) {
    void *bufs[] = {k->x, k->q, k->qt, k->scale_inv, k->meta, k->st};
    for (int i = 0; i < 6; i++)
        if (bufs[i]) k->b->ops->free(k->b, bufs[i]);
    k->x = NULL, k->q = k->qt = NULL, k->scale_inv = NULL, k->meta = NULL, k->st = NULL;
}

static int bench_shape(bench *k, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    if (alloc_buffers(k, rows, cols)) return -1;
    for (int kind = CAST_PAIR; kind <= CAST_PLAIN; kind++)
        for (int current = 0; current < 2; current++) {
            gt_fp8_cast_spec spec = {current ? GT_FP8_TENSORWISE : GT_FP8_DELAYED, GT_FP8_E4M3, 1,
                                     1, NULL};
            double t = time_cast(k, kind, rows, cols, spec);
            if (t < 0) return -1;
            /* bf16 read by the cast (and the amax pass), one fp8 byte per output element */
            double bytes = (double)n * (double)k->b->act_bytes * (current ? 2.0 : 1.0) +
                           (double)n * (kind == CAST_PAIR ? 2.0 : 1.0);
            printf("%6d x %-6d %-10s %-8s %8.1f us %7.0f GB/s\n", rows, cols, cast_names[kind],
                   current ? "current" : "delayed", 1e6 * t, bytes / t * 1e-9);
        }
    /* blockwise: 1 x 128 tiles (activations, gradients) and 128 x 128 blocks (weights) */
    for (int kind = CAST_PAIR; kind <= CAST_PLAIN; kind++)
        for (int tile = 1; tile <= GT_FP8_TILE; tile += GT_FP8_TILE - 1) {
            if (rows % GT_FP8_TILE || cols % GT_FP8_TILE) break;
            gt_fp8_cast_spec spec = {GT_FP8_BLOCKWISE, GT_FP8_E4M3, tile, 1, NULL};
            double t = time_cast(k, kind, rows, cols, spec);
            if (t < 0) return -1;
            double bytes =
                (double)n * (double)k->b->act_bytes + (double)n * (kind == CAST_PAIR ? 2.0 : 1.0);
            printf("%6d x %-6d %-10s %-8s %8.1f us %7.0f GB/s\n", rows, cols, cast_names[kind],
                   tile == 1 ? "1x128" : "128x128", 1e6 * t, bytes / t * 1e-9);
        }
    free_buffers(k);
    return 0;
}

int main(int argc, char **argv) {
    int shapes[MAX_SHAPES][2] = {{8192, 2048}, {2048, 8192}}, ns = 2;
    if (argc > 1) {
        if ((argc - 1) % 2 || (argc - 1) / 2 > MAX_SHAPES) {
            fprintf(stderr, "usage: fp8_cast_bench [rows cols ...] (at most %d shapes)\n",
                    MAX_SHAPES);
            return 2;
        }
        ns = (argc - 1) / 2;
        for (int i = 0; i < ns; i++) {
            shapes[i][0] = atoi(argv[1 + 2 * i]), shapes[i][1] = atoi(argv[2 + 2 * i]);
            if (shapes[i][0] <= 0 || shapes[i][1] <= 0) {
                fprintf(stderr, "fp8_cast_bench: shape %s x %s: rows and cols must be > 0\n",
                        argv[1 + 2 * i], argv[2 + 2 * i]);
                return 2;
            }
        }
    }
    gt_error err = {0};
    gt_config cfg;
    gt_cuda_config opts;
    gt_config_defaults(&cfg);
    gt_config_read_env(&cfg);
    bench k;
    memset(&k, 0, sizeof k);
    if (gt_config_cuda_settings(&cfg, &opts, &err) != GT_OK ||
        gt_backend_create_cuda(&k.b, 0, &opts, &err) != GT_OK ||
        k.b->ops->stream_create(k.b, &k.s, &err) != GT_OK) {
        fprintf(stderr, "fp8_cast_bench: cuda backend: %s\n", err.msg);
        if (k.b) gt_backend_destroy(k.b);
        return 1;
    }
    printf("%-15s %-10s %-8s %11s %12s\n", "rows x cols", "cast", "scaling", "time", "bandwidth");
    int rc = 0;
    for (int i = 0; i < ns && !rc; i++)
        rc = bench_shape(&k, shapes[i][0], shapes[i][1]);
    if (rc) free_buffers(&k);
    k.b->ops->stream_destroy(k.b, k.s);
    gt_backend_destroy(k.b);
    return rc ? 1 : 0;
}
