/* TensorBoard event files (train/tb_events.h, logger.tensorboard_dir), read back by a reader of
 * this test's own: the name, the TFRecord framing and both CRCs of every record, the file
 * version first, then Events whose scalars equal the metrics file's values; a resumed run
 * starts its file with a SessionLog START at its next step. tests/py/test_tensorboard.py reads
 * the same files with TensorBoard's reader. */
#include "testlib.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "config/keys.h"
#include "core/read_file.h"
#include "train/tb_events.h"
#include "train/train_loop.h"

#define MAX_EVENTS 64
#define MAX_VALUES 8

typedef struct scalar {
    char tag[64];
    float value;
} scalar;

typedef struct event {
    double wall_time;
    long long step;
    char file_version[32];
    int session_start;
    int n_values;
    scalar values[MAX_VALUES];
} event;

/* ---- a minimal protobuf reader for the fields graphtrain writes ---- */
static uint64_t varint(const unsigned char **p, const unsigned char *end) {
    uint64_t v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    fail_msg("truncated varint");
    return 0;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Calls back for each field: number, wire type, varint/fixed value, or bytes. */
typedef void (*field_fn)(void *ctx, int field, int wire, uint64_t v, const unsigned char *data,
                         size_t n);

static void fields(const unsigned char *p, size_t n, field_fn fn, void *ctx) {
    const unsigned char *end = p + n;
    while (p < end) {
        uint64_t key = varint(&p, end);
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (wire == 0) {
            fn(ctx, field, wire, varint(&p, end), NULL, 0);
        } else if (wire == 1 || wire == 5) {
            int w = wire == 1 ? 8 : 4;
            if (end - p < w) fail_msg("truncated fixed field");
            fn(ctx, field, wire, le(p, w), NULL, 0);
            p += w;
        } else if (wire == 2) {
            uint64_t len = varint(&p, end);
            if ((uint64_t)(end - p) < len) fail_msg("truncated bytes field");
            fn(ctx, field, wire, 0, p, (size_t)len);
            p += len;
        } else {
            fail_msg("unexpected wire type %d", wire);
        }
    }
}

static void on_value(void *ctx, int field, int wire, uint64_t v, const unsigned char *d, size_t n) {
    scalar *s = ctx;
    if (field == 1 && wire == 2) snprintf(s->tag, sizeof s->tag, "%.*s", (int)n, (const char *)d);
    if (field == 2 && wire == 5) {
        uint32_t bits = (uint32_t)v;
        memcpy(&s->value, &bits, sizeof bits);
    }
}

static void on_summary(void *ctx, int field, int wire, uint64_t v, const unsigned char *d,
                       size_t n) {
    (void)v;
    event *e = ctx;
    if (field != 1 || wire != 2) fail_msg("Summary field %d", field);
    if (e->n_values == MAX_VALUES) fail_msg("too many values");
    fields(d, n, on_value, &e->values[e->n_values++]);
}

static void on_session_log(void *ctx, int field, int wire, uint64_t v, const unsigned char *d,
                           size_t n) {
    (void)wire;
    (void)d;
    (void)n;
    if (field == 1 && v == 1) ((event *)ctx)->session_start = 1;
}

static void on_event(void *ctx, int field, int wire, uint64_t v, const unsigned char *d, size_t n) {
    event *e = ctx;
    if (field == 1 && wire == 1) memcpy(&e->wall_time, &v, sizeof v);
    if (field == 2 && wire == 0) e->step = (long long)v;
    if (field == 3 && wire == 2)
        snprintf(e->file_version, sizeof e->file_version, "%.*s", (int)n, (const char *)d);
    if (field == 5 && wire == 2) fields(d, n, on_summary, e);
    if (field == 7 && wire == 2) fields(d, n, on_session_log, e); /* session_log */
}

/* Reads every TFRecord of path, checking both CRCs, into ev[]. */
static int read_events(const char *path, event *ev) {
    char *buf = NULL;
    size_t n = 0;
    gt_error err = {0};
    if (gt_read_file(path, 1 << 24, &buf, &n, &err)) fail_msg("%s", err.msg);
    const unsigned char *p = (const unsigned char *)buf, *end = p + n;
    int count = 0;
    while (p < end) {
        if (end - p < 12) fail_msg("truncated record header");
        uint64_t len = le(p, 8);
        assert_int_equal((uint32_t)le(p + 8, 4), gt_tb_masked_crc(gt_crc32c(p, 8)));
        p += 12;
        if ((uint64_t)(end - p) < len + 4) fail_msg("truncated record");
        assert_int_equal((uint32_t)le(p + len, 4), gt_tb_masked_crc(gt_crc32c(p, (size_t)len)));
        if (count == MAX_EVENTS) fail_msg("too many events");
        memset(&ev[count], 0, sizeof ev[count]);
        fields(p, (size_t)len, on_event, &ev[count]);
        count++;
        p += len + 4;
    }
    free(buf);
    return count;
}

static const scalar *find(const event *e, const char *tag) {
    for (int i = 0; i < e->n_values; i++)
        if (!strcmp(e->values[i].tag, tag)) return &e->values[i];
    return NULL;
}

/* The event files in dir, sorted by name (the order TensorBoard reads them). */
static int event_files(const char *dir, char names[][512], int max) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20) && n < max)
            snprintf(names[n++], 512, "%s/%s", dir, e->d_name);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[512];
            memcpy(t, names[j], 512);
            memcpy(names[j], names[j - 1], 512);
            memcpy(names[j - 1], t, 512);
        }
    return n;
}

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void tiny_config(gt_config *c, const char *dir) {
    gt_config_defaults(c);
    static const char *kv[] = {
        "runtime.device=cpu",          "model.num_layers=1",           "model.hidden_size=32",
        "model.num_attention_heads=2", "model.num_query_groups=2",     "model.ffn_hidden_size=64",
        "model.vocab_size=64",         "model.seq_length=16",          "train.micro_batch_size=2",
        "train.global_batch_size=2",   "model.cuda_graph_impl=none",   "logger.log_interval=1",
        "train.train_iters=4",         "scheduler.lr_decay_iters=100", NULL};
    for (int i = 0; kv[i]; i++)
        set(c, kv[i]);
    char kvb[600];
    snprintf(kvb, sizeof kvb, "logger.tensorboard_dir=%s/tb", dir);
    set(c, kvb);
    snprintf(kvb, sizeof kvb, "logger.metrics_file=%s/m.jsonl", dir);
    set(c, kvb);
    gt_config_finalize(c);
}

static void train(const gt_config *c) {
    FILE *sink = tmpfile();
    gt_train_run_opts o = {.out = sink, .quiet = 1};
    gt_error err = {0};
    int rc = gt_train_run(c, &o, NULL, &err);
    fclose(sink);
    if (rc) fail_msg("train: %s", err.msg);
}

static void test_crc32c_matches_the_standard_check_value(void **state) {
    (void)state;
    assert_int_equal(gt_crc32c("123456789", 9), 0xE3069283u); /* the CRC-32C check value */
    assert_int_equal(gt_crc32c("", 0), 0);
    /* TensorFlow's masked CRC of CRC 0: rotate right by 15, add 0xa282ead8 */
    assert_int_equal(gt_tb_masked_crc(0), 0xa282ead8u);
    assert_int_equal(gt_tb_masked_crc(0x00008000u), 0xa282ead9u);
}

static void test_event_file_is_named_events_out_tfevents_time_host(void **state) {
    (void)state;
    char dir[256], tb[300], names[4][512], want[512], host[256];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c, dir);
    long before = (long)time(NULL);
    train(&c);
    snprintf(tb, sizeof tb, "%s/tb", dir);
    assert_int_equal(event_files(tb, names, 4), 1);
    assert_int_equal(gethostname(host, sizeof host), 0);
    long t = 0;
    assert_int_equal(sscanf(strrchr(names[0], '/') + 1, "events.out.tfevents.%ld.", &t), 1);
    assert_true(t >= before && t <= (long)time(NULL));
    snprintf(want, sizeof want, "%s/events.out.tfevents.%ld.%s", tb, t, host);
    assert_string_equal(names[0], want);
}

static void test_event_file_reads_back_with_crcs_and_the_metrics_values(void **state) {
    (void)state;
    char dir[256], tb[300], names[4][512], path[300];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c, dir);
    set(&c, "train.eval_interval=4");
    set(&c, "train.eval_iters=1");
    train(&c);
    snprintf(tb, sizeof tb, "%s/tb", dir);
    assert_int_equal(event_files(tb, names, 4), 1);
    event *ev = calloc(MAX_EVENTS, sizeof *ev);
    assert_non_null(ev);
    int n = read_events(names[0], ev);
    assert_int_equal(n, 1 + 4 + 1); /* file version, 4 steps, 1 evaluation */
    assert_string_equal(ev[0].file_version, "brain.Event:2");
    /* the JSONL records of the same run: run record, then step 1.. */
    snprintf(path, sizeof path, "%s/m.jsonl", dir);
    char *text = NULL;
    size_t len = 0;
    gt_error err = {0};
    assert_int_equal(gt_read_file(path, 1 << 24, &text, &len, &err), GT_OK);
    char *save = NULL, *line = NULL;
    assert_non_null(strtok_r(text, "\n", &save)); /* the run record */
    for (int s = 1; s <= 4; s++) {
        line = strtok_r(NULL, "\n", &save);
        assert_non_null(line);
        cJSON *r = cJSON_Parse(line);
        assert_non_null(r);
        const event *e = &ev[s];
        assert_int_equal(e->step, s);
        assert_true(fabs(e->wall_time - cJSON_GetObjectItem(r, "timestamp")->valuedouble) < 1.0);
        static const char *const pairs[][2] = {
            {"train/loss", "loss"},           {"train/lr", "lr"},
            {"train/grad_norm", "grad_norm"}, {"throughput/tokens_per_s", "tokens_per_s"},
            {"throughput/tflops", "tflops"},  {"memory/peak_bytes", "peak_bytes"}};
        for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
            const scalar *v = find(e, pairs[k][0]);
            if (!v) fail_msg("step %d lacks %s", s, pairs[k][0]);
            float want = (float)cJSON_GetObjectItem(r, pairs[k][1])->valuedouble;
            assert_true(v->value == want);
        }
        assert_true(find(e, "memory/peak_bytes")->value > 0);
        cJSON_Delete(r);
    }
    line = strtok_r(NULL, "\n", &save);
    cJSON *r = cJSON_Parse(line);
    assert_non_null(r);
    assert_int_equal(ev[5].step, 4);
    assert_true(find(&ev[5], "eval/loss")->value ==
                (float)cJSON_GetObjectItem(r, "eval_loss")->valuedouble);
    cJSON_Delete(r);
    free(text);
    free(ev);
}

static void test_resumed_run_starts_its_file_with_a_session_start(void **state) {
    (void)state;
    char dir[256], tb[300], names[4][512], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c, dir);
    set(&c, "train.train_iters=2");
    snprintf(kv, sizeof kv, "checkpoint.save=%s/ckpt", dir);
    set(&c, kv);
    train(&c);
    gt_config r;
    tiny_config(&r, dir);
    snprintf(kv, sizeof kv, "checkpoint.load=%s/ckpt", dir);
    set(&r, kv);
    train(&r);
    snprintf(tb, sizeof tb, "%s/tb", dir);
    assert_int_equal(event_files(tb, names, 4), 2); /* the second run's own file */
    event *ev = calloc(MAX_EVENTS, sizeof *ev);
    assert_non_null(ev);
    /* the resumed run's file: the one holding step 3 */
    int n = read_events(names[0], ev);
    if (n < 3 || ev[2].step != 3) n = read_events(names[1], ev);
    assert_int_equal(n, 1 + 1 + 2); /* file version, session start, steps 3 and 4 */
    assert_true(ev[1].session_start);
    assert_int_equal(ev[1].step, 3);
    assert_int_equal(ev[2].step, 3);
    assert_int_equal(ev[3].step, 4);
    free(ev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_matches_the_standard_check_value),
        cmocka_unit_test(test_event_file_is_named_events_out_tfevents_time_host),
        cmocka_unit_test(test_event_file_reads_back_with_crcs_and_the_metrics_values),
        cmocka_unit_test(test_resumed_run_starts_its_file_with_a_session_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
