/* CPU reference: step-state ops and the optimizer (LR schedule, micro-batch counter, NaN
 * injection hook, gradient norm and clipping coefficient, AdamW, step end). Every per-step
 * value is read from the gt_step_state when the kernel runs, never when it is enqueued, so a
 * replayed graph behaves exactly like an eager step. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "config/config.h"
#include "core/bf16.h"

#define CPU_PI 3.14159265358979323846

/* ---- step_begin: the learning-rate schedule ---- */

typedef struct sched_args {
    gt_step_state *st;
    gt_lr_schedule sched; /* constant for the run, so freezing it in a graph is safe */
} sched_args;

/* Megatron's OptimizerParamScheduler.get_lr with step = st->step (0-based):
 *   step < warmup:            init + (lr_max - init) * (step + 1) / warmup
 *   constant style:           lr_max
 *   step >= decay_iters:      lr_min (also right after warmup when decay_iters <= warmup)
 *   otherwise, r = (step - warmup) / (decay_iters - warmup):
 *     linear: lr_max - r * (lr_max - lr_min); cosine: lr_min + (lr_max - lr_min)(1+cos(pi r))/2
 * Megatron's num_steps is step + 1 in the warmup (the first step trains at a nonzero rate)
 * and step after it. The two styles Megatron added later follow its code literally (lr_min
 * only past decay_iters, not at it):
 *   inverse-square-root: max(lr_min, lr_max * sqrt(max(warmup, 1)) / sqrt(max(step, 1)))
 *   WSD: lr_max until decay_iters - wsd_decay_iters, then lr_min + c (lr_max - lr_min) with
 *     r = (step - decay_iters + wsd_decay_iters) / wsd_decay_iters and c = 2 * 0.5^r - 1
 *     (exponential), 1 - r (linear), (1 + cos(pi r)) / 2 (cosine) or 1 - sqrt(r) (minus_sqrt)
 * backend/cuda/k_optim.cu computes the two new styles in the same double operations. */
static float lr_megatron_tail(gt_lr_schedule sc, int64_t step) {
    double hi = sc.lr_max, lo = sc.lr_min;
    if (step > sc.decay_iters) return sc.lr_min;
    if (sc.style == GT_LR_INVERSE_SQRT) {
        double w = sc.warmup_iters > 1 ? (double)sc.warmup_iters : 1.0;
        double n = step > 1 ? (double)step : 1.0;
        double lr = hi * sqrt(w) / sqrt(n);
        return (float)(lr > lo ? lr : lo);
    }
    int64_t start = (int64_t)sc.decay_iters - sc.wsd_decay_iters;
    double c = 1.0;
    if (step > start) {
        double r = (double)(step - start) / (double)sc.wsd_decay_iters;
        if (sc.wsd_style == GT_WSD_LINEAR)
            c = 1.0 - r;
        else if (sc.wsd_style == GT_WSD_COSINE)
            c = 0.5 * (cos(CPU_PI * r) + 1.0);
        else if (sc.wsd_style == GT_WSD_EXPONENTIAL)
            c = 2.0 * pow(0.5, r) - 1.0;
        else
            c = 1.0 - sqrt(r);
    }
    return (float)(lo + c * (hi - lo));
}

static float lr_at(gt_lr_schedule sc, int64_t step) {
    if (step < sc.warmup_iters) {
        double init = sc.warmup_init;
        return (float)(init +
                       ((double)sc.lr_max - init) * (double)(step + 1) / (double)sc.warmup_iters);
    }
    if (sc.style == GT_LR_CONSTANT) return sc.lr_max;
    if (sc.style == GT_LR_INVERSE_SQRT || sc.style == GT_LR_WSD) return lr_megatron_tail(sc, step);
    if (step >= sc.decay_iters) return sc.lr_min;
    double r = (double)(step - sc.warmup_iters) / (double)(sc.decay_iters - sc.warmup_iters);
    double hi = sc.lr_max, lo = sc.lr_min;
    if (sc.style == GT_LR_LINEAR) return (float)(hi - r * (hi - lo));
    return (float)(lo + 0.5 * (hi - lo) * (1.0 + cos(CPU_PI * r)));
}

static void k_step_begin(const void *p) {
    const sched_args *a = p;
    gt_step_state *st = a->st;
    st->lr = lr_at(a->sched, st->step);
    st->loss = 0;
    st->aux_loss = 0;
    st->nan_flags = 0;
    st->skipped = 0;
    st->micro = 0;
}

static void cpu_step_begin(gt_backend *b, gt_stream *s, gt_step_state *st, gt_lr_schedule sched) {
    if (!st || !gt_lr_schedule_check(b, "step_begin", &sched)) return;
    sched_args a = {st, sched};
    gt_cpu_submit(b, s, k_step_begin, &a, sizeof a);
}

/* ---- micro_next, inject_nan, step_end ---- */

typedef struct st_args {
    gt_step_state *st;
    float *grads;      /* inject_nan only; may be NULL */
    gt_grad_rows rows; /* inject_nan only */
} st_args;

static void k_micro_next(const void *p) {
    ((const st_args *)p)->st->micro++;
}

static void k_inject_nan(const void *p) {
    const st_args *a = p;
    if (a->st->step != a->st->inject_nan) return;
    a->st->loss = NAN;
    if (!a->grads) return;
    a->grads[0] = NAN;
    const gt_grad_rows *r = &a->rows;
    if (r->dirty && r->offset == 0 && r->rows > 0) r->dirty[0] = 1;
}

static void k_step_end(const void *p) {
    gt_step_state *st = ((const st_args *)p)->st;
    if (st->nan_flags && st->nan_step < 0) {
        st->nan_step = (int32_t)st->step;
        st->nan_first = st->nan_flags;
    }
    st->step++;
}

static void submit_st(gt_backend *b, gt_stream *s, const char *what, gt_cpu_kernel fn,
                      gt_step_state *st, float *grads, gt_grad_rows rows) {
    if (!st) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: no step state given", what);
        return;
    }
    st_args a = {st, grads, rows};
    gt_cpu_submit(b, s, fn, &a, sizeof a);
}

static void cpu_micro_next(gt_backend *b, gt_stream *s, gt_step_state *st) {
    submit_st(b, s, "micro_next", k_micro_next, st, NULL, GT_NO_GRAD_ROWS);
}

static void cpu_inject_nan(gt_backend *b, gt_stream *s, gt_step_state *st, float *grads,
                           gt_grad_rows rows) {
    submit_st(b, s, "inject_nan", k_inject_nan, st, grads, rows);
}

static void cpu_step_end(gt_backend *b, gt_stream *s, gt_step_state *st) {
    submit_st(b, s, "step_end", k_step_end, st, NULL, GT_NO_GRAD_ROWS);
}

/* ---- grad_norm ---- */

typedef struct norm_args {
    gt_step_state *st;
    const float *grads;
    size_t n;
    gt_grad_rows rows; /* rows known zero are skipped, as the device skips their loads */
    int check_loss, check_grad;
    float clip;
} norm_args;

static void k_grad_norm(const void *p) {
    const norm_args *a = p;
    gt_step_state *st = a->st;
    if (a->check_loss && !isfinite(st->loss)) st->nan_flags |= GT_NAN_LOSS;
    double ss = 0;
    for (size_t i = 0; i < a->n; i++)
        if (!gt_grad_rows_zero(&a->rows, i)) ss += (double)a->grads[i] * a->grads[i];
    double norm = sqrt(ss);
    st->grad_norm = (float)norm;
    if (a->check_grad && !isfinite(st->grad_norm)) st->nan_flags |= GT_NAN_GRAD;
    /* min(1, c) with a NaN norm giving 1: the NaN flag, not clipping, must stop that step */
    double c = a->clip > 0 ? (double)a->clip / (norm + 1e-6) : 1.0;
    st->clip_coef = c < 1.0 ? (float)c : 1.0f;
}

static void cpu_grad_norm(gt_backend *b, gt_stream *s, gt_step_state *st, const float *grads,
                          size_t n, gt_grad_rows rows, int check_loss, int check_grad, float clip) {
    if (!st || (n > 0 && !grads)) {
        gt_backend_fail(b, GT_ERR_INVALID, "grad_norm: missing step state or gradients");
        return;
    }
    if (!gt_grad_rows_check(b, "grad_norm", &rows, n)) return;
    norm_args a = {st, grads, n, rows, check_loss, check_grad, clip};
    gt_cpu_submit(b, s, k_grad_norm, &a, sizeof a);
}

/* ---- adamw ---- */

typedef struct adamw_args {
    float *params; /* [n] compute dtype (fp32 here); may alias master */
    float *master; /* [n] */
    const float *grads;
    gt_grad_rows rows; /* rows known zero: g = 0 without reading them */
    void *m, *v;       /* fp32, or bf16 (uint16_t) where hp says so */
    size_t n, n_decay;
    gt_adamw_params hp; /* constant for the run */
    gt_step_state *st;  /* step, lr, clip_coef, nan_flags read at run time */
} adamw_args;

/* The step's scalars: bias corrections of step `step` (0-based) and its learning rate */
typedef struct adamw_step {
    double bc1, bc2, lr;
} adamw_step;

static adamw_step adamw_step_at(const gt_adamw_params *hp, int64_t step, double lr) {
    double t = (double)(step + 1);
    return (adamw_step){1.0 - pow(hp->beta1, t), 1.0 - pow(hp->beta2, t), lr};
}

/* One element's update with gradient g (already clipped); the lazy rows replay it with g = 0 */
static void adamw_elem(float *master, void *m, void *v, size_t i, size_t n_decay,
                       const gt_adamw_params *hp, const adamw_step *k, double g) {
    double b1 = hp->beta1, b2 = hp->beta2;
    float *mf = m, *vf = v;
    uint16_t *mh = m, *vh = v;
    /* fp32 moments as the device computes them; bf16 storage rounds them after the update
     * used them (Transformer Engine's FusedAdam does the same) */
    double m_old = hp->m_bf16 ? gt_bf16_to_float(mh[i]) : mf[i];
    double v_old = hp->v_bf16 ? gt_bf16_to_float(vh[i]) : vf[i];
    float m_new = (float)(b1 * m_old + (1.0 - b1) * g);
    float v_new = (float)(b2 * v_old + (1.0 - b2) * g * g);
    if (hp->m_bf16)
        mh[i] = gt_bf16_from_float(m_new);
    else
        mf[i] = m_new;
    if (hp->v_bf16)
        vh[i] = gt_bf16_from_float(v_new);
    else
        vf[i] = v_new;
    /* the weight decays first, then takes the step (PyTorch's fused AdamW; the device's order) */
    double w = master[i];
    if (i < n_decay) w -= k->lr * hp->weight_decay * w;
    double step_size = k->lr / k->bc1;
    master[i] =
        (float)(w - step_size * (double)m_new / (sqrt((double)v_new) / sqrt(k->bc2) + hp->eps));
}

static void k_adamw(const void *p) {
    const adamw_args *a = p;
    gt_step_state *st = a->st;
    if (st->nan_flags) {
        st->skipped = 1;
        return;
    }
    adamw_step k = adamw_step_at(&a->hp, st->step, st->lr);
    double coef = st->clip_coef;
    for (size_t i = 0; i < a->n; i++) {
        if (gt_grad_rows_waits(&a->rows, i, st->step)) continue; /* lazy_catchup's later */
        double g = gt_grad_rows_zero(&a->rows, i) ? 0.0 : (double)a->grads[i] * coef;
        adamw_elem(a->master, a->m, a->v, i, a->n_decay, &a->hp, &k, g);
        a->params[i] = a->master[i];
    }
}

/* ---- lazy rows: the updates a row missed, replayed ---- */

typedef struct lazy_args {
    gt_step_state *st;
    gt_adamw_state os;
    gt_grad_rows rows;
    const int32_t *tokens; /* catch-up: the step's tokens */
    int n_tokens;
    int period; /* the sweep (0: none): the rows of slice step mod period */
    int replay; /* flush: 0 sets the lags only */
} lazy_args;

/* Row r's updates of steps from .. to - 1, each with a zero gradient */
static void lazy_replay(const lazy_args *a, size_t r, int64_t from, int64_t to) {
    const gt_adamw_state *os = &a->os;
    float *master = os->master, *params = os->params;
    for (int64_t s = from; s < to; s++) {
        adamw_step k = adamw_step_at(&os->hp, s, lr_at(os->sched, s));
        for (int j = 0; j < a->rows.d; j++) {
            size_t i = a->rows.offset + r * (size_t)a->rows.d + (size_t)j;
            adamw_elem(master, os->m, os->v, i, os->n_decay, &os->hp, &k, 0.0);
            params[i] = master[i];
        }
    }
}

/* Row r, when it is a row and behind: its missed updates, then this step's adamw updates it */
static void catch_up_row(const lazy_args *a, int64_t r, int64_t step) {
    if (r < 0 || (size_t)r >= a->rows.rows || a->rows.lag[r] > step) return;
    lazy_replay(a, (size_t)r, a->rows.lag[r], step);
    a->rows.lag[r] = (int32_t)(step + 1);
}

/* the rows of the tokens, then (the sweep) those of slice step mod period */
static void k_lazy_catchup(const void *p) {
    const lazy_args *a = p;
    int64_t step = a->st->step;
    for (int i = 0; i < a->n_tokens; i++)
        catch_up_row(a, a->tokens[i], step);
    if (a->period <= 0) return;
    int64_t per = ((int64_t)a->rows.rows + a->period - 1) / a->period;
    int64_t first = (step % a->period) * per;
    for (int64_t r = first; r < first + per; r++)
        catch_up_row(a, r, step);
}

static void k_lazy_flush(const void *p) {
    const lazy_args *a = p;
    int64_t step = a->st->step, upto = step - (a->st->skipped ? 1 : 0);
    for (size_t r = 0; r < a->rows.rows; r++) {
        if (a->rows.lag[r] >= step) continue;
        if (a->replay) lazy_replay(a, r, a->rows.lag[r], upto);
        a->rows.lag[r] = (int32_t)step;
    }
}

/* catch-up (catchup 1: tokens[0..n), then the sweep's slice when period > 0) or flush */
static void lazy_submit(gt_backend *b, gt_stream *s, gt_step_state *st, gt_adamw_state os,
                        gt_grad_rows rows, int catchup, const int32_t *tokens, int n, int period,
                        int replay) {
    lazy_args a = {st, os, rows, tokens, n, period, replay};
    gt_cpu_submit(b, s, catchup ? k_lazy_catchup : k_lazy_flush, &a, sizeof a);
}

/* (no lazy rows: adamw updates every row) */
static void cpu_lazy_catchup(gt_backend *b, gt_stream *s, gt_step_state *st, gt_adamw_state os,
                             gt_grad_rows rows, const int32_t *tokens, int n, int sweep) {
    if (!rows.lag) return;
    if (!gt_lazy_rows_check(b, "lazy_catchup", st, &os, &rows, 1, tokens, n, sweep)) return;
    if ((n == 0 && sweep == 0) || rows.rows == 0) return;
    lazy_submit(b, s, st, os, rows, 1, tokens, n, sweep, 1);
}

static void cpu_lazy_flush(gt_backend *b, gt_stream *s, gt_step_state *st, gt_adamw_state os,
                           gt_grad_rows rows, int replay) {
    if (!rows.lag || !gt_lazy_rows_check(b, "lazy_flush", st, &os, &rows, 0, NULL, 0, 0)) return;
    lazy_submit(b, s, st, os, rows, 0, NULL, 0, 0, replay);
}

static void cpu_adamw(gt_backend *b, gt_stream *s, void *params, void *master, const float *grads,
                      gt_grad_rows rows, void *m, void *v, size_t n, size_t n_decay,
                      gt_adamw_params hp, gt_step_state *st) {
    if (!gt_adamw_check(b, "adamw", st, n, n_decay, &hp)) return;
    if (hp.master_lo) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "adamw: split master weights (hp.master_lo) need bf16 params; the cpu "
                        "backend keeps fp32 params and an fp32 master");
        return;
    }
    if (!gt_grad_rows_check(b, "adamw", &rows, n)) return;
    adamw_args a = {params, master, grads, rows, m, v, n, n_decay, hp, st};
    gt_cpu_submit(b, s, k_adamw, &a, sizeof a);
}

void gt_cpu_register_optim_ops(gt_backend_ops *ops) {
    ops->step_begin = cpu_step_begin;
    ops->micro_next = cpu_micro_next;
    ops->inject_nan = cpu_inject_nan;
    ops->grad_norm = cpu_grad_norm;
    ops->adamw = cpu_adamw;
    ops->lazy_catchup = cpu_lazy_catchup;
    ops->lazy_flush = cpu_lazy_flush;
    ops->step_end = cpu_step_end;
}
