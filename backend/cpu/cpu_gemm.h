/* CPU reference: the one blocked fp32 GEMM behind matmul, the grouped MoE matmuls, and the
 * fixed-order dot product attention uses. Operands are described by strides, so transposed
 * uses need no copies; the summation order depends only on the shape, never on the data or
 * the machine, so results are bitwise reproducible. */
#ifndef GT_BACKEND_CPU_CPU_GEMM_H
#define GT_BACKEND_CPU_CPU_GEMM_H

#include <stddef.h>

/* C(m,n) = base(m,n) + sum_k A(m,k) B(k,n) for m < M, n < N, where
 * A(m,k) = a[m*a_rs + k*a_cs], B(k,n) = b[k*b_rs + n*b_cs], C(m,n) = c[m*ldc + n], and
 * base = (accumulate ? C(m,n) : 0) + (bias ? bias[n] : 0). With K == 0, C = base.
 * The k sum runs in blocks of GT_CPU_GEMM_KC: each block is summed in fp32 in k order from
 * zero and the block sums are added to base in block order. c must not overlap a or b. */
typedef struct gt_cpu_gemm_args {
    float *c; /* [M, ldc] */
    size_t ldc;
    const float *a;
    size_t a_rs, a_cs;
    const float *b;
    size_t b_rs, b_cs;
    const float *bias; /* [N] or NULL */
    int M, N, K;
    int accumulate;
} gt_cpu_gemm_args;

/* Reduction block: a shape constant, so part of the (fixed) summation order. */
#define GT_CPU_GEMM_KC 128

void gt_cpu_gemm_run(const gt_cpu_gemm_args *g);

/* sum_i x[i] y[i] in fp32: eight interleaved partial sums (i mod 8), added pairwise at the
 * end, then the tail in order. Vectorizes without reassociation; the order is fixed by n.
 * Inline: attention calls it per (query, key) pair on head-sized rows. */
static inline float gt_cpu_gemm_dot(const float *x, const float *y, int n) {
    float part[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            part[l] += x[i + l] * y[i + l];
    float s =
        ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    for (; i < n; i++)
        s += x[i] * y[i];
    return s;
}

/* y[i] += alpha x[i] */
static inline void gt_cpu_gemm_axpy(float *y, float alpha, const float *x, int n) {
    for (int i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

#endif
