/* graphtrain tune-gemm --peak: the tensor-core rate one large cuBLASLt GEMM reaches on this
 * GPU, bf16 or fp8 (E4M3 x E4M3, bf16 out, fast accumulation as the fp8 forward runs), for the
 * peak rates of config/gpus.c that MFU divides by. The operands hold random finite values:
 * zeros or constants switch fewer bits and let the clock run higher than training does. */
#include <cublasLt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "core/median.h"

#define PEAK_WARMUP 5
#define PEAK_WS_BYTES ((size_t)32 << 20)

#define PEAK_LT(call, what)                                                                        \
    do {                                                                                           \
        if ((call) != CUBLAS_STATUS_SUCCESS) {                                                     \
            rc = gt_error_set(err, GT_ERR_DEVICE, "gemm_peak: %s failed", what);                   \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
#define PEAK_CU(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            rc = gt_error_set(err, GT_ERR_DEVICE, "gemm_peak: %s: %s", #call,                      \
                              cudaGetErrorString(e_));                                             \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* bytes of random finite values: fp8 E4M3 codes below 0x7f in magnitude, bf16 with a small
 * exponent */
static void random_fill(uint8_t *h, size_t bytes, int fp8) {
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < bytes; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        uint8_t v = (uint8_t)(x >> 24);
        if (fp8)
            h[i] = (uint8_t)(v & 0xbf); /* exponent below the top: finite, at most 240 */
        else
            h[i] = i % 2 ? (uint8_t)(0x3c | (v & 0x81)) : v; /* |x| in [2^-7, 2^-5] */
    }
}

int gt_cuda_gemm_peak(gt_backend *b, int fp8, int n, int reps, double *flops_per_s, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    if (n < 256 || n % 256 || reps < 3 || reps > 1000 || !flops_per_s)
        return gt_error_set(err, GT_ERR_INVALID,
                            "gemm_peak: n must be a multiple of 256 (got %d), reps 3 to 1000 (got "
                            "%d)",
                            n, reps);
    int rc = GT_OK;
    size_t in_elem = fp8 ? 1 : 2, nn = (size_t)n * n;
    void *A = NULL, *B = NULL, *D = NULL, *ws = NULL;
    uint8_t *h = NULL;
    float *ms = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    cudaStream_t cs = NULL;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    PEAK_CU(cudaSetDevice(im->device));
    PEAK_CU(cudaStreamCreate(&cs));
    PEAK_CU(cudaMalloc(&A, nn * in_elem));
    PEAK_CU(cudaMalloc(&B, nn * in_elem));
    PEAK_CU(cudaMalloc(&D, nn * 2));
    PEAK_CU(cudaMalloc(&ws, PEAK_WS_BYTES));
    h = malloc(nn * in_elem);
    ms = malloc((size_t)reps * sizeof *ms);
    if (!h || !ms) {
        rc = gt_error_set(err, GT_ERR_NOMEM, "gemm_peak: out of host memory");
        goto done;
    }
    random_fill(h, nn * in_elem, fp8);
    PEAK_CU(cudaMemcpy(A, h, nn * in_elem, cudaMemcpyHostToDevice));
    PEAK_CU(cudaMemcpy(B, h, nn * in_elem, cudaMemcpyHostToDevice));
    cudaDataType_t t = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    /* "TN" as every graphtrain GEMM: both operands K-contiguous */
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    PEAK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (fp8) {
        int8_t fast = 1;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
    }
    PEAK_LT(cublasLtMatrixLayoutCreate(&la, t, n, n, n), "MatrixLayoutCreate");
    PEAK_LT(cublasLtMatrixLayoutCreate(&lb, t, n, n, n), "MatrixLayoutCreate");
    PEAK_LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, n, n), "MatrixLayoutCreate");
    PEAK_LT(cublasLtMatmulPreferenceCreate(&pref), "MatmulPreferenceCreate");
    size_t wsb = PEAK_WS_BYTES;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                         sizeof wsb);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    PEAK_LT(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)im->lt, desc, la, lb, ld, ld, pref, 1,
                                           &res, &found),
            "MatmulAlgoGetHeuristic");
    if (found < 1) {
        rc = gt_error_set(err, GT_ERR_DEVICE, "gemm_peak: cuBLASLt has no %s algorithm for %d^3",
                          fp8 ? "fp8" : "bf16", n);
        goto done;
    }
    PEAK_CU(cudaEventCreate(&ev[0]));
    PEAK_CU(cudaEventCreate(&ev[1]));
    float alpha = 1.0f, beta = 0.0f;
    for (int i = -PEAK_WARMUP; i < reps; i++) {
        if (i >= 0) PEAK_CU(cudaEventRecord(ev[0], cs));
        PEAK_LT(cublasLtMatmul((cublasLtHandle_t)im->lt, desc, &alpha, A, la, B, lb, &beta, D, ld,
                               D, ld, &res.algo, ws, PEAK_WS_BYTES, cs),
                "cublasLtMatmul");
        if (i < 0) continue;
        PEAK_CU(cudaEventRecord(ev[1], cs));
        PEAK_CU(cudaEventSynchronize(ev[1]));
        PEAK_CU(cudaEventElapsedTime(&ms[i], ev[0], ev[1]));
    }
    double sorted[1000];
    for (int i = 0; i < reps; i++)
        sorted[i] = ms[i];
    double med = gt_median(sorted, reps);
    *flops_per_s = 2.0 * (double)n * n * n / (med * 1e-3);
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    cudaFree(A), cudaFree(B), cudaFree(D), cudaFree(ws);
    if (cs) cudaStreamDestroy(cs);
    free(h), free(ms);
    return rc;
}
