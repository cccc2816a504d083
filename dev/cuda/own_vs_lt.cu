/* Dense GEMMs of a workload's shapes: cuBLASLt's first heuristic answer against the backend's
 * warpgroup-MMA kernels (k_moe_wgmma.cu) run as one group. Each is timed as a chain of
 * CHAIN pairs (a small elementwise kernel, then the GEMM) captured in one CUDA graph, the way
 * a training step runs them, so the programmatic launch of graphtrain's own kernels counts.
 * Prints us per pair and the largest difference between the two results; forward GEMMs also
 * run the 128 x 256 prototype of dense_wgmma.cuh: one block a tile, persistent, and in
 * clusters of two. `--once M N K` launches each forward kernel once outside a graph, for ncu.
 * A developer tool for the GPU scripts; not part of the engine.
 * Usage: own_vs_lt TOKENS D QKV FFN VOCAB | own_vs_lt --once M N K */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/k_moe_wgmma.cu"
#include "backend/cuda/wgmma_maps.cu"
#include "dev/cuda/dense_wgmma.cuh"
#include "dev/cuda/dev_random.cuh"
#include "dev/cuda/lt_problem.h"

#define CHAIN 40
#define WS ((size_t)32 << 20)

enum { FWD = LT_FWD, DATA = LT_BWD_DATA, WGRAD = LT_BWD_WEIGHT };
static const char *const names[] = {"fwd", "bwd_data", "bwd_weight"};

__global__ void k_touch(bf16 *x, int n) {
    GT_PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __float2bfloat16(__bfloat162float(x[i]) * 1.0f);
}

struct lt_plan {
    lt_problem p;
    cublasLtMatmulHeuristicResult_t res;
};

static int lt_build(cublasLtHandle_t lt, lt_plan *p, int kind, int M, int N, int K) {
    return lt_problem_build(lt, &p->p, kind, M, N, K, WS, &p->res, 1) > 0;
}

static float chain_us(cudaStream_t s, bf16 *touch, int touch_n, void (*gemm)(void *), void *ctx) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < CHAIN; i++) {
        gt_launch(k_touch, dim3((touch_n + 255) / 256), dim3(256), 0, gt_cuda_exec{s, dev_pdl},
                  touch, touch_n);
        gemm(ctx);
    }
    cudaStreamEndCapture(s, &g);
    if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) return -1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int w = 0; w < 3; w++)
        cudaGraphLaunch(ge, s);
    float best = 1e30f;
    for (int r = 0; r < 10; r++) {
        cudaEventRecord(e0, s);
        cudaGraphLaunch(ge, s);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best) best = ms;
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best * 1e3f / CHAIN;
}

struct job {
    cudaStream_t s;
    cublasLtHandle_t lt;
    lt_plan *p;
    int kind, M, N, K;
    void *A, *B, *C, *C2, *ws;
    int32_t *off;
};

static void run_lt(void *v) {
    job *j = (job *)v;
    float alpha = 1, beta = j->kind == WGRAD ? 1.0f : 0.0f;
    /* cuda_matmul.c's operand order: (w, a) fwd, (w, dout) data, (a, dout) weight: (B, A) */
    const lt_problem *q = &j->p->p;
    cublasLtMatmul(j->lt, q->desc, &alpha, j->B, q->la, j->A, q->lb, &beta, j->C, q->lc, j->C,
                   q->lc, &j->p->res.algo, j->ws, WS, j->s);
}

static void run_own(void *v) {
    job *j = (job *)v;
    int ok;
    if (j->kind == FWD) /* out[M,N] = A[M,K] W[N,K]^T */
        ok =
            gt_cuda_grouped_mm_wgmma(gt_cuda_exec{j->s, dev_pdl}, (bf16 *)j->C2, (const bf16 *)j->A,
                                     (const bf16 *)j->B, j->off, j->M, 1, j->N, j->K, 1);
    else if (j->kind == DATA) /* da[M,K] = dout[M,N] W[N,K] */
        ok =
            gt_cuda_grouped_mm_wgmma(gt_cuda_exec{j->s, dev_pdl}, (bf16 *)j->C2, (const bf16 *)j->A,
                                     (const bf16 *)j->B, j->off, j->M, 1, j->K, j->N, 0);
    else /* dw[N,K] += dout[M,N]^T a[M,K] */
        ok = gt_cuda_grouped_mm_dw_wgmma(gt_cuda_exec{j->s, dev_pdl}, (float *)j->C2,
                                         (const bf16 *)j->A, (const bf16 *)j->B, j->off, j->M, 1,
                                         j->N, j->K, 1);
    if (!ok) fprintf(stderr, "own kernel refused the shape\n");
}

static void run_dense(void *v, int persist) {
    job *j = (job *)v;
    if (!dense_wgmma(j->s, (bf16 *)j->C2, (const bf16 *)j->A, (const bf16 *)j->B, j->M, j->N, j->K,
                     persist))
        fprintf(stderr, "dense prototype refused the shape\n");
}
static void run_dense_tiles(void *v) {
    run_dense(v, 0);
}
static void run_dense_persist(void *v) {
    run_dense(v, 1);
}
static void run_dense_pingpong(void *v) {
    job *j = (job *)v;
    if (!dense_wgmma_pp(j->s, (bf16 *)j->C2, (const bf16 *)j->A, (const bf16 *)j->B, j->M, j->N,
                        j->K))
        fprintf(stderr, "dense ping-pong prototype refused the shape\n");
}
static void run_dense_cluster(void *v) {
    job *j = (job *)v;
    if (!dense_wgmma_mc(j->s, (bf16 *)j->C2, (const bf16 *)j->A, (const bf16 *)j->B, j->M, j->N,
                        j->K))
        fprintf(stderr, "dense cluster prototype refused the shape\n");
}

static double max_diff(const void *a, const void *b, size_t n, int fp32) {
    size_t bytes = n * (fp32 ? 4 : 2);
    void *ha = malloc(bytes), *hb = malloc(bytes);
    cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost);
    double m = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fp32 ? ((float *)ha)[i] : __bfloat162float(((bf16 *)ha)[i]);
        double y = fp32 ? ((float *)hb)[i] : __bfloat162float(((bf16 *)hb)[i]);
        if (fabs(x - y) > m) m = fabs(x - y);
        if (fabs(x) > ref) ref = fabs(x);
    }
    free(ha), free(hb);
    return ref > 0 ? m / ref : m;
}

/* --once M N K: each forward kernel (cuBLASLt, the MoE kernel, the prototype both ways) once,
 * outside any graph, twice over: for a profiler such as ncu, which then sees each launch. */
static int run_once(int M, int N, int K, cublasLtHandle_t lt, void *ws, cudaStream_t s,
                    int32_t *off) {
    lt_plan p;
    if (!lt_build(lt, &p, FWD, M, N, K)) return 1;
    job j = {s,
             lt,
             &p,
             FWD,
             M,
             N,
             K,
             dev_random((size_t)M * K, 0, 1),
             dev_random((size_t)N * K, 0, 2),
             NULL,
             NULL,
             ws,
             off};
    j.C = dev_random((size_t)M * N, 0, 3);
    j.C2 = dev_random((size_t)M * N, 0, 3);
    for (int r = 0; r < 2; r++) {
        run_lt(&j);
        run_own(&j);
        run_dense_tiles(&j);
        run_dense_persist(&j);
        run_dense_cluster(&j);
        run_dense_pingpong(&j);
    }
    cudaError_t e = cudaStreamSynchronize(s);
    printf("--once M=%d N=%d K=%d: %s\n", M, N, K, cudaGetErrorString(e));
    return e != cudaSuccess;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--once")) {
        cublasLtHandle_t lt;
        void *ws = NULL;
        cudaStream_t s;
        int32_t hoff[2] = {0, atoi(argv[2])}, *off;
        if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS || cudaMalloc(&ws, WS) != cudaSuccess ||
            gt_cuda_grouped_mm_wgmma_init() != cudaSuccess)
            return 1;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        cudaMalloc(&off, sizeof hoff);
        cudaMemcpy(off, hoff, sizeof hoff, cudaMemcpyHostToDevice);
        return run_once(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), lt, ws, s, off);
    }
    if (argc != 6) {
        fprintf(stderr, "usage: own_vs_lt TOKENS D QKV FFN VOCAB | own_vs_lt --once M N K\n");
        return 2;
    }
    int T = atoi(argv[1]), D = atoi(argv[2]), Q = atoi(argv[3]), F = atoi(argv[4]);
    int V = atoi(argv[5]);
    cublasLtHandle_t lt;
    void *ws = NULL;
    cudaStream_t s;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS || cudaMalloc(&ws, WS) != cudaSuccess ||
        gt_cuda_grouped_mm_wgmma_init() != cudaSuccess) {
        fprintf(stderr, "own_vs_lt: no GPU, cuBLASLt or sm_90a\n");
        return 1;
    }
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    int32_t hoff[2] = {0, T}, *off;
    cudaMalloc(&off, sizeof hoff);
    cudaMemcpy(off, hoff, sizeof hoff, cudaMemcpyHostToDevice);
    int touch_n = T * D;
    bf16 *touch = (bf16 *)dev_random((size_t)touch_n, 0, 9);
    float lt_sum = 0, own_sum = 0;
    int shapes[5][2] = {{Q, D}, {D, D}, {2 * F, D}, {D, F}, {V, D}};
    for (int sh = 0; sh < 5; sh++)
        for (int kind = 0; kind < 3; kind++) {
            int M = T, N = shapes[sh][0], K = shapes[sh][1];
            lt_plan p;
            if (!lt_build(lt, &p, kind, M, N, K)) {
                printf("%s M=%d N=%d K=%d: cuBLASLt has no algorithm\n", names[kind], M, N, K);
                continue;
            }
            /* A: the row operand (a [M,K] fwd; dout [M,N] data and weight); B: w [N,K] or a */
            size_t na = (size_t)M * (kind == FWD ? K : N);
            size_t nb = kind == WGRAD ? (size_t)M * K : (size_t)N * K;
            size_t nc = kind == FWD ? (size_t)M * N : kind == DATA ? (size_t)M * K : (size_t)N * K;
            int c32 = kind == WGRAD;
            job j = {s,    lt,   &p, kind, M, N, K, dev_random(na, 0, 1), dev_random(nb, 0, 2),
                     NULL, NULL, ws, off};
            j.C = dev_random(nc, c32, 3);
            j.C2 = dev_random(nc, c32, 3);
            run_lt(&j);
            run_own(&j);
            cudaStreamSynchronize(s);
            double diff = max_diff(j.C, j.C2, nc, c32);
            float tl = chain_us(s, touch, touch_n, run_lt, &j);
            float to = chain_us(s, touch, touch_n, run_own, &j);
            cudaError_t e = cudaStreamSynchronize(s);
            double fl = 2.0 * M * N * K;
            printf("%-10s M=%-5d N=%-6d K=%-5d  lt %7.2f us  own %7.2f us  (%+5.1f%%)  "
                   "gemm TFLOP/s at lt %5.0f  rel diff %.2e %s\n",
                   names[kind], M, N, K, tl, to, 100.0 * (to - tl) / tl, fl / tl * 1e-6, diff,
                   e == cudaSuccess ? "" : cudaGetErrorString(e));
            /* the prototype's launches: one block a tile, persistent, clusters, ping-pong */
            static void (*const protos[])(void *) = {run_dense_tiles, run_dense_persist,
                                                     run_dense_cluster, run_dense_pingpong};
            static const char *const proto_names[] = {"128x256 a block a tile",
                                                      "128x256 persistent", "128x256 cluster x2",
                                                      "64x256 ping-pong"};
            for (int v = 0; kind == FWD && v < 4; v++) {
                void (*fn)(void *) = protos[v];
                cudaMemset(j.C2, 0, nc * 2);
                fn(&j);
                cudaStreamSynchronize(s);
                double d2 = max_diff(j.C, j.C2, nc, 0);
                float t2 = chain_us(s, touch, touch_n, fn, &j);
                cudaError_t e2 = cudaStreamSynchronize(s);
                printf("%-10s M=%-5d N=%-6d K=%-5d  lt %7.2f us  %s %7.2f us (%+5.1f%%)  rel diff "
                       "%.2e %s\n",
                       names[kind], M, N, K, tl, proto_names[v], t2, 100.0 * (t2 - tl) / tl, d2,
                       e2 == cudaSuccess ? "" : cudaGetErrorString(e2));
            }
            if (sh < 4) lt_sum += tl, own_sum += to;
            cudaFree(j.A), cudaFree(j.B), cudaFree(j.C), cudaFree(j.C2);
            lt_problem_destroy(&p.p);
        }
    printf("one layer's 12 GEMMs (each after a small kernel): lt %.1f us, own %.1f us\n", lt_sum,
           own_sum);
    return 0;
}
