/* The metrics writer: JSONL records through core/json.h and TensorBoard scalars through
 * train/tb_events.h; see metrics.h. */
#include "train/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/keys.h"
#include "core/atomic_file.h"
#include "core/build_info.h"
#include "core/json.h"
#include "core/read_file.h"
#include "train/tb_events.h"

#define METRICS_FILE_MAX ((size_t)1 << 34) /* what a resume reads back: 16 GiB */
#define WHAT_MAX (GT_PATH_MAX + 32)

struct gt_metrics {
    FILE *jsonl;
    char what[WHAT_MAX]; /* "logger.metrics_file=PATH", for messages */
    gt_tb_writer *tb;
};

double gt_metrics_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A number that JSON can hold; NaN and Inf go in as null and are named in "nonfinite" (created
 * on the first one) as "nan", "inf" or "-inf", so the record stays valid and says what the
 * value was. */
static void add_num(cJSON *o, cJSON **nonfinite, const char *key, double v) {
    if (isfinite(v)) {
        cJSON_AddNumberToObject(o, key, v);
        return;
    }
    cJSON_AddNullToObject(o, key);
    if (!*nonfinite) *nonfinite = cJSON_CreateObject();
    cJSON_AddStringToObject(*nonfinite, key, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

/* The trainer's float values (loss, lr, grad norm) with the digits a float has. */
static void add_float(cJSON *o, cJSON **nonfinite, const char *key, float v) {
    if (isfinite(v))
        cJSON_AddItemToObject(o, key, gt_json_float(v));
    else
        add_num(o, nonfinite, key, v);
}

static void add_nonfinite(cJSON *o, cJSON *nonfinite) {
    if (nonfinite) cJSON_AddItemToObject(o, "nonfinite", nonfinite);
}

/* Does a resumed run keep this line? Steps up to start, and the run records of runs that began
 * before it; not a line that does not parse (one cut short by a crash). */
static int keep_line(const char *line, size_t n, long long start, int *unreadable) {
    cJSON *o = cJSON_ParseWithLength(line, n);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        (*unreadable)++;
        return 0;
    }
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
    const cJSON *run_start = cJSON_GetObjectItemCaseSensitive(o, "start_step");
    int keep = cJSON_IsNumber(step)        ? step->valuedouble <= (double)start
               : cJSON_IsNumber(run_start) ? run_start->valuedouble < (double)start
                                           : 1;
    cJSON_Delete(o);
    return keep;
}

/* Rewrites path (temporary file and rename) without the records past start, when it has any,
 * and says on out what it dropped. A missing file is left to the caller's fopen. */
static int trim_past(const char *path, const char *what, long long start, FILE *out,
                     gt_error *err) {
    FILE *probe = fopen(path, "r");
    if (!probe) return GT_OK;
    fclose(probe);
    char *text = NULL;
    size_t n = 0;
    int rc = gt_read_file(path, METRICS_FILE_MAX, &text, &n, err);
    if (rc) return gt_error_wrap(err, "%s: reading it back to resume: ", what);
    gt_atomic_file a;
    rc = gt_atomic_open(&a, path, err);
    int dropped = 0, unreadable = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t end = i;
        while (end < n && text[end] != '\n')
            end++;
        if (end > i) {
            if (keep_line(text + i, end - i, start, &unreadable))
                rc = gt_atomic_write(&a, text + i, end - i + (end < n), err);
            else
                dropped++;
        }
        i = end + 1;
    }
    free(text);
    if (!rc && dropped == 0) {
        gt_atomic_abort(&a); /* nothing past start: the file stays as it is */
        return GT_OK;
    }
    if (!rc) rc = gt_atomic_commit(&a, err);
    if (rc) {
        gt_atomic_abort(&a);
        return gt_error_wrap(err, "%s: dropping the records past step %lld: ", what, start);
    }
    fprintf(out, "metrics: resuming at step %lld, dropped %d record%s past it from %s", start,
            dropped - unreadable, dropped - unreadable == 1 ? "" : "s", path);
    if (unreadable)
        fprintf(out, " (and %d line%s that did not parse)", unreadable, unreadable == 1 ? "" : "s");
    fputc('\n', out);
    return GT_OK;
}

static int open_jsonl(gt_metrics *m, const gt_metrics_run *run, FILE *out, gt_error *err) {
    const char *path = run->cfg->logger.metrics_file;
    snprintf(m->what, sizeof m->what, "logger.metrics_file=%s", path);
    char dir[GT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        int rc = gt_mkdirs(dir, err);
        if (rc) return gt_error_wrap(err, "%s: ", m->what);
    }
    if (run->resumed) {
        int rc = trim_past(path, m->what, run->start_step, out, err);
        if (rc) return rc;
    }
    m->jsonl = fopen(path, run->resumed ? "a" : "w");
    if (!m->jsonl)
        return gt_error_set(err, GT_ERR_IO, "%s: cannot open: %s; check the path", m->what,
                            strerror(errno));
    return GT_OK;
}

static int write_record(gt_metrics *m, cJSON *o, gt_error *err) {
    int rc = gt_json_write(m->jsonl, o, GT_JSON_LINE, m->what, err);
    cJSON_Delete(o);
    return rc;
}

static int write_run_record(gt_metrics *m, const gt_metrics_run *run, gt_error *err) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "record", "run");
    cJSON_AddNumberToObject(o, "timestamp", gt_metrics_wall_time());
    cJSON_AddStringToObject(o, "graphtrain_version", GT_BUILD_VERSION);
    cJSON_AddStringToObject(o, "commit", gt_build_commit());
    cJSON_AddStringToObject(o, "backend", run->backend);
    cJSON_AddStringToObject(o, "device", run->device);
    cJSON_AddNumberToObject(o, "start_step", (double)run->start_step);
    cJSON_AddBoolToObject(o, "resumed", run->resumed);
    cJSON_AddNumberToObject(o, "flops_per_token", run->flops_per_token);
    cJSON *cfg = gt_config_to_json(run->cfg);
    if (!cfg) {
        cJSON_Delete(o);
        return gt_error_set(err, GT_ERR_NOMEM, "%s: out of host memory", m->what);
    }
    cJSON_AddItemToObject(o, "config", cfg);
    return write_record(m, o, err);
}

int gt_metrics_open(gt_metrics **out_m, const gt_metrics_run *run, FILE *out, gt_error *err) {
    *out_m = NULL;
    gt_metrics *m = calloc(1, sizeof *m);
    if (!m) return gt_error_set(err, GT_ERR_NOMEM, "metrics: out of host memory");
    int rc = GT_OK;
    if (run->cfg->logger.metrics_file[0]) {
        rc = open_jsonl(m, run, out, err);
        if (!rc) rc = write_run_record(m, run, err);
    }
    if (!rc && run->cfg->logger.tensorboard_dir[0]) {
        double now = gt_metrics_wall_time();
        rc = gt_tb_open(&m->tb, run->cfg->logger.tensorboard_dir, now, err);
        /* TensorBoard drops what earlier files hold from this step on: the repeated steps */
        if (!rc && run->resumed) rc = gt_tb_session_start(m->tb, run->start_step + 1, now, err);
    }
    if (rc) {
        gt_metrics_close(m, NULL);
        return rc;
    }
    *out_m = m;
    return GT_OK;
}

int gt_metrics_write_step(gt_metrics *m, const gt_metrics_record *r, gt_error *err) {
    const gt_step_stats *s = r->s;
    double now = gt_metrics_wall_time();
    if (m->jsonl) {
        cJSON *o = cJSON_CreateObject(), *nf = NULL;
        cJSON_AddNumberToObject(o, "step", (double)s->step);
        cJSON_AddNumberToObject(o, "timestamp", now);
        add_float(o, &nf, "loss", s->loss);
        add_num(o, &nf, "loss_avg", r->loss_avg);
        add_float(o, &nf, "lr", s->lr);
        add_float(o, &nf, "grad_norm", s->grad_norm);
        add_float(o, &nf, "aux_loss", s->aux_loss);
        add_num(o, &nf, "tokens_per_s", s->tokens_per_s);
        add_num(o, &nf, "tflops", r->tflops);
        add_num(o, &nf, "ms", s->ms);
        add_num(o, &nf, "elapsed_s", r->elapsed_s);
        add_num(o, &nf, "eta_s", r->eta_s);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)r->peak_bytes);
        cJSON_AddStringToObject(o, "mode", r->mode);
        cJSON_AddNumberToObject(o, "skipped", s->skipped);
        add_nonfinite(o, nf);
        int rc = write_record(m, o, err);
        if (rc) return rc;
    }
    if (m->tb) {
        static const char *const tags[] = {"train/loss",        "train/lr",
                                           "train/grad_norm",   "throughput/tokens_per_s",
                                           "throughput/tflops", "memory/peak_bytes"};
        const float v[] = {s->loss,          s->lr,
                           s->grad_norm,     (float)s->tokens_per_s,
                           (float)r->tflops, (float)r->peak_bytes};
        return gt_tb_scalars(m->tb, (long long)s->step, now, tags, v, 6, err);
    }
    return GT_OK;
}

int gt_metrics_write_eval(gt_metrics *m, long long step, float loss, gt_error *err) {
    double now = gt_metrics_wall_time();
    if (m->jsonl) {
        cJSON *o = cJSON_CreateObject(), *nf = NULL;
        cJSON_AddNumberToObject(o, "step", (double)step);
        cJSON_AddNumberToObject(o, "timestamp", now);
        add_float(o, &nf, "eval_loss", loss);
        add_num(o, &nf, "eval_ppl", exp((double)loss));
        add_nonfinite(o, nf);
        int rc = write_record(m, o, err);
        if (rc) return rc;
    }
    if (m->tb) {
        static const char *const tags[] = {"eval/loss"};
        return gt_tb_scalars(m->tb, step, now, tags, &loss, 1, err);
    }
    return GT_OK;
}

int gt_metrics_close(gt_metrics *m, gt_error *err) {
    if (!m) return GT_OK;
    int rc = GT_OK;
    if (m->jsonl) {
        errno = 0;
        if (fclose(m->jsonl) != 0)
            rc = gt_error_set(err, GT_ERR_IO,
                              "%s: closing failed: %s; free disk space or write somewhere else",
                              m->what, errno ? strerror(errno) : "I/O error");
    }
    gt_error tb_err = {0};
    int tb_rc = gt_tb_close(m->tb, &tb_err);
    if (tb_rc && !rc) {
        rc = tb_rc;
        if (err) *err = tb_err;
    }
    free(m);
    return rc;
}
