/* The learning-rate schedule across a resume: what a checkpoint records of it, and the check
 * that a resumed run keeps it. A changed train_iters or schedule key changes the rate of every
 * later step, so it is refused, naming each change, unless the configuration picks a side
 * (Megatron's override_opt_param_scheduler / use_checkpoint_opt_param_scheduler). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "train/trainer_impl.h"
#include "train/trainer_sched.h"

static const char *const k_styles[] = {"constant", "linear", "cosine", "inverse-square-root",
                                       "WSD"};
static const char *const k_wsd_styles[] = {"exponential", "linear", "cosine", "minus_sqrt"};

static const char *name_of(const char *const *names, int n, int32_t v) {
    return v >= 0 && v < n ? names[v] : "unknown";
}

gt_ckpt_sched gt_trainer_ckpt_sched(const gt_config *cfg) {
    gt_ckpt_sched s;
    memset(&s, 0, sizeof s);
    s.lr = gt_trainer_lr_schedule(cfg);
    s.train_iters = cfg->train.train_iters;
    s.lr_decay_iters = cfg->scheduler.lr_decay_iters;
    s.lr_warmup_iters = cfg->scheduler.lr_warmup_iters;
    s.lr_warmup_fraction = cfg->scheduler.lr_warmup_fraction;
    return s;
}

/* Appends one changed setting; keeps the text terminated when it is full. */
static void put(char *buf, size_t n, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void put(char *buf, size_t n, size_t *len, const char *fmt, ...) {
    if (*len >= n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, n - *len, fmt, ap);
    va_end(ap);
    if (w > 0) *len += (size_t)w < n - *len ? (size_t)w : n - *len - 1;
}

/* Where the rate of some step differs: the lr-relevant fields of the two schedules. */
static int lr_differs(const gt_lr_schedule *a, const gt_lr_schedule *b) {
    int decays = a->style != GT_LR_CONSTANT;
    int wsd = a->style == GT_LR_WSD;
    return a->style != b->style || a->lr_max != b->lr_max || a->warmup_iters != b->warmup_iters ||
           (a->warmup_iters > 0 && a->warmup_init != b->warmup_init) ||
           (decays && (a->lr_min != b->lr_min || a->decay_iters != b->decay_iters)) ||
           (wsd && (a->wsd_decay_iters != b->wsd_decay_iters || a->wsd_style != b->wsd_style));
}

size_t gt_ckpt_sched_diff(const gt_ckpt_sched *old, const gt_ckpt_sched *now, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    if (!lr_differs(&old->lr, &now->lr)) return 0;
    const gt_lr_schedule *a = &old->lr, *b = &now->lr;
    if (a->style != b->style)
        put(buf, n, &len, "\n  scheduler.lr_decay_style: %s in the checkpoint, %s now",
            name_of(k_styles, 5, a->style), name_of(k_styles, 5, b->style));
    if (a->lr_max != b->lr_max)
        put(buf, n, &len, "\n  optimizer.lr: %g in the checkpoint, %g now", (double)a->lr_max,
            (double)b->lr_max);
    if (a->lr_min != b->lr_min)
        put(buf, n, &len, "\n  optimizer.min_lr: %g in the checkpoint, %g now", (double)a->lr_min,
            (double)b->lr_min);
    if (a->warmup_init != b->warmup_init)
        put(buf, n, &len, "\n  scheduler.lr_warmup_init: %g in the checkpoint, %g now",
            (double)a->warmup_init, (double)b->warmup_init);
    if (old->lr_warmup_iters != now->lr_warmup_iters)
        put(buf, n, &len, "\n  scheduler.lr_warmup_iters: %d in the checkpoint, %d now",
            (int)old->lr_warmup_iters, (int)now->lr_warmup_iters);
    if (old->lr_warmup_fraction != now->lr_warmup_fraction)
        put(buf, n, &len, "\n  scheduler.lr_warmup_fraction: %g in the checkpoint, %g now",
            old->lr_warmup_fraction, now->lr_warmup_fraction);
    if (old->lr_decay_iters != now->lr_decay_iters)
        put(buf, n, &len, "\n  scheduler.lr_decay_iters: %d in the checkpoint, %d now",
            (int)old->lr_decay_iters, (int)now->lr_decay_iters);
    if (old->train_iters != now->train_iters && a->decay_iters != b->decay_iters)
        put(buf, n, &len,
            "\n  train.train_iters: %d in the checkpoint, %d now (the decay steps when "
            "scheduler.lr_decay_iters is 0)",
            (int)old->train_iters, (int)now->train_iters);
    if (a->wsd_decay_iters != b->wsd_decay_iters)
        put(buf, n, &len, "\n  scheduler.lr_wsd_decay_iters: %d in the checkpoint, %d now",
            (int)a->wsd_decay_iters, (int)b->wsd_decay_iters);
    if (a->wsd_style != b->wsd_style)
        put(buf, n, &len, "\n  scheduler.lr_wsd_decay_style: %s in the checkpoint, %s now",
            name_of(k_wsd_styles, 4, a->wsd_style), name_of(k_wsd_styles, 4, b->wsd_style));
    if (a->warmup_iters != b->warmup_iters || a->decay_iters != b->decay_iters)
        put(buf, n, &len, "\n  (warmup steps %d -> %d, decay steps %d -> %d)", (int)a->warmup_iters,
            (int)b->warmup_iters, (int)a->decay_iters, (int)b->decay_iters);
    return len > 0 ? len : 1;
}

gt_ckpt_sched gt_trainer_sched_record(const gt_trainer *t) {
    return t->sched_adopted ? t->sched_rec : gt_trainer_ckpt_sched(&t->cfg);
}

int gt_trainer_resume_schedule(gt_trainer *t, const gt_ckpt_sched *saved, const char *path,
                               gt_error *err) {
    gt_ckpt_sched now = gt_trainer_ckpt_sched(&t->cfg);
    char diff[768];
    if (!gt_ckpt_sched_diff(saved, &now, diff, sizeof diff)) return GT_OK;
    const gt_scheduler_config *s = &t->cfg.scheduler;
    if (s->override_opt_param_scheduler && !s->use_checkpoint_opt_param_scheduler) {
        fprintf(stderr,
                "graphtrain: note: checkpoint.load=%s: training on with this configuration's "
                "learning-rate schedule (scheduler.override_opt_param_scheduler=true):%s\n",
                path, diff);
        return GT_OK;
    }
    if (s->use_checkpoint_opt_param_scheduler && !s->override_opt_param_scheduler) {
        t->sched = saved->lr; /* step_begin and the lazy rows' replays read it from here */
        t->sched_adopted = 1;
        t->sched_rec = *saved; /* and later checkpoints record it */
        fprintf(stderr,
                "graphtrain: note: checkpoint.load=%s: training on with the checkpoint's "
                "learning-rate schedule (scheduler.use_checkpoint_opt_param_scheduler=true), "
                "not this configuration's:%s\n",
                path, diff);
        return GT_OK;
    }
    return gt_error_set(err, GT_ERR_INVALID,
                        "checkpoint.load=%s was trained with another learning-rate schedule, so "
                        "resuming would change the rate of every later step:%s\nset these keys "
                        "back to the checkpoint's values, or set "
                        "scheduler.use_checkpoint_opt_param_scheduler=true (keep the "
                        "checkpoint's schedule) or scheduler.override_opt_param_scheduler=true "
                        "(switch to this configuration's)",
                        path, diff);
}
