/* The Mamba-2 mixer's operations in fp32 (cpu_mamba.h): plain loops in the order of the
 * formulas, sums in double where a reduction is long, so the reference is easy to check by
 * reading and by finite differences. */
#include "backend/cpu/cpu_mamba.h"

#include <math.h>
#include <string.h>

/* PyTorch's softplus switches to the identity past this (beta 1) */
#define SOFTPLUS_THRESHOLD 20.0f

static float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

static float silu_grad(float x) {
    float s = sigmoidf(x);
    return s * (1.0f + x * (1.0f - s));
}

/* the convolution's pre-activation at (b, t, c), x with row stride ldx */
static float conv_pre(const float *x, int ldx, const float *w, const float *bias, int b, int t,
                      int c, int T, int K) {
    float acc = bias ? bias[c] : 0.0f;
    for (int k = 0; k < K; k++) {
        int src = t - (K - 1) + k;
        if (src >= 0) acc += w[(size_t)c * K + k] * x[((size_t)b * T + src) * (size_t)ldx + c];
    }
    return acc;
}

void gt_cpu_conv1d_silu_fwd_ld(float *y, int ldy, float *pre, const float *x, int ldx,
                               const float *w, const float *bias, int B, int T, int C, int K) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                float acc = conv_pre(x, ldx, w, bias, b, t, c, T, K);
                size_t i = ((size_t)b * T + t) * (size_t)ldy + c;
                if (pre) pre[i] = acc;
                y[i] = acc * sigmoidf(acc);
            }
}

void gt_cpu_conv1d_silu_fwd(float *y, float *pre, const float *x, const float *w, const float *bias,
                            int B, int T, int C, int K) {
    gt_cpu_conv1d_silu_fwd_ld(y, C, pre, x, C, w, bias, B, T, C, K);
}

/* dL/dpre at (b, t, c): dy through SiLU, pre saved or recomputed */
static float conv_dpre(const float *dy, int ldy, const float *pre, const float *x, int ldx,
                       const float *w, const float *bias, int b, int t, int c, int T, int K) {
    size_t i = ((size_t)b * T + t) * (size_t)ldy + c;
    float v = pre ? pre[i] : conv_pre(x, ldx, w, bias, b, t, c, T, K);
    return dy[i] * silu_grad(v);
}

void gt_cpu_conv1d_silu_bwd_ld(float *dx, int lddx, float *dw, float *dbias, const float *dy,
                               int ldy, const float *pre, const float *x, int ldx, const float *w,
                               const float *bias, int B, int T, int C, int K, int accumulate) {
    for (int c = 0; c < C; c++) {
        double db = 0;
        for (int k = 0; k < K; k++) {
            double acc = 0;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    int src = t - (K - 1) + k;
                    if (src < 0) continue;
                    float g = conv_dpre(dy, ldy, pre, x, ldx, w, bias, b, t, c, T, K);
                    acc += (double)g * x[((size_t)b * T + src) * (size_t)ldx + c];
                }
            float *o = &dw[(size_t)c * K + k];
            *o = (float)(accumulate ? *o + acc : acc);
        }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                db += conv_dpre(dy, ldy, pre, x, ldx, w, bias, b, t, c, T, K);
                float acc = 0.0f;
                for (int k = 0; k < K; k++) {
                    int dst = t + (K - 1) - k; /* the output that read x[t] through w[k] */
                    if (dst >= T) continue;
                    acc += w[(size_t)c * K + k] *
                           conv_dpre(dy, ldy, pre, x, ldx, w, bias, b, dst, c, T, K);
                }
                dx[((size_t)b * T + t) * (size_t)lddx + c] = acc;
            }
        if (dbias) dbias[c] = (float)(accumulate ? dbias[c] + db : db);
    }
}

void gt_cpu_conv1d_silu_bwd(float *dx, float *dw, float *dbias, const float *dy, const float *pre,
                            const float *x, const float *w, int B, int T, int C, int K,
                            int accumulate) {
    gt_cpu_conv1d_silu_bwd_ld(dx, C, dw, dbias, dy, C, pre, x, C, w, NULL, B, T, C, K, accumulate);
}

static float softplus(float x) {
    return x > SOFTPLUS_THRESHOLD ? x : log1pf(expf(x));
}

void gt_cpu_dt_softplus_fwd(float *dt, const float *raw, const float *bias, int N, int H) {
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            dt[(size_t)n * H + h] = softplus(raw[(size_t)n * H + h] + bias[h]);
}

void gt_cpu_dt_softplus_bwd(float *draw, float *dbias, const float *ddt, const float *raw,
                            const float *bias, int N, int H, int accumulate) {
    for (int h = 0; h < H; h++) {
        double db = 0;
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * H + h;
            float v = raw[i] + bias[h];
            float g = ddt[i] * (v > SOFTPLUS_THRESHOLD ? 1.0f : sigmoidf(v));
            draw[i] = g;
            db += g;
        }
        dbias[h] = (float)(accumulate ? dbias[h] + db : db);
    }
}

/* index helpers for the scan's [B][T][H][P] (x, dx; y, dy), [B][T][H] and [B][T][G][S]
 * tensors, each with its row stride per token (gt_ssd_ld, 0: packed) */
static size_t ld_or(int ld, int packed) {
    return (size_t)(ld > 0 ? ld : packed);
}
static size_t ix_x(gt_ssd_shape s, gt_ssd_ld ld, int b, int t, int h) {
    return ((size_t)b * s.T + t) * ld_or(ld.x, s.H * s.P) + (size_t)h * s.P;
}
static size_t ix_y(gt_ssd_shape s, gt_ssd_ld ld, int b, int t, int h) {
    return ((size_t)b * s.T + t) * ld_or(ld.y, s.H * s.P) + (size_t)h * s.P;
}
static size_t ix_dt(gt_ssd_shape s, int b, int t, int h) {
    return ((size_t)b * s.T + t) * s.H + h;
}
static size_t ix_bc(gt_ssd_shape s, gt_ssd_ld ld, int b, int t, int g) {
    return ((size_t)b * s.T + t) * ld_or(ld.bc, s.G * s.S) + (size_t)g * s.S;
}

/* S_t for t = 0..T-1 of one (b, h) into states [T][P][S] */
static void scan_states(float *states, const float *x, const float *dt, float A, const float *Bm,
                        gt_ssd_shape sh, gt_ssd_ld ld, int b, int h) {
    int g = h / (sh.H / sh.G);
    size_t ps = (size_t)sh.P * sh.S;
    for (int t = 0; t < sh.T; t++) {
        float d = dt[ix_dt(sh, b, t, h)];
        float a = expf(d * A);
        const float *xt = &x[ix_x(sh, ld, b, t, h)];
        const float *bt = &Bm[ix_bc(sh, ld, b, t, g)];
        float *cur = &states[(size_t)t * ps];
        const float *prev = t > 0 ? cur - ps : NULL;
        for (int p = 0; p < sh.P; p++)
            for (int s = 0; s < sh.S; s++) {
                size_t k = (size_t)p * sh.S + s;
                cur[k] = (prev ? a * prev[k] : 0.0f) + d * xt[p] * bt[s];
            }
    }
}

void gt_cpu_ssd_scan_fwd(float *y, const float *x, const float *dt, const float *A, const float *Bm,
                         const float *Cm, const float *D, gt_ssd_shape sh, float *state) {
    gt_ssd_ld packed = {0, 0, 0};
    gt_cpu_ssd_scan_fwd_ld(y, x, dt, A, Bm, Cm, D, sh, packed, state);
}

void gt_cpu_ssd_scan_fwd_ld(float *y, const float *x, const float *dt, const float *A,
                            const float *Bm, const float *Cm, const float *D, gt_ssd_shape sh,
                            gt_ssd_ld ld, float *state) {
    size_t ps = (size_t)sh.P * sh.S;
    for (int b = 0; b < sh.B; b++)
        for (int h = 0; h < sh.H; h++) {
            int g = h / (sh.H / sh.G);
            float *S = state; /* one head's state [P][S] */
            memset(S, 0, ps * sizeof(float));
            for (int t = 0; t < sh.T; t++) {
                float d = dt[ix_dt(sh, b, t, h)];
                float a = expf(d * A[h]);
                const float *xt = &x[ix_x(sh, ld, b, t, h)];
                const float *bt = &Bm[ix_bc(sh, ld, b, t, g)];
                const float *ct = &Cm[ix_bc(sh, ld, b, t, g)];
                float *yt = &y[ix_y(sh, ld, b, t, h)];
                for (int p = 0; p < sh.P; p++) {
                    float acc = 0.0f;
                    for (int s = 0; s < sh.S; s++) {
                        float *v = &S[(size_t)p * sh.S + s];
                        *v = a * *v + d * xt[p] * bt[s];
                        acc += *v * ct[s];
                    }
                    yt[p] = acc + D[h] * xt[p];
                }
            }
        }
}

size_t gt_cpu_ssd_scan_bwd_scratch(gt_ssd_shape sh) {
    return ((size_t)sh.T + 1) * sh.P * sh.S;
}

void gt_cpu_ssd_scan_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD,
                         const float *dy, const float *x, const float *dt, const float *A,
                         const float *Bm, const float *Cm, const float *D, gt_ssd_shape sh,
                         float *scratch, int accumulate) {
    gt_ssd_ld packed = {0, 0, 0};
    gt_cpu_ssd_scan_bwd_ld(dx, ddt, dA, dBm, dCm, dD, dy, x, dt, A, Bm, Cm, D, sh, packed, scratch,
                           accumulate);
}

void gt_cpu_ssd_scan_bwd_ld(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD,
                            const float *dy, const float *x, const float *dt, const float *A,
                            const float *Bm, const float *Cm, const float *D, gt_ssd_shape sh,
                            gt_ssd_ld ld, float *scratch, int accumulate) {
    size_t ps = (size_t)sh.P * sh.S;
    for (int b = 0; b < sh.B; b++)
        for (int t = 0; t < sh.T; t++) {
            memset(&dBm[ix_bc(sh, ld, b, t, 0)], 0, (size_t)sh.G * sh.S * sizeof(float));
            memset(&dCm[ix_bc(sh, ld, b, t, 0)], 0, (size_t)sh.G * sh.S * sizeof(float));
        }
    float *states = scratch;                 /* [T][P][S] */
    float *Gs = scratch + (size_t)sh.T * ps; /* [P][S]: dL/dS_t, future steps included */
    for (int h = 0; h < sh.H; h++) {
        double dA_h = 0, dD_h = 0;
        int g = h / (sh.H / sh.G);
        for (int b = 0; b < sh.B; b++) {
            scan_states(states, x, dt, A[h], Bm, sh, ld, b, h);
            memset(Gs, 0, ps * sizeof(float));
            float a_next = 0.0f; /* a_{t+1}: what carries G_{t+1} back to S_t */
            for (int t = sh.T - 1; t >= 0; t--) {
                float d = dt[ix_dt(sh, b, t, h)];
                float a = expf(d * A[h]);
                const float *xt = &x[ix_x(sh, ld, b, t, h)];
                const float *bt = &Bm[ix_bc(sh, ld, b, t, g)];
                const float *ct = &Cm[ix_bc(sh, ld, b, t, g)];
                const float *dyt = &dy[ix_y(sh, ld, b, t, h)];
                const float *St = &states[(size_t)t * ps];
                const float *Sp = t > 0 ? St - ps : NULL;
                float *dbt = &dBm[ix_bc(sh, ld, b, t, g)];
                float *dct = &dCm[ix_bc(sh, ld, b, t, g)];
                float *dxt = &dx[ix_x(sh, ld, b, t, h)];
                double d_a = 0, d_dt = 0; /* dL/da_t, and dt's share through x B^T */
                for (int p = 0; p < sh.P; p++) {
                    double gx = 0; /* sum_s G[p][s] B[s] */
                    for (int s = 0; s < sh.S; s++) {
                        size_t k = (size_t)p * sh.S + s;
                        Gs[k] = dyt[p] * ct[s] + a_next * Gs[k];
                        dct[s] += St[k] * dyt[p];
                        dbt[s] += d * Gs[k] * xt[p];
                        gx += (double)Gs[k] * bt[s];
                        if (Sp) d_a += (double)Gs[k] * Sp[k];
                    }
                    dxt[p] = D[h] * dyt[p] + d * (float)gx;
                    d_dt += gx * xt[p];
                    dD_h += (double)dyt[p] * xt[p];
                }
                ddt[ix_dt(sh, b, t, h)] = (float)(d_dt + d_a * A[h] * a);
                dA_h += d_a * d * a;
                a_next = a;
            }
        }
        dA[h] = (float)(accumulate ? dA[h] + dA_h : dA_h);
        dD[h] = (float)(accumulate ? dD[h] + dD_h : dD_h);
    }
}

void gt_cpu_gated_rmsnorm_fwd_ld(float *out, float *rstd, const float *y, const float *z, int ldz,
                                 const float *w, int N, int C, int G, float eps) {
    int gs = C / G;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            size_t o = (size_t)n * C + (size_t)g * gs;
            const float *zr = z + (size_t)n * ldz + (size_t)g * gs;
            double ss = 0;
            for (int i = 0; i < gs; i++) {
                float u = y[o + i] * zr[i] * sigmoidf(zr[i]);
                ss += (double)u * u;
            }
            float r = 1.0f / sqrtf((float)(ss / gs) + eps);
            rstd[(size_t)n * G + g] = r;
            for (int i = 0; i < gs; i++) {
                float u = y[o + i] * zr[i] * sigmoidf(zr[i]);
                out[o + i] = u * r * w[g * gs + i];
            }
        }
}

void gt_cpu_gated_rmsnorm_fwd(float *out, float *rstd, const float *y, const float *z,
                              const float *w, int N, int C, int G, float eps) {
    gt_cpu_gated_rmsnorm_fwd_ld(out, rstd, y, z, C, w, N, C, G, eps);
}

void gt_cpu_gated_rmsnorm_bwd_ld(float *dy, float *dz, int lddz, float *dw, const float *dout,
                                 const float *y, const float *z, int ldz, const float *w,
                                 const float *rstd, int N, int C, int G, int accumulate) {
    int gs = C / G;
    if (!accumulate) memset(dw, 0, (size_t)C * sizeof(float));
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            size_t o = (size_t)n * C + (size_t)g * gs;
            const float *zr = z + (size_t)n * ldz + (size_t)g * gs;
            float *dzr = dz + (size_t)n * lddz + (size_t)g * gs;
            float r = rstd[(size_t)n * G + g];
            double dot = 0; /* sum_i dout_i w_i u_i */
            for (int i = 0; i < gs; i++) {
                float u = y[o + i] * zr[i] * sigmoidf(zr[i]);
                dot += (double)dout[o + i] * w[g * gs + i] * u;
                dw[g * gs + i] += dout[o + i] * u * r;
            }
            float k = (float)(dot / gs) * r * r * r;
            for (int i = 0; i < gs; i++) {
                float sz = zr[i] * sigmoidf(zr[i]);
                float u = y[o + i] * sz;
                float du = r * w[g * gs + i] * dout[o + i] - k * u;
                float yi = y[o + i]; /* read before dy is written: dy may alias y */
                dy[o + i] = du * sz;
                dzr[i] = du * yi * silu_grad(zr[i]);
            }
        }
}

void gt_cpu_gated_rmsnorm_bwd(float *dy, float *dz, float *dw, const float *dout, const float *y,
                              const float *z, const float *w, const float *rstd, int N, int C,
                              int G, int accumulate) {
    gt_cpu_gated_rmsnorm_bwd_ld(dy, dz, C, dw, dout, y, z, C, w, rstd, N, C, G, accumulate);
}
