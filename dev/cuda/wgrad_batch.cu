/* Weight-gradient GEMMs of every layer one by one against one strided-batched cuBLASLt GEMM
 * per weight (the layers as the batch): dw_l[N,K] = dout_l[M,N]^T a_l[M,K] in fp32, for the
 * QKV, output, gate/up and down projections of a workload's L layers. Each variant is captured
 * in one CUDA graph and replayed; prints the best of 10 replays in us and the largest relative
 * difference between the two results. A developer tool for the GPU scripts; not the engine.
 * Usage: wgrad_batch TOKENS D QKV HEADS_X_HD FFN LAYERS (FFN 0: no dense MLP) */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dev/cuda/dev_random.cuh"
#include "dev/cuda/lt_problem.h"

#define WS ((size_t)32 << 20)

struct batch_job {
    cublasLtHandle_t lt;
    cudaStream_t s;
    lt_problem one, all;
    cublasLtMatmulHeuristicResult_t r_one, r_all;
    int M, N, K, L;
    __nv_bfloat16 *a, *dout;
    float *dw_one, *dw_all;
    void *ws;
};

static void run_one_by_one(batch_job *j) {
    float alpha = 1, beta = 0;
    size_t sa = (size_t)j->M * j->K, sd = (size_t)j->M * j->N, sw = (size_t)j->N * j->K;
    for (int l = 0; l < j->L; l++)
        cublasLtMatmul(j->lt, j->one.desc, &alpha, j->a + l * sa, j->one.la, j->dout + l * sd,
                       j->one.lb, &beta, j->dw_one + l * sw, j->one.lc, j->dw_one + l * sw,
                       j->one.lc, &j->r_one.algo, j->ws, WS, j->s);
}

static void run_batched(batch_job *j) {
    float alpha = 1, beta = 0;
    cublasLtMatmul(j->lt, j->all.desc, &alpha, j->a, j->all.la, j->dout, j->all.lb, &beta,
                   j->dw_all, j->all.lc, j->dw_all, j->all.lc, &j->r_all.algo, j->ws, WS, j->s);
}

static float graph_us(batch_job *j, void (*fn)(batch_job *)) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(j->s, cudaStreamCaptureModeThreadLocal);
    fn(j);
    cudaStreamEndCapture(j->s, &g);
    if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) return -1;
    size_t nodes = 0;
    cudaGraphGetNodes(g, NULL, &nodes);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int r = 0; r < 13; r++) {
        cudaEventRecord(e0, j->s);
        cudaGraphLaunch(ge, j->s);
        cudaEventRecord(e1, j->s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r >= 3 && ms < best) best = ms;
    }
    printf("    (%zu graph nodes)", nodes);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return best * 1e3f;
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
    float *ha = (float *)malloc(n * 4), *hb = (float *)malloc(n * 4);
    cudaMemcpy(ha, a, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, b, n * 4, cudaMemcpyDeviceToHost);
    double m = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)ha[i] - hb[i]));
        ref = fmax(ref, fabs((double)ha[i]));
    }
    free(ha), free(hb);
    return ref > 0 ? m / ref : m;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: wgrad_batch TOKENS D QKV HEADS_X_HD FFN LAYERS\n");
        return 2;
    }
    int T = atoi(argv[1]), D = atoi(argv[2]), Q = atoi(argv[3]), HD = atoi(argv[4]);
    int F = atoi(argv[5]), L = atoi(argv[6]);
    batch_job j = {};
    if (cublasLtCreate(&j.lt) != CUBLAS_STATUS_SUCCESS || cudaMalloc(&j.ws, WS) != cudaSuccess) {
        fprintf(stderr, "wgrad_batch: no GPU or cuBLASLt\n");
        return 1;
    }
    cudaStreamCreateWithFlags(&j.s, cudaStreamNonBlocking);
    const char *names[4] = {"qkv", "o", "gate/up", "down"};
    int shapes[4][2] = {{Q, D}, {D, HD}, {2 * F, D}, {D, F}}; /* N out, K in */
    float sum_one = 0, sum_all = 0;
    for (int w = 0; w < (F > 0 ? 4 : 2); w++) {
        j.M = T, j.N = shapes[w][0], j.K = shapes[w][1], j.L = L;
        if (lt_problem_build(j.lt, &j.one, LT_BWD_WEIGHT, j.M, j.N, j.K, WS, &j.r_one, 1) < 1)
            continue;
        int found = lt_problem_build_batched(j.lt, &j.all, LT_BWD_WEIGHT, j.M, j.N, j.K, L, WS,
                                             &j.r_all, 1);
        if (found < 1) {
            printf("%s: no batched algorithm\n", names[w]);
            continue;
        }
        j.a = (__nv_bfloat16 *)dev_random((size_t)L * j.M * j.K, 0, 1 + w);
        j.dout = (__nv_bfloat16 *)dev_random((size_t)L * j.M * j.N, 0, 7 + w);
        j.dw_one = (float *)dev_random((size_t)L * j.N * j.K, 1, 3);
        j.dw_all = (float *)dev_random((size_t)L * j.N * j.K, 1, 4);
        printf("%-8s N=%-6d K=%-5d M=%-5d x%d:", names[w], j.N, j.K, j.M, L);
        float t1 = graph_us(&j, run_one_by_one);
        float tb = graph_us(&j, run_batched);
        cudaError_t e = cudaStreamSynchronize(j.s);
        double fl = 2.0 * j.M * j.N * j.K * L;
        printf("  one by one %8.1f us (%4.0f TFLOP/s)  batched %8.1f us (%4.0f TFLOP/s)  %+5.1f%%  "
               "rel diff %.2e %s\n",
               t1, fl / t1 * 1e-6, tb, fl / tb * 1e-6, 100.0 * (tb - t1) / t1,
               max_rel_diff(j.dw_one, j.dw_all, (size_t)L * j.N * j.K),
               e == cudaSuccess ? "" : cudaGetErrorString(e));
        sum_one += t1, sum_all += tb;
        cudaFree(j.a), cudaFree(j.dout), cudaFree(j.dw_one), cudaFree(j.dw_all);
        lt_problem_destroy(&j.one), lt_problem_destroy(&j.all);
    }
    printf("all weight gradients of the layers: one by one %.1f us, batched %.1f us\n", sum_one,
           sum_all);
    return 0;
}
