/* CPU reference: the bias gradient of an fp8 linear layer (backend.h, bias_grad): column sums
 * of the gradient in blocks of columns, each a double sum over the rows in row order, as
 * matmul_bwd_weight sums its dbias, so a bias gets the same gradient from the same dout under
 * fp8 as under bf16. */
#include "backend/cpu/cpu_ops.h"

#define DBIAS_BLOCK 256

typedef struct dbias_args {
    float *dbias;
    const float *dout;
    int M, N, accumulate;
} dbias_args;

static void k_bias_grad(const void *p) {
    const dbias_args *a = p;
    double acc[DBIAS_BLOCK];
    for (int n0 = 0; n0 < a->N; n0 += DBIAS_BLOCK) {
        int nb = a->N - n0 < DBIAS_BLOCK ? a->N - n0 : DBIAS_BLOCK;
        for (int j = 0; j < nb; j++)
            acc[j] = 0;
        for (int m = 0; m < a->M; m++) {
            const float *dy = a->dout + (size_t)m * a->N + (size_t)n0;
            for (int j = 0; j < nb; j++)
                acc[j] += dy[j];
        }
        for (int j = 0; j < nb; j++)
            a->dbias[n0 + j] = (a->accumulate ? a->dbias[n0 + j] : 0.0f) + (float)acc[j];
    }
}

static void cpu_bias_grad(gt_backend *b, gt_stream *s, float *dbias, const void *dout, int M, int N,
                          int accumulate) {
    CPU_REQUIRE(b, M >= 0 && N > 0, "bias_grad: bad shape M=%d N=%d", M, N);
    CPU_REQUIRE(b, dbias && dout, "bias_grad: NULL tensor");
    dbias_args a = {dbias, dout, M, N, accumulate != 0};
    gt_cpu_submit(b, s, k_bias_grad, &a, sizeof a);
}

void gt_cpu_register_fp8_bias_ops(gt_backend_ops *ops) {
    ops->bias_grad = cpu_bias_grad;
}
