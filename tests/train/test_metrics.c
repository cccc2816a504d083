/* The metrics of a training run (train/metrics.h, train/train_loop.c) on a tiny CPU model: every
 * JSONL record parses, a NaN step included; each has a timestamp; the first holds the
 * configuration and versions; a full disk fails the run; a resumed run does not repeat steps;
 * the progress line has elapsed time, ETA and TFLOP/s. */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config/keys.h"
#include "core/read_file.h"
#include "graphtrain.h"
#include "model/model.h"
#include "train/metrics.h"
#include "train/train_loop.h"

#define MAX_RECORDS 64

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void tiny_config(gt_config *c, const char *metrics_path) {
    gt_config_defaults(c);
    static const char *kv[] = {
        "runtime.device=cpu",          "model.num_layers=1",           "model.hidden_size=32",
        "model.num_attention_heads=2", "model.num_query_groups=2",     "model.ffn_hidden_size=64",
        "model.vocab_size=64",         "model.seq_length=16",          "train.micro_batch_size=2",
        "train.global_batch_size=2",   "model.cuda_graph_impl=none",   "logger.log_interval=1",
        "train.train_iters=4",         "scheduler.lr_decay_iters=100", NULL};
    for (int i = 0; kv[i]; i++)
        set(c, kv[i]);
    if (metrics_path) {
        char buf[600];
        snprintf(buf, sizeof buf, "logger.metrics_file=%s", metrics_path);
        set(c, buf);
    }
    gt_config_finalize(c);
}

static int run(const gt_config *c, FILE *out, gt_error *err) {
    FILE *sink = out ? out : tmpfile();
    gt_train_run_opts o = {.out = sink, .quiet = 1};
    int rc = gt_train_run(c, &o, NULL, err);
    if (!out) fclose(sink);
    return rc;
}

/* Every line of path parsed; fails the test on a line that is not a JSON object. */
static int read_records(const char *path, cJSON **rec) {
    char *text = NULL;
    size_t n = 0;
    gt_error err = {0};
    if (gt_read_file(path, 1 << 24, &text, &n, &err)) fail_msg("%s", err.msg);
    int count = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (count == MAX_RECORDS) fail_msg("more than %d records", MAX_RECORDS);
        rec[count] = cJSON_Parse(line);
        if (!cJSON_IsObject(rec[count])) fail_msg("record %d is not valid JSON: %s", count, line);
        count++;
    }
    free(text);
    return count;
}

static void free_records(cJSON **rec, int n) {
    for (int i = 0; i < n; i++)
        cJSON_Delete(rec[i]);
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) fail_msg("no number \"%s\"", key);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) fail_msg("no string \"%s\"", key);
    return v->valuestring;
}

static void metrics_path(char *path, size_t n) {
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, n, "%s/m.jsonl", dir);
}

static void test_nan_step_record_is_valid_json_with_null_and_a_flag(void **state) {
    (void)state;
    char path[300];
    metrics_path(path, sizeof path);
    gt_config c;
    tiny_config(&c, path);
    set(&c, "debug.inject_nan_at_step=3");
    gt_error err = {0};
    assert_int_equal(run(&c, NULL, &err), GT_ERR_NUMERIC);
    cJSON *rec[MAX_RECORDS] = {0};
    int n = read_records(path, rec);
    assert_int_equal(n, 4); /* run record, steps 1-3 */
    const cJSON *last = rec[3];
    assert_int_equal((int)num(last, "step"), 3);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(last, "loss")));
    const cJSON *nf = cJSON_GetObjectItemCaseSensitive(last, "nonfinite");
    assert_string_equal(str(nf, "loss"), "nan");
    assert_int_equal((int)num(last, "skipped"), 1);
    assert_null(cJSON_GetObjectItemCaseSensitive(rec[2], "nonfinite")); /* step 2 was finite */
    free_records(rec, n);
}

static void test_every_record_has_a_timestamp(void **state) {
    (void)state;
    char path[300];
    metrics_path(path, sizeof path);
    gt_config c;
    tiny_config(&c, path);
    set(&c, "train.eval_interval=2");
    set(&c, "train.eval_iters=1");
    /* the run's own clock: time() reads the coarse realtime clock, which can be a tick ahead
     * of the fine one the records use, so a record could seem older than the run's start */
    double before = gt_metrics_wall_time();
    gt_error err = {0};
    assert_int_equal(run(&c, NULL, &err), GT_OK);
    double after = gt_metrics_wall_time();
    cJSON *rec[MAX_RECORDS] = {0};
    int n = read_records(path, rec);
    assert_int_equal(n, 1 + 4 + 2); /* run record, 4 steps, 2 evaluations */
    int evals = 0;
    for (int i = 0; i < n; i++) {
        double t = num(rec[i], "timestamp");
        assert_true(t >= before && t <= after);
        if (i > 0) assert_true(t >= num(rec[i - 1], "timestamp"));
        evals += cJSON_GetObjectItemCaseSensitive(rec[i], "eval_loss") != NULL;
    }
    assert_int_equal(evals, 2);
    free_records(rec, n);
}

static void test_first_record_holds_configuration_and_versions(void **state) {
    (void)state;
    char path[300];
    metrics_path(path, sizeof path);
    gt_config c;
    tiny_config(&c, path);
    gt_error err = {0};
    assert_int_equal(run(&c, NULL, &err), GT_OK);
    cJSON *rec[MAX_RECORDS] = {0};
    int n = read_records(path, rec);
    const cJSON *r = rec[0];
    assert_string_equal(str(r, "record"), "run");
    assert_string_equal(str(r, "graphtrain_version"), GT_VERSION);
    assert_true(strlen(str(r, "commit")) > 0);
    assert_string_equal(str(r, "backend"), "cpu");
    assert_non_null(strstr(str(r, "device"), "CPU"));
    assert_int_equal((int)num(r, "start_step"), 0);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "resumed")));
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(r, "config");
    size_t keys;
    gt_config_keys(&keys);
    assert_int_equal(cJSON_GetArraySize(cfg), (int)keys);
    assert_int_equal((int)num(cfg, "model.hidden_size"), 32);
    assert_string_equal(str(cfg, "logger.metrics_file"), path);
    free_records(rec, n);
}

static void test_full_disk_fails_the_run_with_a_clear_error(void **state) {
    (void)state;
    FILE *probe = fopen("/dev/full", "w");
    if (!probe) skip();
    fclose(probe);
    gt_config c;
    tiny_config(&c, "/dev/full");
    gt_error err = {0};
    assert_int_equal(run(&c, NULL, &err), GT_ERR_IO);
    assert_non_null(strstr(err.msg, "logger.metrics_file=/dev/full"));
    assert_non_null(strstr(err.msg, "No space left on device"));
    /* and the binary exits non-zero saying so */
    char *out = malloc(1 << 16);
    assert_non_null(out);
    int st = gt_test_run("train runtime.device=cpu model.num_layers=1 model.hidden_size=32 "
                         "model.num_attention_heads=2 model.ffn_hidden_size=64 "
                         "model.vocab_size=64 model.seq_length=16 train.micro_batch_size=2 "
                         "train.global_batch_size=2 train.train_iters=3 "
                         "logger.metrics_file=/dev/full",
                         out, 1 << 16);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "No space left on device"));
    free(out);
}

/* Run A trains steps 1-3 and saves; run B resumes to step 6; run C resumes from A's checkpoint
 * again (B's steps 4-6 are to be redone) after a crash left half a line. */
static void test_resumed_run_continues_at_its_step_without_repeats(void **state) {
    (void)state;
    char dir[256], path[300], ckpt[300], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.jsonl", dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    gt_config a, b;
    tiny_config(&a, path);
    set(&a, "train.train_iters=3");
    snprintf(kv, sizeof kv, "checkpoint.save=%s", ckpt);
    set(&a, kv);
    gt_error err = {0};
    assert_int_equal(run(&a, NULL, &err), GT_OK);
    tiny_config(&b, path);
    set(&b, "train.train_iters=6");
    snprintf(kv, sizeof kv, "checkpoint.load=%s", ckpt);
    set(&b, kv);
    assert_int_equal(run(&b, NULL, &err), GT_OK);
    FILE *f = fopen(path, "a");
    fputs("{\"step\": 7, \"lo", f); /* a crash in the middle of a record */
    fclose(f);
    FILE *out = tmpfile();
    assert_int_equal(run(&b, out, &err), GT_OK);
    char said[8192] = "";
    rewind(out);
    size_t got = fread(said, 1, sizeof said - 1, out);
    said[got] = '\0';
    fclose(out);
    assert_non_null(strstr(said, "dropped 4 records past it"));
    assert_non_null(strstr(said, "1 line that did not parse"));
    cJSON *rec[MAX_RECORDS] = {0};
    int n = read_records(path, rec);
    int runs = 0, next = 1;
    for (int i = 0; i < n; i++) {
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(rec[i], "step");
        if (!step) {
            runs++;
            continue;
        }
        assert_int_equal((int)step->valuedouble, next); /* each step once, in order */
        next++;
    }
    assert_int_equal(next, 7);
    assert_int_equal(runs, 2); /* A's, and C's (B's began at step 3 too: C replaces it) */
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec[4], "resumed")));
    assert_int_equal((int)num(rec[4], "start_step"), 3);
    free_records(rec, n);
}

static void test_progress_line_shows_elapsed_eta_and_tflops(void **state) {
    (void)state;
    char path[300];
    metrics_path(path, sizeof path);
    gt_config c;
    tiny_config(&c, path);
    FILE *out = tmpfile();
    gt_error err = {0};
    assert_int_equal(run(&c, out, &err), GT_OK);
    rewind(out);
    char line[1024];
    int steps = 0;
    gt_model_info info;
    assert_int_equal(gt_model_plan(&c, 4, &info, &err), GT_OK);
    cJSON *rec[MAX_RECORDS] = {0};
    int n = read_records(path, rec);
    assert_int_equal(n, 1 + 4); /* run record, 4 steps */
    while (fgets(line, sizeof line, out) && steps < 4) {
        if (strncmp(line, "step ", 5)) continue;
        steps++;
        double tok_s, tflops;
        const char *p = strstr(line, "grad norm");
        assert_non_null(p);
        assert_int_equal(sscanf(strchr(p, '|') + 1, " %lf tok/s | %lf TFLOP/s", &tok_s, &tflops),
                         2);
        /* the WORKLOADS.md FLOPs of a token, at the step's token rate */
        double want = info.flops_per_token * num(rec[steps], "tokens_per_s") / 1e12;
        assert_true(fabs(tflops - want) <= 5e-3 * want); /* 3 digits printed */
        assert_true(fabs(num(rec[steps], "tflops") - want) <= 1e-12 * want);
        assert_non_null(strstr(line, "| elapsed 0:00:"));
        assert_non_null(strstr(line, "| ETA 0:00:"));
        assert_true(num(rec[steps], "elapsed_s") > 0);
    }
    fclose(out);
    assert_int_equal(steps, 4);
    assert_true(num(rec[1], "eta_s") > 0); /* three steps to go after step 1 */
    assert_true(num(rec[4], "eta_s") == 0);
    free_records(rec, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_step_record_is_valid_json_with_null_and_a_flag),
        cmocka_unit_test(test_every_record_has_a_timestamp),
        cmocka_unit_test(test_first_record_holds_configuration_and_versions),
        cmocka_unit_test(test_full_disk_fails_the_run_with_a_clear_error),
        cmocka_unit_test(test_resumed_run_continues_at_its_step_without_repeats),
        cmocka_unit_test(test_progress_line_shows_elapsed_eta_and_tflops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
