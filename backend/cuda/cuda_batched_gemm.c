/* Row-major strided-batched GEMMs of bf16 operands into fp32 through cuBLASLt, for kernels
 * that materialize their operands in a workspace (the SSD scan's chunk products,
 * k_mamba_ssd.cu). A plan per shape is made in the trainer's planning pass
 * (gt_cuda_batched_gemm_plan), or on the first use of a shape that pass did not see (an op
 * called directly, as the GPU tests do: host calls only, no device work, so even inside a
 * capture), and kept until the backend is destroyed, so every call of a shape runs the same
 * algorithm. */
#include <cublasLt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

/* Operand alignment the plans assume: the workspace lays every matrix and every batch member
 * out on 16 bytes, which the Hopper kernels' tensor-memory loads need. */
#define BATCHED_ALIGN_BYTES 16u

struct gt_cuda_batched_plan {
    gt_cuda_batched_gemm g;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

static int same_shape(const gt_cuda_batched_gemm *x, const gt_cuda_batched_gemm *y) {
    return x->M == y->M && x->N == y->N && x->K == y->K && x->count == y->count &&
           x->a_mk == y->a_mk && x->b_kn == y->b_kn && x->lda == y->lda && x->ldb == y->ldb &&
           x->ldc == y->ldc && x->sa == y->sa && x->sb == y->sb && x->sc == y->sc;
}

static void release(gt_cuda_batched_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

void gt_cuda_batched_gemm_destroy(gt_backend *b) {
    gt_cuda_impl *im = b->impl;
    for (int i = 0; i < im->n_batched; i++)
        release(&im->batched[i]);
    free(im->batched);
    im->batched = NULL;
    im->n_batched = im->cap_batched = 0;
}

static void set_batch(cublasLtMatrixLayout_t l, int count, int64_t stride) {
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                     sizeof stride);
}

/* One algorithm for plan p from cuBLASLt's heuristic: no workspace, 16-byte operands, and no
 * split-K reduction where masked */
static int heuristic(cublasLtHandle_t lt, gt_cuda_batched_plan *p, int masked) {
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return 0;
    size_t ws = 0;
    uint32_t align = BATCHED_ALIGN_BYTES, scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    if (masked)
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                             &scheme, sizeof scheme);
    cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lc, p->lc,
                                                       pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) return 0;
    p->algo = res.algo;
    return 1;
}

/* Row-major C[M][N] = A B is column-major C^T[N x M] = B^T A^T: cuBLASLt's first operand is
 * B's buffer (N x K column-major when stored [K][N], else K x N transposed), its second A's
 * (K x M when stored [M][K], else M x K transposed). */
static int plan_build(cublasLtHandle_t lt, gt_cuda_batched_plan *p) {
    const gt_cuda_batched_gemm *g = &p->g;
    cublasOperation_t tx = g->b_kn ? CUBLAS_OP_N : CUBLAS_OP_T;
    cublasOperation_t ty = g->a_mk ? CUBLAS_OP_N : CUBLAS_OP_T;
    uint64_t xr = g->b_kn ? g->N : g->K, xc = g->b_kn ? g->K : g->N;
    uint64_t yr = g->a_mk ? g->K : g->M, yc = g->a_mk ? g->M : g->K;
    if (cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
        return 0;
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tx, sizeof tx);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &ty, sizeof ty);
    if (cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, xr, xc, g->ldb) ||
        cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, yr, yc, g->lda) ||
        cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, (uint64_t)g->N, (uint64_t)g->M, g->ldc))
        return 0;
    set_batch(p->la, g->count, g->sb);
    set_batch(p->lb, g->count, g->sa);
    set_batch(p->lc, g->count, g->sc);
    /* no split-K reduction first; where that leaves no algorithm, without the mask (with no
     * workspace, only an in-place reduction can remain; the plan keeps whichever it gets, so
     * every call of the shape still runs the same kernel) */
    for (int masked = 1; masked >= 0; masked--)
        if (heuristic(lt, p, masked)) return 1;
    return 0;
}

static gt_cuda_batched_plan *plan_get(gt_backend *b, const gt_cuda_batched_gemm *g,
                                      const char *what) {
    gt_cuda_impl *im = b->impl;
    for (int i = 0; i < im->n_batched; i++)
        if (same_shape(&im->batched[i].g, g)) return &im->batched[i];
    if (im->n_batched == im->cap_batched) {
        int cap = im->cap_batched ? im->cap_batched * 2 : 16;
        gt_cuda_batched_plan *np = realloc(im->batched, (size_t)cap * sizeof *np);
        if (!np) {
            gt_backend_fail(b, GT_ERR_NOMEM, "%s: out of host memory planning a GEMM", what);
            return NULL;
        }
        im->batched = np;
        im->cap_batched = cap;
    }
    gt_cuda_batched_plan *p = &im->batched[im->n_batched];
    memset(p, 0, sizeof *p);
    p->g = *g;
    if (!plan_build((cublasLtHandle_t)im->lt, p)) {
        release(p);
        gt_backend_fail(b, GT_ERR_DEVICE,
                        "%s: cuBLASLt offers no algorithm for the batched GEMM M=%d N=%d K=%d "
                        "(batch of %d, leading dimensions %lld, %lld, %lld)",
                        what, g->M, g->N, g->K, g->count, (long long)g->lda, (long long)g->ldb,
                        (long long)g->ldc);
        return NULL;
    }
    im->n_batched++;
    return p;
}

void gt_cuda_batched_gemm_plan(gt_backend *b, const gt_cuda_batched_gemm *g, const char *what) {
    if (g->M > 0 && g->N > 0 && g->K > 0 && g->count > 0) (void)plan_get(b, g, what);
}

void gt_cuda_batched_gemm_f32(gt_backend *b, cudaStream_t cs, const gt_cuda_batched_gemm *g,
                              const void *A, const void *B, float *C, const char *what) {
    if (g->M <= 0 || g->N <= 0 || g->K <= 0 || g->count <= 0) return;
    uintptr_t bits = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C;
    bits |= (uintptr_t)(g->lda * 2) | (uintptr_t)(g->ldb * 2) | (uintptr_t)(g->ldc * 4);
    bits |= (uintptr_t)(g->sa * 2) | (uintptr_t)(g->sb * 2) | (uintptr_t)(g->sc * 4);
    if (bits & (BATCHED_ALIGN_BYTES - 1)) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: a batched GEMM operand, leading dimension or batch stride is not "
                        "%u-byte aligned (the workspace layout is wrong)",
                        what, BATCHED_ALIGN_BYTES);
        return;
    }
    gt_cuda_batched_plan *p = plan_get(b, g, what);
    if (!p) return;
    gt_cuda_impl *im = b->impl;
    float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul((cublasLtHandle_t)im->lt, p->desc, &alpha, B, p->la, A,
                                       p->lb, &beta, C, p->lc, C, p->lc, &p->algo, NULL, 0, cs);
    if (st != CUBLAS_STATUS_SUCCESS)
        gt_backend_fail(
            b, GT_ERR_DEVICE,
            "%s: cublasLtMatmul (batched M=%d N=%d K=%d, batch of %d) failed: status %d", what,
            g->M, g->N, g->K, g->count, (int)st);
}
