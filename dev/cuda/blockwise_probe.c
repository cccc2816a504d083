/* Which block-scaled fp8 GEMM descriptors cuBLASLt offers algorithms for on this GPU, and
 * whether the ones it offers compute what graphtrain's scale layout means. For one shape
 * (out[M,N] = a[M,K] w[N,K]^T, "TN" as the backend spells it: A = w, B = a) it tries every
 * combination of the A/B scale modes (128x128 blocks or 1x128 tiles), the output type,
 * scale pointers set before or only after the heuristic query, the alignment preferences and
 * fast accumulation, prints the heuristic's status and count for each, and runs the first
 * algorithm of each offered one against a host reference of the dequantized product.
 * Usage: blockwise_probe [M N K] (default 256 384 512). */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TILE 128
#define WS_BYTES ((size_t)32 << 20)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* E4M3 code -> float (finite codes only; the inputs below stay finite) */
static float e4m3_value(uint8_t c) {
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    float v = e ? ldexpf(1.0f + (float)m / 8.0f, e - 7) : ldexpf((float)m / 8.0f, -6);
    return s ? -v : v;
}

/* Scales of one operand [rows, K] in the backend's layout (gt_fp8_scale_index): 1x128 tiles
 * rows-major with the row count padded to 4, or 128x128 blocks K-major with the tile count
 * padded to 4. */
static size_t scale_ld(int rows, int K, int blk) {
    size_t n = blk ? (size_t)((K + TILE - 1) / TILE) : (size_t)rows;
    return (n + 3) / 4 * 4;
}
static size_t scale_index(int rows, int K, int blk, int r, int t) {
    size_t ld = scale_ld(rows, K, blk);
    return blk ? (size_t)(r / TILE) * ld + (size_t)t : (size_t)t * ld + (size_t)r;
}
static size_t scale_count(int rows, int K, int blk) {
    size_t ld = scale_ld(rows, K, blk);
    return blk ? (size_t)((rows + TILE - 1) / TILE) * ld : (size_t)((K + TILE - 1) / TILE) * ld;
}

/* Random codes and random positive scales of one operand, and its dequantized values */
static void make_operand(int rows, int K, int blk, uint8_t *q, float *s, float *deq) {
    for (size_t i = 0; i < (size_t)rows * K; i++) {
        uint8_t c;
        do
            c = (uint8_t)(rng = rng * 6364136223846793005ull + 1442695040888963407ull, rng >> 56);
        while (((c >> 3) & 15) == 15); /* keep away from NaN / the top binade */
        q[i] = c;
    }
    size_t n = scale_count(rows, K, blk);
    for (size_t i = 0; i < n; i++)
        s[i] = 0.25f + 0.75f * fabsf(uniform());
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < K; k++)
            deq[(size_t)r * K + k] =
                e4m3_value(q[(size_t)r * K + k]) * s[scale_index(rows, K, blk, r, k / TILE)];
}

typedef struct variant {
    int a_blk, b_blk; /* A (= w) and B (= a) in 128x128 blocks, else 1x128 tiles */
    int d_fp32;       /* out in fp32, else bf16 */
    int ptr_first;    /* scale pointers set before the heuristic query */
    int align;        /* MIN_ALIGNMENT preferences (bytes), 0: none */
    int fast;         /* fast accumulation */
} variant;

int main(int argc, char **argv) {
    int M = argc > 3 ? atoi(argv[1]) : 256, N = argc > 3 ? atoi(argv[2]) : 384;
    int K = argc > 3 ? atoi(argv[3]) : 512;
    if (M <= 0 || N <= 0 || K <= 0 || M % 16 || N % 16 || K % TILE) {
        fprintf(stderr, "blockwise_probe: M and N must be multiples of 16, K of 128\n");
        return 2;
    }
    printf("cuBLASLt version %zu, M=%d N=%d K=%d\n", cublasLtGetVersion(), M, N, K);
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "blockwise_probe: cublasLtCreate failed (no GPU?)\n");
        return 1;
    }
    size_t wn = (size_t)N * K, an = (size_t)M * K;
    size_t ws_max =
        scale_count(N, K, 0) > scale_count(N, K, 1) ? scale_count(N, K, 0) : scale_count(N, K, 1);
    size_t as_max =
        scale_count(M, K, 0) > scale_count(M, K, 1) ? scale_count(M, K, 0) : scale_count(M, K, 1);
    uint8_t *hw = malloc(wn), *ha = malloc(an);
    float *hsw = malloc(ws_max * 4), *hsa = malloc(as_max * 4);
    float *dw = malloc(wn * 4), *da = malloc(an * 4), *ref = malloc((size_t)M * N * 4);
    float *got = malloc((size_t)M * N * 4);
    uint16_t *gotb = malloc((size_t)M * N * 2);
    void *gw, *ga, *gsw, *gsa, *gout, *gws;
    cudaMalloc(&gw, wn);
    cudaMalloc(&ga, an);
    cudaMalloc(&gsw, ws_max * 4);
    cudaMalloc(&gsa, as_max * 4);
    cudaMalloc(&gout, (size_t)M * N * 4);
    cudaMalloc(&gws, WS_BYTES);
    int offered = 0, right = 0;
    for (int v = 0; v < 3 * 2 * 2 * 3 * 2; v++) {
        int x = v;
        variant o;
        int modes = x % 3;
        x /= 3;
        o.a_blk = modes == 0, o.b_blk = modes == 1; /* (blk, tile) (tile, blk) (tile, tile) */
        o.d_fp32 = x % 2, x /= 2;
        o.ptr_first = x % 2, x /= 2;
        o.align = (int[]){0, 16, 256}[x % 3], x /= 3;
        o.fast = x % 2;
        make_operand(N, K, o.a_blk, hw, hsw, dw);
        make_operand(M, K, o.b_blk, ha, hsa, da);
        cudaMemcpy(gw, hw, wn, cudaMemcpyHostToDevice);
        cudaMemcpy(ga, ha, an, cudaMemcpyHostToDevice);
        cudaMemcpy(gsw, hsw, scale_count(N, K, o.a_blk) * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(gsa, hsa, scale_count(M, K, o.b_blk) * 4, cudaMemcpyHostToDevice);
        cublasLtMatmulDesc_t desc;
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
        cublasLtMatmulMatrixScale_t am = o.a_blk ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        cublasLtMatmulMatrixScale_t bm = o.b_blk ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm);
        int8_t fast = (int8_t)o.fast;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
        if (o.ptr_first) {
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &gsw,
                                           sizeof gsw);
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &gsa,
                                           sizeof gsa);
        }
        cudaDataType_t dt = o.d_fp32 ? CUDA_R_32F : CUDA_R_16BF;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)N, K);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)M, K);
        cublasLtMatrixLayoutCreate(&lc, dt, (uint64_t)N, (uint64_t)M, N);
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulPreferenceCreate(&pref);
        size_t wsb = WS_BYTES;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                             sizeof wsb);
        if (o.align) {
            uint32_t al = (uint32_t)o.align;
            cublasLtMatmulPreferenceAttributes_t at[4] = {
                CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
            for (int i = 0; i < 4; i++)
                cublasLtMatmulPreferenceSetAttribute(pref, at[i], &al, sizeof al);
        }
        cublasLtMatmulHeuristicResult_t res[8];
        int found = 0;
        cublasStatus_t st =
            cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, res, &found);
        printf("A=%s B=%s D=%s ptr_first=%d align=%3d fast=%d: heuristic status %d, %d algos",
               o.a_blk ? "blk" : "vec", o.b_blk ? "blk" : "vec", o.d_fp32 ? "f32" : "bf16",
               o.ptr_first, o.align, o.fast, (int)st, found);
        if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
            offered++;
            if (!o.ptr_first) {
                cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &gsw,
                                               sizeof gsw);
                cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &gsa,
                                               sizeof gsa);
            }
            float alpha = 1.0f, beta = 0.0f;
            cublasStatus_t rs = cublasLtMatmul(lt, desc, &alpha, gw, la, ga, lb, &beta, gout, lc,
                                               gout, lc, &res[0].algo, gws, WS_BYTES, 0);
            cudaError_t ce = cudaDeviceSynchronize();
            if (rs != CUBLAS_STATUS_SUCCESS || ce != cudaSuccess) {
                printf("; matmul status %d, cuda %s\n", (int)rs, cudaGetErrorString(ce));
                cudaGetLastError();
            } else {
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        double acc = 0;
                        for (int k = 0; k < K; k++)
                            acc += (double)da[(size_t)m * K + k] * dw[(size_t)n * K + k];
                        ref[(size_t)m * N + n] = (float)acc;
                    }
                if (o.d_fp32) {
                    cudaMemcpy(got, gout, (size_t)M * N * 4, cudaMemcpyDeviceToHost);
                } else {
                    cudaMemcpy(gotb, gout, (size_t)M * N * 2, cudaMemcpyDeviceToHost);
                    for (size_t i = 0; i < (size_t)M * N; i++) {
                        uint32_t u = (uint32_t)gotb[i] << 16;
                        memcpy(&got[i], &u, 4);
                    }
                }
                double num = 0, den = 0;
                for (size_t i = 0; i < (size_t)M * N; i++) {
                    double d = (double)got[i] - ref[i];
                    num += d * d, den += (double)ref[i] * ref[i];
                }
                double rel = sqrt(num / (den > 0 ? den : 1));
                int ok = rel < (o.d_fp32 ? 1e-3 : 1e-2);
                right += ok;
                printf("; relative error %.3g %s\n", rel, ok ? "MATCHES" : "WRONG");
            }
        } else {
            printf("\n");
        }
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(desc);
    }
    printf("blockwise_probe: %d variants offered algorithms, %d of them match the reference\n",
           offered, right);
    cudaFree(gw), cudaFree(ga), cudaFree(gsw), cudaFree(gsa), cudaFree(gout), cudaFree(gws);
    free(hw), free(ha), free(hsw), free(hsa), free(dw), free(da), free(ref), free(got);
    free(gotb);
    cublasLtDestroy(lt);
    return 0;
}
