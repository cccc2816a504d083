/* Dense GEMMs through cuBLASLt: bf16 inputs, fp32 compute. One plan per (op, shape) is built
 * while planning (descriptors, layouts and one heuristic algorithm for 256-byte aligned and
 * one for unaligned pointers), so a step only looks the plan up and launches; an unplanned
 * shape inside a step is a sticky error. Row-major out[M,N] = a[M,K] @ w[N,K]^T is the
 * column-major product out^T[N,M] = w^T... as spelled out at each op below. */
#include <cublasLt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/gemm_table.h"
#include "core/median.h"

#define GT_LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define GT_LT_ALIGN_HI 256
#define GT_LT_ALIGN_LO 2
#define GT_LT_CANDIDATES GT_GEMM_CANDIDATES /* heuristic answers kept for tune-gemm */

typedef enum {
    GEMM_FWD = 0,      /* out bf16 = a @ w^T */
    GEMM_FWD_BIAS,     /* + bias epilogue */
    GEMM_BWD_DATA,     /* da bf16 = dout @ w */
    GEMM_BWD_DATA_ACC, /* da += dout @ w (beta 1) */
    GEMM_BWD_WEIGHT,   /* dw fp32 (+)= dout^T @ a (beta 1 or 0) */
    /* fp8_gemm, every one "TN" like GEMM_FWD (A = w, B = a, both K-contiguous, as Hopper's fp8
     * tensor cores need), scaled by device-side scale pointers */
    GEMM_FP8,            /* out bf16 (+ C) = sw sa w @ a, E4M3 x E4M3 */
    GEMM_FP8_B_E5M2,     /* the same, a in E5M2 (gradients under hybrid) */
    GEMM_FP8_F32,        /* out fp32 (+)= ..., E4M3 x E4M3 (weight gradients) */
    GEMM_FP8_F32_B_E5M2, /* the same, a in E5M2 */
    GEMM_FP8_FAST,       /* GEMM_FP8 with fast accumulation (the forward, GT_FP8_FAST_ACCUM) */
    GEMM_FP8_BIAS,       /* GEMM_FP8 + bias epilogue (bf16 bias; fp8 linear layers with biases) */
    /* blockwise (fp8_sc): A = w with one scale per 128 x 128 block (BLK128x128_32F) or per 1 x
     * 128 K tile (VEC128_32F), B = a with one per 1 x 128 K tile; never fast accumulation (the
     * block-scaled kernels promote every K tile), as PyTorch and Transformer Engine refuse it */
    GEMM_FP8_BLK,            /* out bf16 (+ C), w blocks x a tiles, E4M3 x E4M3 (forward) */
    GEMM_FP8_BLK_B_E5M2,     /* the same, a in E5M2 (data gradient under hybrid) */
    GEMM_FP8_BLK_BIAS,       /* GEMM_FP8_BLK + bias epilogue */
    GEMM_FP8_VEC_F32,        /* out fp32 (+)=, tiles x tiles, E4M3 x E4M3 (weight gradient) */
    GEMM_FP8_VEC_F32_B_E5M2, /* the same, a in E5M2 */
    GEMM_KINDS
} gemm_kind;

static const char *const gemm_names[GEMM_KINDS] = {"matmul_fwd",
                                                   "matmul_fwd(bias)",
                                                   "matmul_bwd_data",
                                                   "matmul_bwd_data(accumulate)",
                                                   "matmul_bwd_weight",
                                                   "fp8_gemm",
                                                   "fp8_gemm(e5m2)",
                                                   "fp8_gemm(fp32)",
                                                   "fp8_gemm(fp32,e5m2)",
                                                   "fp8_gemm(fast)",
                                                   "fp8_gemm(bias)",
                                                   "fp8_gemm(blockwise)",
                                                   "fp8_gemm(blockwise,e5m2)",
                                                   "fp8_gemm(blockwise,bias)",
                                                   "fp8_gemm(blockwise,fp32)",
                                                   "fp8_gemm(blockwise,fp32,e5m2)"};

static int is_fp8(int kind) {
    return kind >= GEMM_FP8;
}

static int is_blockwise(int kind) {
    return kind >= GEMM_FP8_BLK;
}

struct gt_cuda_gemm_plan {
    int kind, M, N, K;
    int count;          /* batch: 1, or that many GEMMs at once */
    int64_t sa, sb, sc; /* elements between the batch's operands A, B and C */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo[2]; /* [0] aligned, [1] any alignment */
    int has_algo[2];
    /* the heuristic's answers for aligned operands, best first; algo[0] is cand[choice], or
     * the table's algorithm (choice -1 when it is none of these) */
    cublasLtMatmulAlgo_t cand[GT_LT_CANDIDATES];
    int n_cand, choice;
};

/* graphtrain tune-gemm: one plan's launches timed by candidate (gemm_tune) */
#define TUNE_PAIRS 256   /* event pairs in flight between two gemm_tune_read calls */
#define TUNE_SAMPLES 512 /* timings kept per candidate */

struct gt_cuda_gemm_tune {
    int plan;      /* the plan whose launches rotate through its candidates; -1: none */
    unsigned next; /* rotation counter */
    cudaEvent_t ev[2 * TUNE_PAIRS];
    int pair_cand[TUNE_PAIRS], pairs;
    float samples[GT_LT_CANDIDATES][TUNE_SAMPLES];
    int n_samples[GT_LT_CANDIDATES];
};

#define GT_LT_RET(b, err, call)                                                                    \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
            return gt_error_set((err), GT_ERR_DEVICE, "%s failed: cuBLAS status %d at %s:%d",      \
                                #call, (int)st_, __FILE__, __LINE__);                              \
    } while (0)

int gt_cuda_matmul_init(gt_backend *b, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    cublasLtHandle_t h = NULL;
    GT_LT_RET(b, err, cublasLtCreate(&h));
    im->lt = h;
    return GT_OK;
}

static void plan_release(gt_cuda_gemm_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

void gt_cuda_matmul_destroy(gt_backend *b) {
    gt_cuda_impl *im = b->impl;
    for (int i = 0; i < im->n_plans; i++)
        plan_release(&im->plans[i]);
    free(im->plans);
    im->plans = NULL;
    im->n_plans = im->cap_plans = 0;
    if (im->lt_ws) {
        b->ops->free(b, im->lt_ws);
        im->lt_ws = NULL;
    }
    if (im->lt_scale_stub) {
        b->ops->free(b, im->lt_scale_stub);
        im->lt_scale_stub = NULL;
    }
    if (im->lt) cublasLtDestroy((cublasLtHandle_t)im->lt);
    im->lt = NULL;
    if (im->gemm_table) {
        gt_gemm_table_free(im->gemm_table);
        free(im->gemm_table);
        im->gemm_table = NULL;
    }
    if (im->gemm_tune) {
        for (int i = 0; i < 2 * TUNE_PAIRS; i++)
            cudaEventDestroy(im->gemm_tune->ev[i]);
        free(im->gemm_tune);
        im->gemm_tune = NULL;
    }
}

int gt_cuda_matmul_plan_finish(gt_backend *b, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    if (im->lt_ws || im->n_plans == 0) return GT_OK;
    int rc = b->ops->alloc(b, GT_LT_WORKSPACE_BYTES, &im->lt_ws, err);
    if (rc) return gt_error_wrap(err, "allocating the cuBLASLt workspace: ");
    im->lt_ws_bytes = GT_LT_WORKSPACE_BYTES;
    return GT_OK;
}

/* A GEMM, or `count` of them (count > 1) whose operands lie sa, sb and sc elements apart. */
typedef struct gemm_shape {
    int kind, M, N, K, count;
    int64_t sa, sb, sc;
} gemm_shape;

static gt_cuda_gemm_plan *plan_find(gt_cuda_impl *im, const gemm_shape *g) {
    for (int i = 0; i < im->n_plans; i++) {
        gt_cuda_gemm_plan *p = &im->plans[i];
        if (p->kind == g->kind && p->M == g->M && p->N == g->N && p->K == g->K &&
            p->count == g->count && p->sa == g->sa && p->sb == g->sb && p->sc == g->sc)
            return p;
    }
    return NULL;
}

static void set_batch(cublasLtMatrixLayout_t l, int count, int64_t stride) {
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                     sizeof stride);
}

static int pick_algo(cublasLtHandle_t lt, gt_cuda_gemm_plan *p, int slot, uint32_t align) {
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return 0;
    size_t ws = GT_LT_WORKSPACE_BYTES;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res[GT_LT_CANDIDATES];
    int want = slot == 0 ? GT_LT_CANDIDATES : 1, found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lc, p->lc,
                                                       pref, want, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) return 0;
    p->algo[slot] = res[0].algo;
    p->has_algo[slot] = 1;
    if (slot == 0) {
        for (int i = 0; i < found && i < GT_LT_CANDIDATES; i++)
            p->cand[i] = res[i].algo;
        p->n_cand = found < GT_LT_CANDIDATES ? found : GT_LT_CANDIDATES;
        p->choice = 0;
    }
    return 1;
}

static void shape_key(const gt_cuda_gemm_plan *p, gt_gemm_shape_key *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->kind, sizeof k->kind, "%s", gemm_names[p->kind]);
    k->M = p->M, k->N = p->N, k->K = p->K, k->count = p->count;
    k->sa = p->sa, k->sb = p->sb, k->sc = p->sc;
}

/* The table's algorithm for the aligned path of this shape, where the table lists the shape
 * and cuBLASLt accepts the algorithm; otherwise the heuristic's stays, with a warning. */
static void apply_table(gt_cuda_impl *im, gt_cuda_gemm_plan *p) {
    if (!im->gemm_table) return;
    gt_gemm_shape_key k;
    shape_key(p, &k);
    const gt_gemm_entry *e = gt_gemm_table_find(im->gemm_table, &k);
    if (!e) return;
    cublasLtMatmulAlgo_t a;
    memcpy(a.data, e->algo, sizeof a.data);
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    cublasStatus_t st = cublasLtMatmulAlgoCheck((cublasLtHandle_t)im->lt, p->desc, p->la, p->lb,
                                                p->lc, p->lc, &a, &r);
    if (st != CUBLAS_STATUS_SUCCESS || r.workspaceSize > GT_LT_WORKSPACE_BYTES) {
        fprintf(stderr,
                "graphtrain: warning: runtime.gemm_table: cuBLASLt refuses the table's algorithm "
                "for %s M=%d N=%d K=%d batch=%d (status %d, workspace %zu bytes); that GEMM "
                "runs the heuristic's choice (make the table again with graphtrain tune-gemm)\n",
                k.kind, k.M, k.N, k.K, k.count, (int)st, r.workspaceSize);
        im->gemm_table_refused++;
        return;
    }
    p->algo[0] = a;
    p->choice = -1;
    for (int i = 0; i < p->n_cand; i++)
        if (memcmp(&p->cand[i], &a, sizeof a) == 0) p->choice = i;
    im->gemm_table_used++;
}

/* Column-major problem: D[m,n] = op(A)[m,k] @ op(B)[k,n] (+ beta C). */
static int plan_build(gt_backend *b, gt_cuda_gemm_plan *p) {
    gt_cuda_impl *im = b->impl;
    int M = p->M, N = p->N, K = p->K;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    uint64_t arows, acols, lda, brows, bcols, ldb, crows, ccols, ldc;
    cudaDataType_t atype = CUDA_R_16BF, btype = CUDA_R_16BF, ctype = CUDA_R_16BF;
    if (is_fp8(p->kind)) {
        atype = CUDA_R_8F_E4M3;
        int e5 = p->kind == GEMM_FP8_B_E5M2 || p->kind == GEMM_FP8_F32_B_E5M2 ||
                 p->kind == GEMM_FP8_BLK_B_E5M2 || p->kind == GEMM_FP8_VEC_F32_B_E5M2;
        btype = e5 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
        if (p->kind == GEMM_FP8_F32 || p->kind == GEMM_FP8_F32_B_E5M2 ||
            p->kind == GEMM_FP8_VEC_F32 || p->kind == GEMM_FP8_VEC_F32_B_E5M2)
            ctype = CUDA_R_32F;
    }
    switch (p->kind) {
    case GEMM_FWD:
    case GEMM_FWD_BIAS:
    case GEMM_FP8:
    case GEMM_FP8_B_E5M2:
    case GEMM_FP8_F32:
    case GEMM_FP8_F32_B_E5M2:
    case GEMM_FP8_FAST:
    case GEMM_FP8_BIAS:
    case GEMM_FP8_BLK:
    case GEMM_FP8_BLK_B_E5M2:
    case GEMM_FP8_BLK_BIAS:
    case GEMM_FP8_VEC_F32:
    case GEMM_FP8_VEC_F32_B_E5M2:
        /* out^T[N,M] = (w stored K x N)^T @ (a stored K x M) */
        ta = CUBLAS_OP_T;
        arows = K, acols = N, lda = K;
        brows = K, bcols = M, ldb = K;
        crows = N, ccols = M, ldc = N;
        break;
    case GEMM_BWD_DATA:
    case GEMM_BWD_DATA_ACC:
        /* da^T[K,M] = (w stored K x N) @ (dout stored N x M) */
        arows = K, acols = N, lda = K;
        brows = N, bcols = M, ldb = N;
        crows = K, ccols = M, ldc = K;
        break;
    default:
        /* dw^T[K,N] += (a stored K x M) @ (dout stored N x M)^T */
        tb = CUBLAS_OP_T;
        arows = K, acols = M, lda = K;
        brows = N, bcols = M, ldb = N;
        crows = K, ccols = N, ldc = K;
        ctype = CUDA_R_32F;
        break;
    }
    if (cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
        return 0;
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (p->kind == GEMM_FP8_FAST || p->kind == GEMM_FP8_BIAS) {
        /* Transformer Engine's forward: no periodic promotion of the tensor cores' partial
         * sums to fp32 (faster); the gradients keep it. The bias epilogue is a forward too. */
        int8_t fast = 1;
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                       sizeof fast);
    }
    if (is_blockwise(p->kind)) {
        /* cuBLASLt's A is graphtrain's w: its blocks (forward, data gradient) or K tiles
         * (weight gradient); B is a, always K tiles. Scales as gt_fp8_scale_index lays them. */
        int vec = p->kind == GEMM_FP8_VEC_F32 || p->kind == GEMM_FP8_VEC_F32_B_E5M2;
        cublasLtMatmulMatrixScale_t am = vec ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                             : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        cublasLtMatmulMatrixScale_t bm = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm);
        /* cuBLASLt's heuristic refuses block-scaled descriptors without scale pointers
         * (CUBLAS_STATUS_INVALID_VALUE, no algorithm; dev/cuda/blockwise_probe.c), so they
         * point at a stub until each launch sets the operands' own */
        if (!im->lt_scale_stub) {
            gt_error err = {0};
            if (b->ops->alloc(b, 256, &im->lt_scale_stub, &err)) {
                gt_backend_fail(b, GT_ERR_NOMEM, "planning a block-scaled fp8 GEMM: %s", err.msg);
                return 0;
            }
        }
        const void *stub = im->lt_scale_stub;
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &stub,
                                       sizeof stub);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &stub,
                                       sizeof stub);
    }
    if (p->kind == GEMM_FWD_BIAS || p->kind == GEMM_FP8_BIAS || p->kind == GEMM_FP8_BLK_BIAS) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_16BF;
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                       sizeof bt);
    }
    if (cublasLtMatrixLayoutCreate(&p->la, atype, arows, acols, (int64_t)lda) ||
        cublasLtMatrixLayoutCreate(&p->lb, btype, brows, bcols, (int64_t)ldb) ||
        cublasLtMatrixLayoutCreate(&p->lc, ctype, crows, ccols, (int64_t)ldc))
        return 0;
    if (p->count > 1) {
        set_batch(p->la, p->count, p->sa);
        set_batch(p->lb, p->count, p->sb);
        set_batch(p->lc, p->count, p->sc);
    }
    cublasLtHandle_t lt = (cublasLtHandle_t)im->lt;
    int hi = pick_algo(lt, p, 0, GT_LT_ALIGN_HI);
    int lo = pick_algo(lt, p, 1, GT_LT_ALIGN_LO);
    if (hi) apply_table(im, p);
    return hi || lo;
}

static gt_cuda_gemm_plan *plan_get(gt_backend *b, const gemm_shape *g) {
    gt_cuda_impl *im = b->impl;
    int kind = g->kind, M = g->M, N = g->N, K = g->K;
    gt_cuda_gemm_plan *p = plan_find(im, g);
    if (p) return p;
    if (!b->planning) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s with M=%d N=%d K=%d (batch of %d) was not planned: run the op once "
                        "while b->planning is set (the trainer's planning pass), then "
                        "plan_finish",
                        gemm_names[kind], M, N, K, g->count);
        return NULL;
    }
    if (im->n_plans == im->cap_plans) {
        int cap = im->cap_plans ? im->cap_plans * 2 : 32;
        gt_cuda_gemm_plan *np = realloc(im->plans, (size_t)cap * sizeof *np);
        if (!np) {
            gt_backend_fail(b, GT_ERR_NOMEM, "out of host memory planning %s", gemm_names[kind]);
            return NULL;
        }
        im->plans = np;
        im->cap_plans = cap;
    }
    p = &im->plans[im->n_plans];
    memset(p, 0, sizeof *p);
    p->kind = kind, p->M = M, p->N = N, p->K = K;
    p->count = g->count, p->sa = g->sa, p->sb = g->sb, p->sc = g->sc;
    if (!plan_build(b, p)) {
        plan_release(p);
        gt_backend_fail(b, GT_ERR_DEVICE,
                        "%s with M=%d N=%d K=%d: cuBLASLt offers no algorithm for this shape",
                        gemm_names[kind], M, N, K);
        return NULL;
    }
    im->n_plans++;
    return p;
}

/* ---- timing candidates inside eager steps (graphtrain tune-gemm) ---- */

/* The candidate this launch of plan p runs while p is being timed (events around it), else
 * -1. */
static int tune_begin_launch(gt_cuda_impl *im, const gt_cuda_gemm_plan *p, int slot,
                             cudaStream_t cs) {
    gt_cuda_gemm_tune *t = im->gemm_tune;
    if (!t || t->plan < 0 || &im->plans[t->plan] != p || slot != 0 || t->pairs == TUNE_PAIRS)
        return -1;
    int c = (int)(t->next++ % (unsigned)p->n_cand);
    if (cudaEventRecord(t->ev[2 * t->pairs], cs) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    t->pair_cand[t->pairs] = c;
    return c;
}

static void tune_end_launch(gt_cuda_impl *im, cudaStream_t cs) {
    gt_cuda_gemm_tune *t = im->gemm_tune;
    if (cudaEventRecord(t->ev[2 * t->pairs + 1], cs) != cudaSuccess)
        cudaGetLastError();
    else
        t->pairs++;
}

static uintptr_t align_of(uintptr_t acc, const void *p) {
    return p ? acc | (uintptr_t)p : acc;
}

/* D = A B (+ bias) (+ beta C), or g->count of them. C may be D (accumulation) or another tensor
 * of D's layout (a residual added in the epilogue); beta 0 reads no C. */
static void gemm_launch(gt_backend *b, gt_stream *s, const gemm_shape *g, const void *A,
                        const void *B, const void *C, void *D, const void *bias, float beta) {
    int kind = g->kind, M = g->M, N = g->N, K = g->K;
    if (M <= 0 || N <= 0 || K <= 0) {
        if (M < 0 || N < 0 || K < 0)
            gt_backend_fail(b, GT_ERR_INVALID, "%s: negative shape M=%d N=%d K=%d",
                            gemm_names[kind], M, N, K);
        return;
    }
    gt_cuda_gemm_plan *p = plan_get(b, g);
    if (!p || b->planning) return;
    gt_cuda_impl *im = b->impl;
    if (!im->lt_ws) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: plan_finish was not called after planning",
                        gemm_names[kind]);
        return;
    }
    uintptr_t bits = align_of(align_of(align_of(align_of(align_of(0, A), B), C), D), bias);
    if (g->count > 1) /* every GEMM of the batch starts that many bytes further on */
        bits |= (uintptr_t)(g->sa * 2) | (uintptr_t)(g->sb * 2) |
                (uintptr_t)(g->sc * (kind == GEMM_BWD_WEIGHT ? 4 : 2));
    int slot = (bits & (GT_LT_ALIGN_HI - 1)) == 0 ? 0 : 1;
    if (!p->has_algo[slot]) slot = 1 - slot;
    if (slot == 0 && (bits & (GT_LT_ALIGN_HI - 1))) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s M=%d N=%d K=%d: pointers are not 256-byte aligned and cuBLASLt has "
                        "no algorithm for unaligned operands",
                        gemm_names[kind], M, N, K);
        return;
    }
    if (bias)
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias);
    float alpha = 1.0f;
    cudaStream_t cs = gt_cuda_stream(s);
    int tuned = s && !s->capturing ? tune_begin_launch(im, p, slot, cs) : -1;
    const cublasLtMatmulAlgo_t *algo = tuned >= 0 ? &p->cand[tuned] : &p->algo[slot];
    cublasStatus_t st =
        cublasLtMatmul((cublasLtHandle_t)im->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, C,
                       p->lc, D, p->lc, algo, im->lt_ws, im->lt_ws_bytes, cs);
    if (tuned >= 0) tune_end_launch(im, cs);
    if (st != CUBLAS_STATUS_SUCCESS)
        gt_backend_fail(b, GT_ERR_DEVICE,
                        "cublasLtMatmul (%s M=%d N=%d K=%d, batch of %d) failed: status %d",
                        gemm_names[kind], M, N, K, g->count, (int)st);
}

static void gemm_run(gt_backend *b, gt_stream *s, int kind, int M, int N, int K, const void *A,
                     const void *B, const void *C, void *D, const void *bias, float beta) {
    gemm_shape g = {kind, M, N, K, 1, 0, 0, 0};
    gemm_launch(b, s, &g, A, B, C, D, bias, beta);
}

static void cuda_matmul_fwd(gt_backend *b, gt_stream *s, void *out, const void *a, const void *w,
                            const void *bias, const void *res, int M, int N, int K) {
    if (res && res == out) {
        gt_backend_fail(b, GT_ERR_INVALID, "matmul_fwd: res must not alias out (M=%d N=%d K=%d)", M,
                        N, K);
        return;
    }
    /* the residual rides in as C with beta 1: the same plan, one pass over the output */
    gemm_run(b, s, bias ? GEMM_FWD_BIAS : GEMM_FWD, M, N, K, w, a, res ? res : out, out, bias,
             res ? 1.0f : 0.0f);
}

static void cuda_matmul_bwd_data(gt_backend *b, gt_stream *s, void *da, const void *dout,
                                 const void *w, int M, int N, int K, int accumulate) {
    gemm_run(b, s, accumulate ? GEMM_BWD_DATA_ACC : GEMM_BWD_DATA, M, N, K, w, dout, da, da, NULL,
             accumulate ? 1.0f : 0.0f);
}

static void cuda_matmul_bwd_weight(gt_backend *b, gt_stream *s, float *dw, float *dbias,
                                   const void *dout, const void *a, int M, int N, int K,
                                   int accumulate) {
    /* one plan for both: overwriting (beta 0, C not read) and accumulating use the same
     * algorithm, so a step's first micro-batch sums exactly like the others */
    gemm_run(b, s, GEMM_BWD_WEIGHT, M, N, K, a, dout, dw, dw, NULL, accumulate ? 1.0f : 0.0f);
    if (dbias) gt_cuda_dbias(b, s, dbias, dout, M, N, accumulate);
}

/* The blockwise GEMM's kind, or -1 with the error set: the shapes and operands cuBLASLt's
 * block-scaled GEMMs take on sm_90 (K tiles of 128 whole, the tile-scaled operands' rows a
 * multiple of 4 so that their scale rows need no padding, w blocks with a's tiles or tiles with
 * tiles into fp32) */
static int blockwise_kind(gt_backend *b, int f32, int accumulate, gt_fp8_operand a,
                          gt_fp8_operand w, const void *bias, const void *res, int M, int N,
                          int K) {
    int e5 = a.format == GT_FP8_E5M2;
    int shape_ok = K % GT_FP8_TILE == 0 && M % 4 == 0 && (w.tile_rows != 1 || N % 4 == 0);
    int kind = -1;
    if (a.tile_rows == 1 && w.tile_rows == GT_FP8_TILE && !f32)
        kind = bias ? GEMM_FP8_BLK_BIAS : e5 ? GEMM_FP8_BLK_B_E5M2 : GEMM_FP8_BLK;
    else if (a.tile_rows == 1 && w.tile_rows == 1 && f32 && !bias && !res)
        kind = e5 ? GEMM_FP8_VEC_F32_B_E5M2 : GEMM_FP8_VEC_F32;
    if (kind < 0 || !shape_ok || (bias && (e5 || accumulate))) {
        gt_backend_fail(b, GT_ERR_UNSUPPORTED,
                        "fp8_gemm M=%d N=%d K=%d (blockwise, a tiles of %d rows, w of %d): the "
                        "CUDA backend's block-scaled GEMMs take K a multiple of %d, M (and N "
                        "where w has 1 x %d tiles) a multiple of 4, w in 128 x 128 blocks into "
                        "bf16 (a bias only with E4M3 a, not accumulating) or w in 1 x 128 tiles "
                        "into fp32; make the layer sizes and tokens per micro-batch multiples "
                        "of %d (the config rule says which) or use -c fp8_cs",
                        M, N, K, a.tile_rows, w.tile_rows, GT_FP8_TILE, GT_FP8_TILE, GT_FP8_TILE);
        return -1;
    }
    return kind;
}

/* out[M,N] (+)= (sa sw) a[M,K] w[N,K]^T (+ res), a and w fp8 with their inverse scales in
 * device memory: cuBLASLt's D = alpha scaleA scaleB (A B) + beta C with A = w, B = a. The scale
 * pointers are set on the plan's descriptor right before each launch (the launch, or the
 * graph capturing it, takes them then). Per-tensor scales, or blockwise (blockwise_kind). */
static void cuda_fp8_gemm(gt_backend *b, gt_stream *s, void *out, int out_fp32, int accumulate,
                          gt_fp8_operand a, gt_fp8_operand w, gt_fp8_scaling scaling,
                          const void *bias, const void *res, int M, int N, int K) {
    /* out_fp32 is a flags word (GT_FP8_OUT_FP32, GT_FP8_FAST_ACCUM): the forward's fast
     * accumulation flag does not make a bias GEMM an fp32 one */
    if (w.format != GT_FP8_E4M3 ||
        (bias && ((out_fp32 & GT_FP8_OUT_FP32) || accumulate || a.format != GT_FP8_E4M3)) ||
        (res && (res == out || accumulate))) {
        gt_backend_fail(b, GT_ERR_UNSUPPORTED,
                        "fp8_gemm M=%d N=%d K=%d: the CUDA backend runs an E4M3 weight operand, "
                        "a bias only on a forward (E4M3 x E4M3 into bf16, not accumulating), and "
                        "res (not aliasing out) without accumulate",
                        M, N, K);
        return;
    }
    if (M == 0) return;
    int e5 = a.format == GT_FP8_E5M2, f32 = (out_fp32 & GT_FP8_OUT_FP32) != 0;
    int kind;
    if (scaling == GT_FP8_BLOCKWISE) {
        kind = blockwise_kind(b, f32, accumulate, a, w, bias, res, M, N, K);
        if (kind < 0) return;
    } else {
        /* fast accumulation is a permission; it is planned for the forward's kind only */
        int fast = (out_fp32 & GT_FP8_FAST_ACCUM) && !f32 && !e5;
        kind = f32    ? (e5 ? GEMM_FP8_F32_B_E5M2 : GEMM_FP8_F32)
               : fast ? GEMM_FP8_FAST
               : e5   ? GEMM_FP8_B_E5M2
                      : GEMM_FP8;
        if (bias) kind = GEMM_FP8_BIAS;
    }
    gemm_shape g = {kind, M, N, K, 1, 0, 0, 0};
    if (M > 0 && N > 0 && K > 0 && !b->planning) {
        gt_cuda_gemm_plan *p = plan_get(b, &g);
        if (!p) return;
        const void *sa = w.scale_inv, *sb = a.scale_inv;
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
                                       sizeof sa);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
                                       sizeof sb);
    }
    gemm_launch(b, s, &g, w.q, a.q, res ? res : out, out, bias, res || accumulate ? 1.0f : 0.0f);
}

/* One batched GEMM where a single weight gradient leaves much of the GPU idle: fewer 128 x 128
 * tiles of dw than one and a half waves of the SMs. There, strided-batched cuBLASLt ran the
 * layers' weight gradients 13-68% faster than one GEMM a layer (gpt124m, tiny and moe shapes;
 * dev/cuda/wgrad_batch.cu). Larger ones go one by one: llama1b's batched gate/up
 * weight gradients measured 10% slower. */
static int batch_pays(const gt_cuda_impl *im, int N, int K) {
    int64_t tiles = (int64_t)((N + 127) / 128) * ((K + 127) / 128);
    return 2 * tiles < 3 * (int64_t)(im->sm_count > 0 ? im->sm_count : 1);
}

static void cuda_matmul_bwd_weight_batched(gt_backend *b, gt_stream *s, float *dw,
                                           int64_t dw_stride, const void *dout, int64_t dout_stride,
                                           const void *a, int64_t a_stride, int M, int N, int K,
                                           int count, int accumulate) {
    if (count < 1 || (count > 1 && (dw_stride <= 0 || dout_stride <= 0 || a_stride <= 0))) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "matmul_bwd_weight_batched: count %d with strides %lld, %lld, %lld (count "
                        "must be >= 1 and the strides > 0)",
                        count, (long long)dw_stride, (long long)dout_stride, (long long)a_stride);
        return;
    }
    if (count == 1 || !batch_pays(b->impl, N, K)) {
        for (int i = 0; i < count; i++)
            cuda_matmul_bwd_weight(b, s, dw + i * dw_stride, NULL,
                                   (const uint16_t *)dout + i * dout_stride,
                                   (const uint16_t *)a + i * a_stride, M, N, K, accumulate);
        return;
    }
    gemm_shape g = {GEMM_BWD_WEIGHT, M, N, K, count, a_stride, dout_stride, dw_stride};
    gemm_launch(b, s, &g, a, dout, dw, dw, NULL, accumulate ? 1.0f : 0.0f);
}

/* ---- the algorithm table and graphtrain tune-gemm ---- */

static void table_header(gt_backend *b, gt_gemm_table *t) {
    gt_cuda_impl *im = b->impl;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, im->device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(prop.name, sizeof prop.name, "CUDA device %d", im->device);
    }
    snprintf(t->device, sizeof t->device, "%s (%d SMs)", prop.name, im->sm_count);
    t->cublaslt = (long)cublasLtGetVersion();
}

static int cuda_gemm_table_set(gt_backend *b, const gt_gemm_table *t, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    if (im->n_plans)
        return gt_error_set(err, GT_ERR_INVALID,
                            "runtime.gemm_table: set after %d GEMMs were planned; set it before "
                            "the planning pass",
                            im->n_plans);
    gt_gemm_table here = {0};
    table_header(b, &here);
    if (strcmp(here.device, t->device) != 0 || here.cublaslt != t->cublaslt) {
        fprintf(stderr,
                "graphtrain: warning: runtime.gemm_table was made on %s with cuBLASLt %ld; this "
                "is %s with cuBLASLt %ld, where its algorithms may differ or not exist: every "
                "GEMM runs cuBLASLt's heuristic choice (make a table for this machine with "
                "graphtrain tune-gemm)\n",
                t->device, t->cublaslt, here.device, here.cublaslt);
        im->gemm_table_mismatch = 1;
        return GT_OK;
    }
    gt_gemm_table *copy = calloc(1, sizeof *copy);
    if (!copy) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the GEMM table");
    *copy = *t;
    copy->e = NULL;
    copy->n = 0;
    for (int i = 0; i < t->n; i++) {
        int rc = gt_gemm_table_put(copy, &t->e[i], err);
        if (rc != GT_OK) {
            gt_gemm_table_free(copy);
            free(copy);
            return rc;
        }
    }
    if (im->gemm_table) {
        gt_gemm_table_free(im->gemm_table);
        free(im->gemm_table);
    }
    im->gemm_table = copy;
    return GT_OK;
}

static int cuda_gemm_plans(gt_backend *b) {
    return ((gt_cuda_impl *)b->impl)->n_plans;
}

static int cuda_gemm_plan_get(gt_backend *b, int i, gt_gemm_entry *e, int *n_cand, int *choice) {
    gt_cuda_impl *im = b->impl;
    if (i < 0 || i >= im->n_plans) return 0;
    gt_cuda_gemm_plan *p = &im->plans[i];
    memset(e, 0, sizeof *e);
    shape_key(p, &e->key);
    memcpy(e->algo, p->algo[0].data, sizeof e->algo);
    if (n_cand) *n_cand = p->n_cand;
    if (choice) *choice = p->choice;
    return p->has_algo[0];
}

static int cuda_gemm_choose(gt_backend *b, int i, int cand, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    if (i < 0 || i >= im->n_plans || cand < 0 || cand >= im->plans[i].n_cand)
        return gt_error_set(err, GT_ERR_INVALID,
                            "gemm_choose: plan %d candidate %d does not exist (%d plans)", i, cand,
                            im->n_plans);
    gt_cuda_gemm_plan *p = &im->plans[i];
    p->algo[0] = p->cand[cand];
    p->choice = cand;
    return GT_OK;
}

static int cuda_gemm_tune(gt_backend *b, int plan, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    if (plan >= im->n_plans || plan < -1)
        return gt_error_set(err, GT_ERR_INVALID, "gemm_tune: plan %d does not exist (%d plans)",
                            plan, im->n_plans);
    gt_cuda_gemm_tune *t = im->gemm_tune;
    if (!t && plan >= 0) {
        t = calloc(1, sizeof *t);
        if (!t) return gt_error_set(err, GT_ERR_NOMEM, "gemm_tune: out of host memory");
        for (int i = 0; i < 2 * TUNE_PAIRS; i++)
            if (cudaEventCreate(&t->ev[i]) != cudaSuccess) {
                cudaGetLastError();
                for (int j = 0; j < i; j++)
                    cudaEventDestroy(t->ev[j]);
                free(t);
                return gt_error_set(err, GT_ERR_DEVICE, "gemm_tune: cudaEventCreate failed");
            }
        im->gemm_tune = t;
    }
    if (!t) return GT_OK;
    t->plan = plan;
    t->next = 0;
    t->pairs = 0;
    memset(t->n_samples, 0, sizeof t->n_samples);
    return GT_OK;
}

static int cuda_gemm_tune_read(gt_backend *b, double *median_us, int *count, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    gt_cuda_gemm_tune *t = im->gemm_tune;
    if (!t || t->plan < 0)
        return gt_error_set(err, GT_ERR_INVALID, "gemm_tune_read: no plan is being timed");
    for (int i = 0; i < t->pairs; i++) {
        float ms = 0;
        cudaError_t e = cudaEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return gt_error_set(err, GT_ERR_DEVICE,
                                "gemm_tune_read: %s (synchronize the stream first)",
                                cudaGetErrorString(e));
        }
        int c = t->pair_cand[i];
        if (t->n_samples[c] < TUNE_SAMPLES) t->samples[c][t->n_samples[c]++] = ms * 1000.0f;
    }
    t->pairs = 0;
    int n_cand = im->plans[t->plan].n_cand;
    for (int c = 0; c < GT_LT_CANDIDATES; c++) {
        int n = c < n_cand ? t->n_samples[c] : 0;
        count[c] = n;
        median_us[c] = 0;
        if (!n) continue;
        double sorted[TUNE_SAMPLES];
        for (int i = 0; i < n; i++)
            sorted[i] = t->samples[c][i];
        median_us[c] = gt_median(sorted, n);
    }
    return GT_OK;
}

void gt_cuda_gemm_table_describe(gt_backend *b, char *buf, size_t n) {
    gt_cuda_impl *im = b->impl;
    if (im->gemm_table_mismatch)
        snprintf(buf, n, "gemm_table=not for this machine (heuristic)");
    else if (!im->gemm_table)
        snprintf(buf, n, "gemm_table=none (heuristic)");
    else
        snprintf(buf, n, "gemm_table=%d of %d GEMMs%s", im->gemm_table_used, im->n_plans,
                 im->gemm_table_refused ? " (some refused)" : "");
}

void gt_cuda_register_matmul_ops(gt_backend_ops *ops) {
    ops->fp8_gemm = cuda_fp8_gemm;
    ops->gemm_table_set = cuda_gemm_table_set;
    ops->gemm_table_header = table_header;
    ops->gemm_plans = cuda_gemm_plans;
    ops->gemm_plan_get = cuda_gemm_plan_get;
    ops->gemm_choose = cuda_gemm_choose;
    ops->gemm_tune = cuda_gemm_tune;
    ops->gemm_tune_read = cuda_gemm_tune_read;
    ops->gemm_peak = gt_cuda_gemm_peak;
    ops->matmul_fwd = cuda_matmul_fwd;
    ops->matmul_bwd_data = cuda_matmul_bwd_data;
    ops->matmul_bwd_weight = cuda_matmul_bwd_weight;
    ops->matmul_bwd_weight_batched = cuda_matmul_bwd_weight_batched;
}
