/* Delayed scaling's state through checkpoints (trainer_ckpt_fp8.h). Current and blockwise
 * scaling take every scale from the step's own tensors, so only fp8_ds has state to carry;
 * the checkpoint still names the writer's recipe, so a refusal can say what it trained with. */
#include <stdlib.h>
#include <string.h>

#include "model/model_fp8.h"
#include "train/trainer_ckpt_fp8.h"
#include "train/trainer_impl.h"

static const char *recipe_name(uint32_t r) {
    switch (r) {
    case GT_FP8_RECIPE_TENSORWISE:
        return "fp8_cs";
    case GT_FP8_RECIPE_DELAYED:
        return "fp8_ds";
    case GT_FP8_RECIPE_BLOCKWISE:
        return "fp8_sc";
    case GT_FP8_RECIPE_MXFP8:
        return "fp8_mx";
    default:
        return "no fp8 recipe";
    }
}

int gt_trainer_fp8_state_read(gt_trainer *t, gt_ckpt_fp8 *out, gt_error *err) {
    memset(out, 0, sizeof *out);
    out->info.recipe = (uint32_t)gt_compute_dtype_fp8_recipe(t->cfg.model.compute_dtype);
    gt_fp8_meta *meta;
    float *history;
    int n, len;
    if (!gt_model_fp8_delayed_state(t->m, &meta, &history, &n, &len)) return GT_OK;
    size_t mb = (size_t)n * sizeof(gt_fp8_meta), hb = (size_t)n * (size_t)len * sizeof(float);
    out->meta = malloc(mb);
    out->history = malloc(hb);
    if (!out->meta || !out->history) {
        gt_trainer_fp8_state_free(out);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory saving the fp8 state");
    }
    gt_backend *b = t->b;
    b->ops->memcpy_d2h(b, t->s, out->meta, meta, mb);
    b->ops->memcpy_d2h(b, t->s, out->history, history, hb);
    int rc = b->ops->stream_sync(b, t->s, err);
    if (rc) {
        gt_trainer_fp8_state_free(out);
        return rc;
    }
    out->info =
        (gt_ckpt_fp8_info){out->info.recipe, (uint32_t)n, sizeof(gt_fp8_meta), (uint32_t)len};
    return GT_OK;
}

void gt_trainer_fp8_state_free(gt_ckpt_fp8 *s) {
    if (!s) return;
    free(s->meta);
    free(s->history);
    s->meta = NULL;
    s->history = NULL;
}

/* Each slot's format (E4M3 input and weight, the gradient's E4M3 or E5M2) is this run's:
 * a scale learned for the other format would be off by their ranges' ratio. */
static int check_formats(gt_trainer *t, const gt_fp8_meta *saved, const gt_fp8_meta *dev, int n,
                         const char *path, gt_error *err) {
    gt_fp8_meta *now = malloc((size_t)n * sizeof *now);
    if (!now) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory resuming the fp8 state");
    gt_backend *b = t->b;
    b->ops->memcpy_d2h(b, t->s, now, dev, (size_t)n * sizeof *now);
    int rc = b->ops->stream_sync(b, t->s, err);
    for (int i = 0; !rc && i < n; i++)
        if (saved[i].format != now[i].format)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "checkpoint.load=%s: its delayed scaling kept the gradients in %s, "
                              "this run has them in %s; set model.fp8 to the checkpoint's "
                              "(hybrid: E5M2 gradients, e4m3: E4M3), or start fresh "
                              "(checkpoint.load=)",
                              path, saved[i].format == GT_FP8_E4M3 ? "E4M3" : "E5M2",
                              now[i].format == GT_FP8_E4M3 ? "E4M3" : "E5M2");
    free(now);
    return rc;
}

int gt_trainer_fp8_state_write(gt_trainer *t, const gt_ckpt_fp8 *in, const char *path,
                               gt_error *err) {
    gt_fp8_meta *meta;
    float *history;
    int n, len;
    if (!gt_model_fp8_delayed_state(t->m, &meta, &history, &n, &len)) return GT_OK;
    const gt_ckpt_fp8_info *f = &in->info;
    if (f->n_meta == 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint.load=%s holds no delayed-scaling state (it was trained "
                            "with %s, or written before checkpoint format %d): this "
                            "model.compute_dtype=fp8_ds run would restart its amax history and "
                            "scales instead of continuing them; resume with the recipe it "
                            "trained with, or -c fp8_cs / fp8_sc (their scales come from each "
                            "step's tensors), or start fresh (checkpoint.load=)",
                            path, recipe_name(f->recipe), GT_CKPT_VERSION);
    if (f->meta_bytes != sizeof(gt_fp8_meta))
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint.load=%s: its fp8 slots are %u bytes, this graphtrain's "
                            "%zu; it cannot be resumed here, start fresh (checkpoint.load=)",
                            path, f->meta_bytes, sizeof(gt_fp8_meta));
    if ((int)f->n_meta != n)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint.load=%s has delayed-scaling state for %u fp8 tensors, "
                            "this run has %d: the layers kept in bf16 differ; set "
                            "model.first_last_layers_bf16, num_layers_at_start_in_bf16 and "
                            "num_layers_at_end_in_bf16 as the checkpoint's run did",
                            path, f->n_meta, n);
    if ((int)f->history_len != len)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint.load=%s kept an amax history of %u steps, this run has "
                            "model.fp8_amax_history_len=%d; set model.fp8_amax_history_len=%u "
                            "to resume it exactly",
                            path, f->history_len, len, f->history_len);
    int rc = check_formats(t, in->meta, meta, n, path, err);
    if (rc) return rc;
    gt_backend *b = t->b;
    b->ops->memcpy_h2d(b, t->s, meta, in->meta, (size_t)n * sizeof(gt_fp8_meta));
    b->ops->memcpy_h2d(b, t->s, history, in->history, (size_t)n * (size_t)len * sizeof(float));
    return b->ops->stream_sync(b, t->s, err);
}
