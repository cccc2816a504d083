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

/* A record being built; failed is set when cJSON could not allocate a part of it, so a record
 * is written whole or the run stops (GT_ERR_NOMEM), never written short. */
typedef struct rec {
    cJSON *o, *nonfinite;
    int failed;
} rec;

static rec rec_new(void) {
    rec r = {cJSON_CreateObject(), NULL, 0};
    r.failed = !r.o;
    return r;
}

static void put(rec *r, cJSON *into, const char *key, cJSON *v) {
    if (!v || !into || !cJSON_AddItemToObject(into, key, v)) {
        cJSON_Delete(v);
        r->failed = 1;
    }
}

static void put_str(rec *r, const char *key, const char *v) {
    put(r, r->o, key, cJSON_CreateString(v));
}

/* A number that JSON can hold; NaN and Inf go in as null and are named in "nonfinite" as
 * "nan", "inf" or "-inf", so the record stays valid and says what the value was. */
static void put_num(rec *r, const char *key, double v) {
    if (isfinite(v)) {
        put(r, r->o, key, cJSON_CreateNumber(v));
        return;
    }
    put(r, r->o, key, cJSON_CreateNull());
    if (!r->nonfinite) r->nonfinite = cJSON_CreateObject();
    put(r, r->nonfinite, key, cJSON_CreateString(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"));
}

/* The trainer's float values (loss, lr, grad norm) with the digits a float has. */
static void put_float(rec *r, const char *key, float v) {
    if (isfinite(v))
        put(r, r->o, key, gt_json_float(v));
    else
        put_num(r, key, v);
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

/* Writes the record (with its "nonfinite" part last) and frees it. */
static int write_record(gt_metrics *m, rec *r, gt_error *err) {
    if (r->nonfinite) {
        put(r, r->o, "nonfinite", r->nonfinite);
        r->nonfinite = NULL;
    }
    int rc = r->failed ? gt_error_set(err, GT_ERR_NOMEM, "%s: out of host memory", m->what)
                       : gt_json_write(m->jsonl, r->o, GT_JSON_LINE, m->what, err);
    cJSON_Delete(r->o);
    return rc;
}

static int write_run_record(gt_metrics *m, const gt_metrics_run *run, gt_error *err) {
    rec r = rec_new();
    put_str(&r, "record", "run");
    put_num(&r, "timestamp", gt_metrics_wall_time());
    put_str(&r, "graphtrain_version", GT_BUILD_VERSION);
    put_str(&r, "commit", gt_build_commit());
    put_str(&r, "backend", run->backend);
    put_str(&r, "device", run->device);
    put_num(&r, "start_step", (double)run->start_step);
    put(&r, r.o, "resumed", cJSON_CreateBool(run->resumed));
    put_num(&r, "flops_per_token", run->flops_per_token);
    put(&r, r.o, "config", gt_config_to_json(run->cfg));
    return write_record(m, &r, err);
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
        rec o = rec_new();
        put_num(&o, "step", (double)s->step);
        put_num(&o, "timestamp", now);
        put_float(&o, "loss", s->loss);
        put_num(&o, "loss_avg", r->loss_avg);
        put_float(&o, "lr", s->lr);
        put_float(&o, "grad_norm", s->grad_norm);
        put_float(&o, "aux_loss", s->aux_loss);
        put_num(&o, "tokens_per_s", s->tokens_per_s);
        put_num(&o, "tflops", r->tflops);
        put_num(&o, "ms", s->ms);
        put_num(&o, "elapsed_s", r->elapsed_s);
        put_num(&o, "eta_s", r->eta_s);
        put_num(&o, "peak_bytes", (double)r->peak_bytes);
        put_str(&o, "mode", r->mode);
        put_num(&o, "skipped", s->skipped);
        int rc = write_record(m, &o, err);
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
        rec o = rec_new();
        put_num(&o, "step", (double)step);
        put_num(&o, "timestamp", now);
        put_float(&o, "eval_loss", loss);
        put_num(&o, "eval_ppl", exp((double)loss));
        int rc = write_record(m, &o, err);
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
