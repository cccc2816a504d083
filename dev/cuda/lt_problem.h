/* The cuBLASLt problem of one dense GEMM of backend/cuda/cuda_matmul.c, for the developer
 * tools beside this file (gemm_sweep.c, own_vs_lt.cu): row-major out[M,N] = a[M,K] w[N,K]^T
 * (forward), da[M,K] = dout[M,N] w (data gradient) and dw[N,K] += dout^T a in fp32 (weight
 * gradient), spelled as the column-major products the backend hands cuBLASLt, and the
 * heuristic's first `want` answers for a workspace of ws_bytes. Valid C and C++. */
#ifndef GT_DEV_CUDA_LT_PROBLEM_H
#define GT_DEV_CUDA_LT_PROBLEM_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { LT_FWD, LT_BWD_DATA, LT_BWD_WEIGHT };

typedef struct lt_problem {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    uint64_t a_elems, b_elems, c_elems; /* elements of the operands cuBLASLt sees as A, B, C */
    int c_fp32;                         /* C is fp32 (the weight gradient), else bf16 */
} lt_problem;

static inline void lt_set_batch(cublasLtMatrixLayout_t l, int count, int64_t stride) {
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                     sizeof stride);
}

/* Builds p and asks for up to `want` algorithms into res; returns how many came. count > 1
 * makes it `count` GEMMs at once (strided batch), each operand A, B, C the previous one's
 * moved on by a_elems, b_elems, c_elems (packed one after the other). */
static inline int lt_problem_build_batched(cublasLtHandle_t lt, lt_problem *p, int kind, int M,
                                           int N, int K, int count, size_t ws_bytes,
                                           cublasLtMatmulHeuristicResult_t *res, int want) {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    uint64_t ar, ac, br, bc, cr, cc;
    cudaDataType_t ct = CUDA_R_16BF;
    if (kind == LT_FWD) {
        ta = CUBLAS_OP_T;
        ar = K, ac = N, br = K, bc = M, cr = N, cc = M;
    } else if (kind == LT_BWD_DATA) {
        ar = K, ac = N, br = N, bc = M, cr = K, cc = M;
    } else {
        tb = CUBLAS_OP_T;
        ar = K, ac = M, br = N, bc = M, cr = K, cc = N;
        ct = CUDA_R_32F;
    }
    p->a_elems = ar * ac, p->b_elems = br * bc, p->c_elems = cr * cc;
    p->c_fp32 = ct == CUDA_R_32F;
    cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, ar, ac, (int64_t)ar);
    cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, br, bc, (int64_t)br);
    cublasLtMatrixLayoutCreate(&p->lc, ct, cr, cc, (int64_t)cr);
    if (count > 1) {
        lt_set_batch(p->la, count, (int64_t)p->a_elems);
        lt_set_batch(p->lb, count, (int64_t)p->b_elems);
        lt_set_batch(p->lc, count, (int64_t)p->c_elems);
    }
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                         sizeof ws_bytes);
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, want, res,
                                   &found);
    cublasLtMatmulPreferenceDestroy(pref);
    return found;
}

static inline int lt_problem_build(cublasLtHandle_t lt, lt_problem *p, int kind, int M, int N,
                                   int K, size_t ws_bytes, cublasLtMatmulHeuristicResult_t *res,
                                   int want) {
    return lt_problem_build_batched(lt, p, kind, M, N, K, 1, ws_bytes, res, want);
}

/* bytes of random bf16 values in [-1, 1) on the device, from an LCG seeded with seed: sign,
 * exponent 120..126, random mantissa; exits with a message when the memory is not there */
static inline void *lt_dev_random(size_t bytes, uint32_t seed) {
    uint16_t *h = (uint16_t *)malloc(bytes);
    void *d = NULL;
    if (!h || cudaMalloc(&d, bytes) != cudaSuccess) {
        fprintf(stderr, "gemm tool: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    for (size_t i = 0; i < bytes / 2; i++) {
        seed = seed * 1664525u + 1013904223u;
        /* bf16 in [-1, 1): sign, exponent 120..126, random mantissa */
        h[i] = (uint16_t)(((seed >> 31) << 15) | ((120u + (seed >> 24) % 7u) << 7) |
                          ((seed >> 8) & 0x7fu));
    }
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    free(h);
    return d;
}

/* The tools' workload arguments TOKENS D QKV FFN VOCAB (argv[1..5]): *tokens, and the five
 * projections as (out features, in features): qkv, o, gate/up, down, head. */
static inline void lt_workload_shapes(char **argv, int *tokens, int shapes[5][2]) {
    int D = atoi(argv[2]), Q = atoi(argv[3]), F = atoi(argv[4]), V = atoi(argv[5]);
    *tokens = atoi(argv[1]);
    shapes[0][0] = Q, shapes[0][1] = D;
    shapes[1][0] = D, shapes[1][1] = D;
    shapes[2][0] = 2 * F, shapes[2][1] = D;
    shapes[3][0] = D, shapes[3][1] = F;
    shapes[4][0] = V, shapes[4][1] = D;
}

/* A cuBLASLt handle and a workspace of ws_bytes; without a GPU or cuBLASLt, a message naming
 * the tool and exit(1). */
static inline void lt_open(const char *tool, cublasLtHandle_t *lt, void **ws, size_t ws_bytes) {
    *ws = NULL;
    if (cublasLtCreate(lt) != CUBLAS_STATUS_SUCCESS || cudaMalloc(ws, ws_bytes) != cudaSuccess) {
        fprintf(stderr, "%s: no GPU or cuBLASLt\n", tool);
        exit(1);
    }
}

static inline void lt_problem_destroy(lt_problem *p) {
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
}

#endif
