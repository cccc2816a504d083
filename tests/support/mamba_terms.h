/* The SSD scan's A gradient as a sum over tokens, for tests that bound its error by its terms
 * (a sum whose terms cancel has a relative error far above theirs). The scan depends on A only
 * through a_t = dt_t A, and on dt through a_t and xs_t = dt_t x_t, so with g_t = dL/da_t:
 *   dL/d(dt_t) = A g_t + sum_p x_tp dL/d(xs_tp),   dx_tp = dt_t dL/d(xs_tp) + D dy_tp,
 * and A dL/dA = sum_t A dt_t g_t = sum_t q_t with
 *   q_t = dt_t dL/d(dt_t) - sum_p x_tp (dx_tp - D dy_tp),
 * every factor of which the ops return or take: A dL/dA is dA_log (A = -exp(A_log)). */
#ifndef GT_TESTS_MAMBA_TERMS_H
#define GT_TESTS_MAMBA_TERMS_H
#include <math.h>
#include <stddef.h>

/* Per head h: sum[h] = sum_n q_{n,h} and mag[h] = the sum over the N tokens of the magnitudes
 * of q's parts, |dt ddt| + sum_p |x (dx - D dy)|: q is the small difference of those two
 * (A g_t dt_t), and an op's error in q follows the error of each part, not q's size. dt and ddt
 * (dL/d(dt) after softplus) are [N][H]; x, dx and dy rows of ld_x, ld_x and ld_y floats hold head
 * h's P values at h * P. */
static inline void mamba_dA_terms(double *sum, double *mag, const float *dt, const float *ddt,
                                  const float *x, const float *dx, size_t ld_x, const float *dy,
                                  size_t ld_y, const float *D, size_t N, int H, int P) {
    for (int h = 0; h < H; h++) {
        double s = 0.0, m = 0.0;
        for (size_t n = 0; n < N; n++) {
            double q = (double)dt[n * H + h] * ddt[n * H + h], parts = fabs(q);
            for (int p = 0; p < P; p++) {
                size_t i = n * ld_x + (size_t)h * P + p;
                double v = (double)x[i] *
                           ((double)dx[i] - (double)D[h] * dy[n * ld_y + (size_t)h * P + p]);
                q -= v;
                parts += fabs(v);
            }
            s += q;
            m += parts;
        }
        sum[h] = s, mag[h] = m;
    }
}
#endif
