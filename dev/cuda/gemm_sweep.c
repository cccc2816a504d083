/* How far cuBLASLt's first heuristic answer is from its best algorithm, per GEMM of a
 * workload: for each (kind, M, N, K) the backend plans (backend/cuda/cuda_matmul.c's layouts:
 * forward out = a @ w^T, data gradient da = dout @ w, weight gradient dw (+)= dout^T @ a in
 * fp32), asks the heuristic for up to 32 algorithms, times each (CUDA events, 20 launches
 * after 3 warm-up launches, random bf16 operands) and prints the first answer's time, the best
 * time and which answer was best. A dev/ tool (-DGT_DEV=ON, run by scripts/gpu.sh), not part
 * of the engine.
 * Usage: gemm_sweep TOKENS D QKV FFN VOCAB   (one layer's GEMM shapes plus the output head) */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lt_problem.h"

#define WS_BYTES ((size_t)32 << 20)
#define MAX_ALGOS 32

static const char *const kind_names[] = {"fwd", "bwd_data", "bwd_weight"};

static void sweep(cublasLtHandle_t lt, void *ws, int kind, int M, int N, int K) {
    lt_problem p;
    cublasLtMatmulHeuristicResult_t res[MAX_ALGOS];
    int found = lt_problem_build(lt, &p, kind, M, N, K, WS_BYTES, res, MAX_ALGOS);
    void *A = lt_dev_random(p.a_elems * 2, 1), *B = lt_dev_random(p.b_elems * 2, 2);
    void *C = lt_dev_random(p.c_elems * (p.c_fp32 ? 4 : 2), 3);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float alpha = 1.0f, beta = kind == LT_BWD_WEIGHT ? 1.0f : 0.0f;
    float first = -1, best = 1e30f;
    int best_i = -1;
    for (int i = 0; i < found; i++) {
        int ok = 1;
        for (int r = 0; r < 23 && ok; r++) {
            if (r == 3) cudaEventRecord(e0, 0);
            ok = cublasLtMatmul(lt, p.desc, &alpha, A, p.la, B, p.lb, &beta, C, p.lc, C, p.lc,
                                &res[i].algo, ws, WS_BYTES, 0) == CUBLAS_STATUS_SUCCESS;
        }
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        float us = ok ? ms * 1e3f / 20 : -1;
        if (i == 0) first = us;
        if (ok && us < best) best = us, best_i = i;
    }
    double flops = 2.0 * M * N * K;
    printf("%-10s M=%-6d N=%-6d K=%-6d algos %2d  first %8.2f us (%5.0f TFLOP/s)  best %8.2f us "
           "(#%d, %5.0f TFLOP/s)  gain %5.1f%%\n",
           kind_names[kind], M, N, K, found, first, flops / first * 1e-6, best, best_i,
           flops / best * 1e-6, 100.0 * (first - best) / first);
    cudaFree(A), cudaFree(B), cudaFree(C);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    lt_problem_destroy(&p);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: gemm_sweep TOKENS D QKV FFN VOCAB\n");
        return 2;
    }
    int T, shapes[5][2];
    lt_workload_shapes(argv, &T, shapes);
    cublasLtHandle_t lt;
    void *ws;
    lt_open("gemm_sweep", &lt, &ws, WS_BYTES);
    for (int s = 0; s < 5; s++)
        for (int k = 0; k < 3; k++)
            sweep(lt, ws, k, T, shapes[s][0], shapes[s][1]);
    cudaFree(ws);
    cublasLtDestroy(lt);
    return 0;
}
