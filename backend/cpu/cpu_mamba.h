/* The Mamba-2 mixer's own operations in fp32, the reference the CUDA kernels will be checked
 * against: the causal depthwise convolution with SiLU, dt's softplus, the selective state-space
 * scan (SSD) and the z-gated RMSNorm, each forward and backward, as Megatron's MambaMixer
 * computes them. Shapes follow mamba_ssm: N = tokens of one sequence batch B*T, time is the
 * second index. Weight gradients take `accumulate` as every backend op does (backend.h). */
#ifndef GT_BACKEND_CPU_CPU_MAMBA_H
#define GT_BACKEND_CPU_CPU_MAMBA_H

#include <stddef.h>

/* y[b,t,c] = silu(pre[b,t,c]), pre = bias[c] + sum_k w[c][k] * x[b, t-(K-1)+k, c], with x = 0
 * before the first step (PyTorch's conv1d, padding K-1, first T outputs). x, pre, y:
 * [B][T][C]; w: [C][K]; bias: [C]. pre is kept for the backward. */
void gt_cpu_conv1d_silu_fwd(float *y, float *pre, const float *x, const float *w, const float *bias,
                            int B, int T, int C, int K);
/* dx [B][T][C] (overwritten); dw [C][K] and dbias [C] (+= with accumulate). */
void gt_cpu_conv1d_silu_bwd(float *dx, float *dw, float *dbias, const float *dy, const float *pre,
                            const float *x, const float *w, int B, int T, int C, int K,
                            int accumulate);
/* The same with row strides (elements per token) for y / pre, x, dx and dy, so the mixer reads
 * its slice of the in_proj output in place; pre may be NULL: the backward then recomputes it
 * from x, w and bias. */
void gt_cpu_conv1d_silu_fwd_ld(float *y, int ldy, float *pre, const float *x, int ldx,
                               const float *w, const float *bias, int B, int T, int C, int K);
void gt_cpu_conv1d_silu_bwd_ld(float *dx, int lddx, float *dw, float *dbias, const float *dy,
                               int ldy, const float *pre, const float *x, int ldx, const float *w,
                               const float *bias, int B, int T, int C, int K, int accumulate);

/* dt[n,h] = softplus(raw[n,h] + bias[h]) over [N][H] (PyTorch's softplus: x past 20 is x). */
void gt_cpu_dt_softplus_fwd(float *dt, const float *raw, const float *bias, int N, int H);
/* draw [N][H] (overwritten), dbias [H] (+= with accumulate). */
void gt_cpu_dt_softplus_bwd(float *draw, float *dbias, const float *ddt, const float *raw,
                            const float *bias, int N, int H, int accumulate);

/* The SSD recurrence per head h of group g = h / (H / G), state S [P][N_state] from zero:
 *   S_t = exp(dt_t * A_h) * S_{t-1} + dt_t * x_t B_t^T,   y_t = S_t C_t + D_h * x_t
 * x, y: [B][T][H][P]; dt: [B][T][H] (after softplus); A, D: [H] (A negative: -exp(A_log));
 * Bm, Cm: [B][T][G][S]. Computed step by step: the chunked form the GPU runs gives the same
 * values up to rounding. */
typedef struct gt_ssd_shape {
    int B, T, H, P, G, S; /* batch, time, heads, head dim, groups, state size */
} gt_ssd_shape;
/* Row strides per token (0: packed) of x and dx, of y and dy, of Bm, Cm, dBm and dCm: the
 * mixer's x, B and C are slices of one convolution output. */
typedef struct gt_ssd_ld {
    int x, y, bc;
} gt_ssd_ld;
/* state: P*S floats of scratch (one head's state at a time). */
void gt_cpu_ssd_scan_fwd(float *y, const float *x, const float *dt, const float *A, const float *Bm,
                         const float *Cm, const float *D, gt_ssd_shape sh, float *state);
/* Floats of scratch the backward needs: one head's states over time. */
size_t gt_cpu_ssd_scan_bwd_scratch(gt_ssd_shape sh);
/* dx [B][T][H][P], ddt [B][T][H], dBm and dCm [B][T][G][S] (overwritten); dA and dD [H]
 * (+= with accumulate). scratch: gt_cpu_ssd_scan_bwd_scratch floats. */
void gt_cpu_ssd_scan_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD,
                         const float *dy, const float *x, const float *dt, const float *A,
                         const float *Bm, const float *Cm, const float *D, gt_ssd_shape sh,
                         float *scratch, int accumulate);
/* The same with row strides. */
void gt_cpu_ssd_scan_fwd_ld(float *y, const float *x, const float *dt, const float *A,
                            const float *Bm, const float *Cm, const float *D, gt_ssd_shape sh,
                            gt_ssd_ld ld, float *state);
void gt_cpu_ssd_scan_bwd_ld(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD,
                            const float *dy, const float *x, const float *dt, const float *A,
                            const float *Bm, const float *Cm, const float *D, gt_ssd_shape sh,
                            gt_ssd_ld ld, float *scratch, int accumulate);

/* out = rmsnorm(y * silu(z)) * w, the norm taken over groups of gs = C / G channels (mamba_ssm's
 * RMSNormGated, norm_before_gate=False). y, z, out: [N][C]; w: [C]; rstd [N][G] kept. */
void gt_cpu_gated_rmsnorm_fwd(float *out, float *rstd, const float *y, const float *z,
                              const float *w, int N, int C, int G, float eps);
/* dy, dz [N][C] (overwritten); dw [C] (+= with accumulate). */
void gt_cpu_gated_rmsnorm_bwd(float *dy, float *dz, float *dw, const float *dout, const float *y,
                              const float *z, const float *w, const float *rstd, int N, int C,
                              int G, int accumulate);
/* The same with z and dz at row stride ldz / lddz (slices of the in_proj output and its
 * gradient); dy may alias y. */
void gt_cpu_gated_rmsnorm_fwd_ld(float *out, float *rstd, const float *y, const float *z, int ldz,
                                 const float *w, int N, int C, int G, float eps);
void gt_cpu_gated_rmsnorm_bwd_ld(float *dy, float *dz, int lddz, float *dw, const float *dout,
                                 const float *y, const float *z, int ldz, const float *w,
                                 const float *rstd, int N, int C, int G, int accumulate);

#endif
