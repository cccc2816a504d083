/* CPU reference GEMM: packs operand blocks into stack buffers (ops never allocate) and runs a
 * small register-tile kernel whose loops have constant trip counts, so the compiler vectorizes
 * it without reordering any sum: each SIMD lane owns one output element. Plain C11; with gcc 12
 * on one core this reaches about 45 GFLOP/s at -O3 (Release), 42 at -O2, 1 at -O0. */
#include "backend/cpu/cpu_gemm.h"

#include <string.h>

/* Register tile MR x NR of C (12 four-float accumulators: fits the 16 SSE registers of
 * baseline x86-64); NC columns of B are packed per block (KC * NC floats of stack). */
#define GEMM_MR 3
#define GEMM_NR 16
#define GEMM_NC 128
#define GEMM_KC GT_CPU_GEMM_KC
/* Packed A repeats each element LANE times, so the tile kernel multiplies whole vectors and
 * needs no broadcasts or shuffles (which measured 1.5x slower with gcc). */
#define GEMM_LANE 4
_Static_assert(GEMM_NC % GEMM_NR == 0, "packed B panels must tile the NC block exactly");
_Static_assert(GEMM_MR == 3 && GEMM_NR == 4 * GEMM_LANE, "gemm_tile spells out a 3 x 4 grid");

/* acc[MR*NR] = sum over k < kc of ap[k] (column of A) x bp[k] (row of B), in k order.
 * The 3 x 4 grid of lane groups is written out inside one loop over the lane, and that loop
 * must stay a loop: gcc then vectorizes it as a whole at -O2 and -O3 alike (about 42-45
 * GFLOP/s), while the nested-loop spelling or an unrolled lane loop gave 5-27 GFLOP/s at one
 * level or the other. "GCC unroll" is understood by gcc and clang. */
static void gemm_tile(int kc, const float *restrict ap, const float *restrict bp,
                      float *restrict out) {
    float acc[GEMM_MR * GEMM_NR] = {0};
    for (int k = 0; k < kc; k++) {
        const float *a0 = ap + (size_t)k * GEMM_MR * GEMM_LANE, *a1 = a0 + GEMM_LANE,
                    *a2 = a1 + GEMM_LANE;
        const float *b0 = bp + (size_t)k * GEMM_NR, *b1 = b0 + GEMM_LANE, *b2 = b1 + GEMM_LANE,
                    *b3 = b2 + GEMM_LANE;
        float *c0 = acc, *c1 = acc + GEMM_NR, *c2 = acc + 2 * GEMM_NR;
#pragma GCC unroll 1
        for (int l = 0; l < GEMM_LANE; l++) {
            c0[l] += a0[l] * b0[l];
            c0[GEMM_LANE + l] += a0[l] * b1[l];
            c0[2 * GEMM_LANE + l] += a0[l] * b2[l];
            c0[3 * GEMM_LANE + l] += a0[l] * b3[l];
            c1[l] += a1[l] * b0[l];
            c1[GEMM_LANE + l] += a1[l] * b1[l];
            c1[2 * GEMM_LANE + l] += a1[l] * b2[l];
            c1[3 * GEMM_LANE + l] += a1[l] * b3[l];
            c2[l] += a2[l] * b0[l];
            c2[GEMM_LANE + l] += a2[l] * b1[l];
            c2[2 * GEMM_LANE + l] += a2[l] * b2[l];
            c2[3 * GEMM_LANE + l] += a2[l] * b3[l];
        }
    }
    memcpy(out, acc, sizeof acc);
}

/* B(k0.., n0..) for kc x nc as panels of NR columns: bp[(p*kc + k)*NR + j]; columns past nc
 * are zero. The loop order follows whichever stride is contiguous. */
static void pack_b(const gt_cpu_gemm_args *g, int k0, int kc, int n0, int nc, float *bp) {
    for (int p = 0; p * GEMM_NR < nc; p++) {
        float *dst = bp + (size_t)p * kc * GEMM_NR;
        int nr = nc - p * GEMM_NR < GEMM_NR ? nc - p * GEMM_NR : GEMM_NR;
        const float *src = g->b + (size_t)k0 * g->b_rs + (size_t)(n0 + p * GEMM_NR) * g->b_cs;
        if (nr < GEMM_NR) memset(dst, 0, (size_t)kc * GEMM_NR * sizeof *dst);
        if (g->b_rs == 1) {
            for (int j = 0; j < nr; j++)
                for (int k = 0; k < kc; k++)
                    dst[(size_t)k * GEMM_NR + j] = src[(size_t)j * g->b_cs + (size_t)k];
        } else {
            for (int k = 0; k < kc; k++)
                for (int j = 0; j < nr; j++)
                    dst[(size_t)k * GEMM_NR + j] = src[(size_t)k * g->b_rs + (size_t)j * g->b_cs];
        }
    }
}

/* A(m0.., k0..) for mr x kc, each element repeated GEMM_LANE times: ap[(k*MR + i)*LANE + l];
 * rows past mr are zero. */
static void pack_a(const gt_cpu_gemm_args *g, int m0, int mr, int k0, int kc, float *ap) {
    const float *src = g->a + (size_t)m0 * g->a_rs + (size_t)k0 * g->a_cs;
    if (mr < GEMM_MR) memset(ap, 0, (size_t)kc * GEMM_MR * GEMM_LANE * sizeof *ap);
    if (g->a_cs == 1) {
        for (int i = 0; i < mr; i++)
            for (int k = 0; k < kc; k++) {
                float v = src[(size_t)i * g->a_rs + (size_t)k];
                for (int l = 0; l < GEMM_LANE; l++)
                    ap[((size_t)k * GEMM_MR + i) * GEMM_LANE + l] = v;
            }
    } else {
        for (int k = 0; k < kc; k++)
            for (int i = 0; i < mr; i++) {
                float v = src[(size_t)i * g->a_rs + (size_t)k * g->a_cs];
                for (int l = 0; l < GEMM_LANE; l++)
                    ap[((size_t)k * GEMM_MR + i) * GEMM_LANE + l] = v;
            }
    }
}

static float base_of(const gt_cpu_gemm_args *g, const float *cij, int n) {
    float base = g->accumulate ? *cij : 0.0f;
    return g->bias ? base + g->bias[n] : base;
}

/* Adds a finished tile to C: the first k block starts from base, later ones add on. */
static void store_tile(const gt_cpu_gemm_args *g, const float *tile, int m0, int mr, int n0, int nr,
                       int first) {
    for (int i = 0; i < mr; i++) {
        float *crow = g->c + (size_t)(m0 + i) * g->ldc + (size_t)n0;
        const float *t = tile + i * GEMM_NR;
        if (first) {
            for (int j = 0; j < nr; j++)
                crow[j] = base_of(g, &crow[j], n0 + j) + t[j];
        } else {
            for (int j = 0; j < nr; j++)
                crow[j] += t[j];
        }
    }
}

void gt_cpu_gemm_run(const gt_cpu_gemm_args *g) {
    float bpack[GEMM_KC * GEMM_NC];
    float apack[GEMM_KC * GEMM_MR * GEMM_LANE];
    float tile[GEMM_MR * GEMM_NR];
    if (g->M <= 0 || g->N <= 0) return;
    if (g->K <= 0) {
        for (int m = 0; m < g->M; m++)
            for (int n = 0; n < g->N; n++) {
                float *cij = g->c + (size_t)m * g->ldc + (size_t)n;
                *cij = base_of(g, cij, n);
            }
        return;
    }
    for (int k0 = 0; k0 < g->K; k0 += GEMM_KC) {
        int kc = g->K - k0 < GEMM_KC ? g->K - k0 : GEMM_KC;
        for (int n0 = 0; n0 < g->N; n0 += GEMM_NC) {
            int nc = g->N - n0 < GEMM_NC ? g->N - n0 : GEMM_NC;
            pack_b(g, k0, kc, n0, nc, bpack);
            for (int m0 = 0; m0 < g->M; m0 += GEMM_MR) {
                int mr = g->M - m0 < GEMM_MR ? g->M - m0 : GEMM_MR;
                pack_a(g, m0, mr, k0, kc, apack);
                for (int p = 0; p * GEMM_NR < nc; p++) {
                    int nr = nc - p * GEMM_NR < GEMM_NR ? nc - p * GEMM_NR : GEMM_NR;
                    gemm_tile(kc, apack, bpack + (size_t)p * kc * GEMM_NR, tile);
                    store_tile(g, tile, m0, mr, n0 + p * GEMM_NR, nr, k0 == 0);
                }
            }
        }
    }
}
