/* Saving and resuming the trainer: master weights, Adam moments, the device step state, the
 * RNG seed, the training data position and delayed scaling's fp8 state, so a resumed run continues
 * bitwise as if it had never stopped (the learning rate and dropout derive from the restored step
 * counter). */
#include <stdlib.h>
#include <string.h>

#include "config/cuda_keys.h"
#include "train/checkpoint.h"
#include "train/trainer_ckpt_fp8.h"
#include "train/trainer_impl.h"
#include "train/trainer_sched.h"

int gt_trainer_save(gt_trainer *t, const char *dir, gt_error *err) {
    if (!dir || !dir[0])
        return gt_error_set(err, GT_ERR_INVALID,
                            "no checkpoint directory given; set "
                            "checkpoint.save=DIR");
    if (t->dp_stale)
        return gt_error_set(err, GT_ERR_INVALID,
                            "saving a checkpoint of the distributed optimizer at step %lld: "
                            "each rank holds only its shards; call gt_trainer_dp_gather_state "
                            "on every rank first (the training loop does)",
                            (long long)t->steps);
    size_t n = t->n_params;
    float *buf = malloc(3 * n * sizeof(float));
    if (!buf) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory saving a checkpoint");
    gt_backend *b = t->b;
    /* the moments go to the checkpoint as fp32 whatever the run stores them in */
    int rc = gt_trainer_read_moments(t, buf + n, buf + 2 * n, err);
    if (!rc) rc = gt_trainer_read_master(t, buf, err);
    b->ops->memcpy_d2h(b, t->s, &t->h_st[0], t->st, sizeof(gt_step_state));
    if (!rc) rc = b->ops->stream_sync(b, t->s, err);
    gt_ckpt_fp8 fp8 = {0};
    if (!rc) rc = gt_trainer_fp8_state_read(t, &fp8, err);
    if (!rc) {
        gt_ckpt_meta meta;
        memset(&meta, 0, sizeof meta);
        meta.fingerprint = gt_ckpt_fingerprint(&t->cfg, n, meta.shape, sizeof meta.shape);
        gt_cuda_config cuda;
        gt_error cuda_err = {0};
        /* what runs on a GPU (the aliases applied); a CPU run keeps the keys as set */
        if (gt_config_cuda_settings(&t->cfg, &cuda, &cuda_err) != GT_OK) cuda = t->cfg.runtime.cuda;
        char kernels[GT_CKPT_SETTINGS_MAX - 16];
        gt_config_cuda_format(&cuda, kernels, sizeof kernels);
        snprintf(meta.settings, sizeof meta.settings, "runtime.cuda: %s", kernels);
        meta.n_params = n;
        meta.seed = t->cfg.rng.seed;
        meta.data = gt_trainer_data_pos(t);
        meta.state = t->h_st[0];
        meta.sched = gt_trainer_sched_record(t);
        rc = gt_ckpt_write_fp8(dir, &meta, buf, buf + n, buf + 2 * n, &fp8, err);
    }
    gt_trainer_fp8_state_free(&fp8);
    free(buf);
    if (rc) return gt_error_wrap(err, "saving checkpoint at step %lld: ", (long long)t->steps);
    return GT_OK;
}

int gt_trainer_load(gt_trainer *t, const char *path, gt_error *err) {
    gt_ckpt_meta meta;
    float *master = NULL, *m = NULL, *v = NULL;
    gt_ckpt_fp8 fp8;
    int rc = gt_ckpt_read_fp8(path, &meta, &master, &m, &v, &fp8, err);
    if (rc) return gt_error_wrap(err, "checkpoint.load=%s: ", path);
    char shape[GT_CKPT_SHAPE_MAX];
    uint64_t fp = gt_ckpt_fingerprint(&t->cfg, t->n_params, shape, sizeof shape);
    if (fp != meta.fingerprint || meta.n_params != t->n_params)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint.load=%s was saved for another model shape:\n  checkpoint: "
                          "%s\n  this run:   %s\nset the model keys to the checkpoint's, or "
                          "start fresh (checkpoint.load=)",
                          path, meta.shape, shape);
    /* a step-0 checkpoint (graphtrain import) is weights alone: no step has drawn from the
     * seed or taken a learning rate, so this run's seed and schedule start from it as set */
    else if (meta.state.step == 0)
        rc = GT_OK;
    else if (meta.seed != t->cfg.rng.seed)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint.load=%s was trained with rng.seed=%llu, this run has "
                          "rng.seed=%llu; set rng.seed=%llu to resume it exactly",
                          path, (unsigned long long)meta.seed, (unsigned long long)t->cfg.rng.seed,
                          (unsigned long long)meta.seed);
    if (!rc && meta.state.step > 0) rc = gt_trainer_resume_schedule(t, &meta.sched, path, err);
    /* a step-0 checkpoint has no scaling history yet: the run's own initial scales stand */
    if (!rc && meta.state.step > 0) rc = gt_trainer_fp8_state_write(t, &fp8, path, err);
    if (!rc) rc = gt_data_set_pos(t->train, meta.data, err);
    if (!rc) t->prefetched = 0; /* the next batch is the checkpoint's */
    if (!rc) {
        gt_backend *b = t->b;
        /* fp32 moments in the checkpoint: exact for an fp32 run, rounded to nearest-even for
         * a bf16 one (exact again when the checkpoint came from a bf16 run) */
        rc = gt_trainer_write_moments(t, m, v, err);
        if (!rc) rc = gt_trainer_write_master(t, master, err);
        gt_step_state st = meta.state;
        st.inject_nan = t->inject_nan; /* the hook belongs to this run's config */
        t->h_st[0] = st;
        b->ops->memcpy_h2d(b, t->s, t->st, &t->h_st[0], sizeof st);
        if (!rc) rc = b->ops->stream_sync(b, t->s, err);
        t->steps = st.step;
    }
    free(master);
    free(m);
    free(v);
    gt_trainer_fp8_state_free(&fp8);
    return rc;
}
