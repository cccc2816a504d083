/* `graphtrain bench --parity DIR`: writes what bench/torch_reference.py needs to replay a short
 * run in PyTorch and compare: the resolved config, the initial weights, the token batches of
 * every step, graphtrain's per-step losses and the gradients of step 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/weights_io.h"
#include "config/keys.h"
#include "core/atomic_file.h"
#include "data/data.h"
#include "train/trainer.h"

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The token batches the trainer will read: a second mock source with the same config yields
 * the same sequence. Format (little-endian): u32 magic "GTTK", version, steps, micro-batches
 * per step, B, T, 2 x u32 reserved; then per step and micro-batch tokens[B*T] and
 * targets[B*T] as int32. */
static int write_tokens(const gt_config *c, const char *path, int steps, int micro, gt_error *err) {
    int B = c->train.micro_batch_size, T = c->model.seq_length;
    size_t n = (size_t)B * T;
    gt_data *d = NULL;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    unsigned char *buf = malloc(2 * n * 4);
    gt_atomic_file a;
    int rc = (!tok || !tgt || !buf)
                 ? gt_error_set(err, GT_ERR_NOMEM, "parity: out of host memory for tokens")
                 : GT_OK;
    if (!rc) rc = gt_data_create(&d, c, GT_SPLIT_TRAIN, err);
    if (!rc) rc = gt_atomic_open(&a, path, err);
    if (!rc) {
        unsigned char hdr[32] = {0};
        put_u32(hdr, GT_PARITY_TOKENS_MAGIC);
        put_u32(hdr + 4, 1);
        put_u32(hdr + 8, (uint32_t)steps);
        put_u32(hdr + 12, (uint32_t)micro);
        put_u32(hdr + 16, (uint32_t)B);
        put_u32(hdr + 20, (uint32_t)T);
        rc = gt_atomic_write(&a, hdr, sizeof hdr, err);
        for (int s = 0; !rc && s < steps * micro; s++) {
            rc = gt_data_next(d, tok, tgt, B, err);
            if (rc) {
                gt_atomic_abort(&a);
                break;
            }
            for (size_t i = 0; i < n; i++) {
                put_u32(buf + 4 * i, (uint32_t)tok[i]);
                put_u32(buf + 4 * (n + i), (uint32_t)tgt[i]);
            }
            rc = gt_atomic_write(&a, buf, 2 * n * 4, err);
        }
        if (!rc) rc = gt_atomic_commit(&a, err);
    }
    gt_data_destroy(d);
    free(tok);
    free(tgt);
    free(buf);
    return rc;
}

static int write_config(const gt_config *c, const char *path, gt_error *err) {
    cJSON *o = gt_config_to_json(c);
    int rc = o ? gt_json_write_file(path, o, err)
               : gt_error_set(err, GT_ERR_NOMEM, "parity: out of host memory");
    cJSON_Delete(o);
    return rc ? gt_error_wrap(err, "parity: ") : GT_OK;
}

static void add_floats(cJSON *o, const char *key, const float *v, int n) {
    cJSON *list = cJSON_AddArrayToObject(o, key);
    for (int i = 0; list && i < n; i++)
        cJSON_AddItemToArray(list, cJSON_CreateNumber((double)v[i]));
}

static int write_losses(const char *path, const char *backend, int steps, int micro,
                        const float *vals, gt_error *err) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "backend", backend);
    cJSON_AddNumberToObject(o, "steps", steps);
    cJSON_AddNumberToObject(o, "micro_batches", micro);
    add_floats(o, "loss", vals, steps);
    add_floats(o, "aux_loss", vals + steps, steps);
    add_floats(o, "lr", vals + 2 * steps, steps);
    add_floats(o, "grad_norm", vals + 3 * steps, steps);
    int rc = o ? gt_json_write_file(path, o, err)
               : gt_error_set(err, GT_ERR_NOMEM, "parity: out of host memory");
    cJSON_Delete(o);
    return rc ? gt_error_wrap(err, "parity: ") : GT_OK;
}

/* Steps the trainer, exporting the gradients after step 1. */
static int run_steps(gt_trainer *t, const char *dir, int steps, float *vals, gt_error *err) {
    char path[GT_PATH_MAX + 64];
    for (int s = 0; s < steps; s++) {
        gt_step_stats st;
        memset(&st, 0, sizeof st);
        int rc = gt_trainer_step(t, &st, err);
        if (rc) return gt_error_wrap(err, "parity: step %d: ", s + 1);
        vals[s] = st.loss;
        vals[steps + s] = st.aux_loss;
        vals[2 * steps + s] = st.lr;
        vals[3 * steps + s] = st.grad_norm;
        if (s == 0) {
            snprintf(path, sizeof path, "%s/grads_step1.gtw", dir);
            if ((rc = gt_weights_export_grads(t, path, err))) return rc;
        }
    }
    return GT_OK;
}

int gt_bench_parity(const gt_config *cfg, const char *dir, int steps, gt_error *err) {
    if (steps < 1 || steps > 10000)
        return gt_error_set(err, GT_ERR_INVALID,
                            "parity: --parity-steps must be 1..10000 "
                            "(got %d)",
                            steps);
    int rc = gt_mkdirs(dir, err);
    if (rc) return rc;
    gt_config c = *cfg;
    /* PyTorch cannot replay graphtrain's Philox dropout masks: parity runs without dropout. */
    c.model.attention_dropout = 0;
    c.model.hidden_dropout = 0;
    c.dataset.source = GT_DATA_MOCK;
    if (c.train.train_iters < steps) c.train.train_iters = steps;
    c.train.exit_interval = 0;
    c.train.eval_interval = 0;
    c.checkpoint.save[0] = '\0';
    c.logger.metrics_file[0] = '\0';
    int mb = c.train.micro_batch_size > 0 ? c.train.micro_batch_size : 1;
    int micro = c.train.global_batch_size > mb ? c.train.global_batch_size / mb : 1;
    char path[GT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = write_config(&c, path, err))) return rc;
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    if ((rc = write_tokens(&c, path, steps, micro, err))) return rc;
    gt_trainer *t = NULL;
    float *vals = calloc((size_t)steps * 4, sizeof *vals);
    if (!vals) return gt_error_set(err, GT_ERR_NOMEM, "parity: out of host memory");
    rc = gt_trainer_create(&t, &c, err);
    if (!rc) {
        snprintf(path, sizeof path, "%s/weights.gtw", dir);
        rc = gt_weights_export(t, path, err);
    }
    if (!rc) rc = run_steps(t, dir, steps, vals, err);
    gt_backend *b = t ? gt_trainer_backend(t) : NULL;
    const char *backend = b && b->kind == GT_BACKEND_CUDA ? "cuda" : "cpu";
    gt_trainer_destroy(t);
    if (!rc) {
        snprintf(path, sizeof path, "%s/graphtrain_losses.json", dir);
        rc = write_losses(path, backend, steps, micro, vals, err);
    }
    free(vals);
    return rc;
}
