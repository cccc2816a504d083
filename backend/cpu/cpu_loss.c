/* CPU reference: cross entropy (numerically stable softmax with fp32 exps and double row sums,
 * ignored targets) and the accumulation of per-token losses into the step state, summed in a
 * fixed order. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

typedef struct ce_args {
    gt_backend *b;
    float *losses;       /* [N] */
    float *dlogits;      /* [N,V], may alias logits, may be NULL (loss only) */
    const float *logits; /* [N,V] */
    const int32_t *targets;
    int N, V;
    float dscale;
} ce_args;

static void k_cross_entropy(const void *p) {
    const ce_args *a = p;
    for (int n = 0; n < a->N; n++) {
        const float *x = a->logits + (size_t)n * a->V;
        float *dx = a->dlogits ? a->dlogits + (size_t)n * a->V : NULL;
        int32_t t = a->targets[n];
        if (t >= a->V) {
            gt_backend_fail(a->b, GT_ERR_INVALID,
                            "cross_entropy: target %d at position %d is outside the vocabulary "
                            "[0, %d); check the data against model.vocab_size",
                            (int)t, n, a->V);
            t = -1;
        }
        if (t < 0) { /* ignored position */
            a->losses[n] = 0;
            if (dx) memset(dx, 0, (size_t)a->V * sizeof *dx);
            continue;
        }
        float mx = x[0];
        for (int v = 1; v < a->V; v++)
            if (x[v] > mx) mx = x[v];
        double sum = 0; /* fp32 exps, summed in double in vocabulary order */
        for (int v = 0; v < a->V; v++)
            sum += expf(x[v] - mx);
        // cppcheck-suppress invalidFunctionArg ; V >= 1 (validated): the max term adds 1
        double lse = (double)mx + log(sum);
        a->losses[n] = (float)(lse - (double)x[t]);
        if (!dx) continue;
        /* x[t] is read before the loop reaches it: dx may alias x */
        float lse_f = (float)lse, xt_prob = expf(x[t] - lse_f);
        for (int v = 0; v < a->V; v++)
            dx[v] = expf(x[v] - lse_f) * a->dscale;
        dx[t] = (xt_prob - 1.0f) * a->dscale;
    }
}

static void cpu_cross_entropy(gt_backend *b, gt_stream *s, float *losses, void *dlogits,
                              const void *logits, const int32_t *targets, int N, int V,
                              float dscale) {
    CPU_REQUIRE(b, N >= 0 && V > 0, "cross_entropy: bad shape N=%d V=%d", N, V);
    ce_args a = {b, losses, dlogits, logits, targets, N, V, dscale};
    gt_cpu_submit(b, s, k_cross_entropy, &a, sizeof a);
}

typedef struct lacc_args {
    gt_step_state *st;
    const float *losses;
    int N;
    float scale;
} lacc_args;

static void k_loss_accumulate(const void *p) {
    const lacc_args *a = p;
    double sum = 0;
    for (int n = 0; n < a->N; n++)
        sum += a->losses[n];
    a->st->loss += (float)((double)a->scale * sum);
}

static void cpu_loss_accumulate(gt_backend *b, gt_stream *s, gt_step_state *st, const float *losses,
                                int N, float scale) {
    CPU_REQUIRE(b, N >= 0 && st, "loss_accumulate: bad arguments N=%d st=%p", N, (void *)st);
    lacc_args a = {st, losses, N, scale};
    gt_cpu_submit(b, s, k_loss_accumulate, &a, sizeof a);
}

void gt_cpu_register_loss_ops(gt_backend_ops *ops) {
    ops->cross_entropy = cpu_cross_entropy;
    ops->loss_accumulate = cpu_loss_accumulate;
}
