/* CPU reference: the fp8 grouped expert GEMMs (backend.h, "FP8 grouped expert GEMMs"), an exact
 * emulation. The operands hold the float value of each fp8 code (the casts of cpu_fp8.c), so
 * each sum is the fp32 dot product of exact fp8 values, scaled back by the activations' one
 * inverse scale times the expert's own (the data gradient and forward) or by the two tensors'
 * (the weight gradient). Offsets are read when the op runs, as the GPU reads them. */
#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_ops.h"

typedef struct moe_fp8_args {
    float *out;
    gt_fp8_operand a, w;
    const int32_t *offsets;
    int R, E, Nf, K, accumulate;
} moe_fp8_args;

/* the group [*lo, *hi) of expert e, clamped to [0, R] */
static void group_of(const moe_fp8_args *g, int e, int *lo, int *hi) {
    int l = g->offsets[e], h = g->offsets[e + 1];
    *lo = l < 0 ? 0 : l > g->R ? g->R : l;
    *hi = h < *lo ? *lo : h > g->R ? g->R : h;
}

static void k_moe_fp8_matmul(const void *p) {
    const moe_fp8_args *g = p;
    const float *qa = g->a.q, *qw = g->w.q;
    for (int e = 0; e < g->E; e++) {
        int lo, hi;
        group_of(g, e, &lo, &hi);
        float scale = g->a.scale_inv[0] * g->w.scale_inv[e];
        const float *we = qw + (size_t)e * g->Nf * g->K;
        for (int r = lo; r < hi; r++)
            for (int n = 0; n < g->Nf; n++)
                g->out[(size_t)r * g->Nf + n] =
                    gt_cpu_gemm_dot(qa + (size_t)r * g->K, we + (size_t)n * g->K, g->K) * scale;
    }
}

static void k_moe_fp8_matmul_wgrad(const void *p) {
    const moe_fp8_args *g = p;
    const float *qg = g->a.q, *qx = g->w.q;
    float scale = g->a.scale_inv[0] * g->w.scale_inv[0];
    for (int e = 0; e < g->E; e++) {
        int lo, hi;
        group_of(g, e, &lo, &hi);
        float *dwe = g->out + (size_t)e * g->Nf * g->K;
        for (int n = 0; n < g->Nf; n++)
            for (int k = 0; k < g->K; k++) {
                float v = hi > lo ? gt_cpu_gemm_dot(qg + (size_t)n * g->R + lo,
                                                    qx + (size_t)k * g->R + lo, hi - lo) *
                                        scale
                                  : 0.0f;
                size_t o = (size_t)n * g->K + k;
                dwe[o] = g->accumulate ? dwe[o] + v : v;
            }
    }
}

static void cpu_moe_fp8_matmul(gt_backend *b, gt_stream *s, void *out, int flags, gt_fp8_operand a,
                               gt_fp8_operand w, const int32_t *offsets, int R, int E, int Nf,
                               int K) {
    (void)flags; /* the emulation always sums in fp32 */
    CPU_REQUIRE(b, R >= 0 && E > 0 && Nf > 0 && K > 0,
                "moe_fp8_matmul: bad shape R=%d E=%d Nf=%d K=%d", R, E, Nf, K);
    CPU_REQUIRE(b, out && a.q && w.q && a.scale_inv && w.scale_inv && offsets,
                "moe_fp8_matmul: NULL operand");
    moe_fp8_args g = {out, a, w, offsets, R, E, Nf, K, 0};
    gt_cpu_submit(b, s, k_moe_fp8_matmul, &g, sizeof g);
}

static void cpu_moe_fp8_matmul_wgrad(gt_backend *b, gt_stream *s, float *dw, gt_fp8_operand g,
                                     gt_fp8_operand x, const int32_t *offsets, int R, int E, int Nf,
                                     int K, int accumulate) {
    CPU_REQUIRE(b, R >= 0 && E > 0 && Nf > 0 && K > 0,
                "moe_fp8_matmul_wgrad: bad shape R=%d E=%d Nf=%d K=%d", R, E, Nf, K);
    CPU_REQUIRE(b, dw && g.q && x.q && g.scale_inv && x.scale_inv && offsets,
                "moe_fp8_matmul_wgrad: NULL operand");
    moe_fp8_args a = {dw, g, x, offsets, R, E, Nf, K, accumulate != 0};
    gt_cpu_submit(b, s, k_moe_fp8_matmul_wgrad, &a, sizeof a);
}

void gt_cpu_register_moe_fp8_ops(gt_backend_ops *ops) {
    ops->moe_fp8_matmul = cpu_moe_fp8_matmul;
    ops->moe_fp8_matmul_wgrad = cpu_moe_fp8_matmul_wgrad;
}
