/* CPU reference: MoE router. Softmax probabilities, top-k with ties to the lower expert,
 * renormalized weights (or, pre-softmax, the probabilities themselves) times the scale,
 * per-expert counts, the Switch-style aux loss, and the backward through the scale,
 * renormalization, the aux loss and the softmax. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

typedef struct router_args {
    gt_backend *b;
    float *probs;         /* [N,E] fwd out / bwd in */
    int32_t *topk_idx;    /* [N,k] */
    float *topk_w;        /* [N,k] */
    int32_t *counts;      /* [E] */
    const float *logits;  /* fwd: [N,E] */
    float *dlogits;       /* bwd: [N,E] */
    const float *dtopk_w; /* bwd: [N,k] */
    gt_step_state *st;    /* aux loss */
    int N, E, k;
    float coeff;
    gt_router_mode mode;
} router_args;

static void k_router_fwd(const void *p) {
    const router_args *a = p;
    memset(a->counts, 0, (size_t)a->E * sizeof *a->counts);
    for (int n = 0; n < a->N; n++) {
        const float *x = a->logits + (size_t)n * a->E;
        float *pr = a->probs + (size_t)n * a->E;
        double mx = x[0], sum = 0;
        for (int e = 1; e < a->E; e++)
            if (x[e] > mx) mx = x[e];
        for (int e = 0; e < a->E; e++)
            sum += exp((double)x[e] - mx);
        for (int e = 0; e < a->E; e++)
            pr[e] = (float)(exp((double)x[e] - mx) / sum);
        int32_t *idx = a->topk_idx + (size_t)n * a->k;
        float *w = a->topk_w + (size_t)n * a->k;
        double tot = 0;
        for (int j = 0; j < a->k; j++) {
            /* strict > scanning upward: among equal probabilities the lower expert wins */
            int best = -1;
            for (int e = 0; e < a->E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++)
                    taken |= idx[i] == e;
                if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
            }
            idx[j] = best;
            tot += pr[best];
            a->counts[best]++;
        }
        if (a->mode.pre_softmax) tot = 1.0;
        for (int j = 0; j < a->k; j++)
            w[j] = (float)((double)a->mode.scale * (pr[idx[j]] / tot));
    }
}

static void cpu_moe_router_fwd(gt_backend *b, gt_stream *s, float *probs, int32_t *topk_idx,
                               float *topk_w, int32_t *counts, const void *logits, int N, int E,
                               int k, gt_router_mode mode) {
    CPU_REQUIRE(b, N >= 0 && E > 0 && k > 0 && k <= E,
                "moe_router_fwd: bad shape N=%d E=%d k=%d; need 1 <= k (moe_router_topk) <= "
                "E (num_moe_experts)",
                N, E, k);
    router_args a = {b,    probs, topk_idx, topk_w, counts, logits, NULL,
                     NULL, NULL,  N,        E,      k,      0,      mode};
    gt_cpu_submit(b, s, k_router_fwd, &a, sizeof a);
}

/* aux = coeff * E * sum_e f_e * P_e with f_e = counts[e] / (N k), P_e = mean_n probs[n,e] */
static void k_aux_loss(const void *p) {
    const router_args *a = p;
    if (a->N == 0) return;
    double tot = 0;
    for (int e = 0; e < a->E; e++) {
        double pm = 0;
        for (int n = 0; n < a->N; n++)
            pm += a->probs[(size_t)n * a->E + e];
        tot += (double)a->counts[e] / ((double)a->N * a->k) * (pm / a->N);
    }
    a->st->aux_loss += (float)((double)a->coeff * a->E * tot);
}

static void cpu_moe_aux_loss(gt_backend *b, gt_stream *s, gt_step_state *st, const float *probs,
                             const int32_t *counts, int N, int E, int k, float coeff) {
    CPU_REQUIRE(b, st && N >= 0 && E > 0 && k > 0 && k <= E,
                "moe_aux_loss: bad arguments N=%d E=%d k=%d", N, E, k);
    router_args a = {
        b, (float *)probs, NULL,     NULL, (int32_t *)counts, NULL, NULL, NULL, st, N, E,
        k, coeff,          {0, 1.0f}};
    gt_cpu_submit(b, s, k_aux_loss, &a, sizeof a);
}

/* w_j = c p_{s_j} / Z, Z = sum_i p_{s_i}:  dL/dp_{s_j} = (c dw_j - sum_i dw_i w_i) / Z;
 * pre-softmax, w_j = c p_{s_j}: dL/dp_{s_j} = c dw_j;
 * the aux loss adds coeff * E * f_e / N to every dL/dp[n,e] (f_e taken as constant, as in
 * Switch); then the softmax backward dlogit_e = p_e (dp_e - sum_i p_i dp_i).
 * dlogits is written only after the row is fully read, so the row's dp lives in dlogits. */
static void k_router_bwd(const void *p) {
    const router_args *a = p;
    for (int n = 0; n < a->N; n++) {
        const float *pr = a->probs + (size_t)n * a->E;
        const int32_t *idx = a->topk_idx + (size_t)n * a->k;
        const float *w = a->topk_w + (size_t)n * a->k, *dw = a->dtopk_w + (size_t)n * a->k;
        float *dl = a->dlogits + (size_t)n * a->E;
        double z = 0, wdw = 0;
        for (int j = 0; j < a->k; j++) {
            z += pr[idx[j]];
            wdw += (double)dw[j] * w[j];
        }
        for (int e = 0; e < a->E; e++) {
            double aux = a->coeff != 0 ? (double)a->coeff * a->E *
                                             ((double)a->counts[e] / ((double)a->N * a->k)) / a->N
                                       : 0.0;
            dl[e] = (float)aux;
        }
        double c = a->mode.scale;
        for (int j = 0; j < a->k; j++)
            dl[idx[j]] += a->mode.pre_softmax ? (float)(c * dw[j]) : (float)((c * dw[j] - wdw) / z);
        double pdp = 0;
        for (int e = 0; e < a->E; e++)
            pdp += (double)pr[e] * dl[e];
        for (int e = 0; e < a->E; e++)
            dl[e] = (float)(pr[e] * ((double)dl[e] - pdp));
    }
}

static void cpu_moe_router_bwd(gt_backend *b, gt_stream *s, void *dlogits, const float *dtopk_w,
                               const float *probs, const int32_t *topk_idx, const float *topk_w,
                               const int32_t *counts, int N, int E, int k, float aux_coeff,
                               gt_router_mode mode) {
    CPU_REQUIRE(b, N >= 0 && E > 0 && k > 0 && k <= E, "moe_router_bwd: bad shape N=%d E=%d k=%d",
                N, E, k);
    CPU_REQUIRE(b, aux_coeff == 0 || counts, "moe_router_bwd: aux_coeff needs counts");
    router_args a = {b,
                     (float *)probs,
                     (int32_t *)topk_idx,
                     (float *)topk_w,
                     (int32_t *)counts,
                     NULL,
                     dlogits,
                     dtopk_w,
                     NULL,
                     N,
                     E,
                     k,
                     aux_coeff,
                     mode};
    gt_cpu_submit(b, s, k_router_bwd, &a, sizeof a);
}

void gt_cpu_register_router_ops(gt_backend_ops *ops) {
    ops->moe_router_fwd = cpu_moe_router_fwd;
    ops->moe_aux_loss = cpu_moe_aux_loss;
    ops->moe_router_bwd = cpu_moe_router_bwd;
}
