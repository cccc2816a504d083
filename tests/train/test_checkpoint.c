/* Checkpoints: a resumed run continues bitwise as if uninterrupted (losses, master weights,
 * Adam moments, data position, dropout), and corrupt, truncated, foreign or mismatched
 * checkpoints are refused with a message naming the file and the problem, also hand-made ones
 * whose checksum is right but whose fields are out of range. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/keys.h"
#include "core/bf16.h"
#include "shard_fixture.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "trainer_testing.h"

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

/* Tiny model, two micro-batches, dropout on, shuffled shard data: everything a resume must
 * restore matters. */
static void resume_config(gt_config *c, const char *dir) {
    gt_config_defaults(c);
    static const char *kv[] = {
        "runtime.device=cpu",          "model.num_layers=1",         "model.hidden_size=32",
        "model.num_attention_heads=2", "model.num_query_groups=2",   "model.ffn_hidden_size=64",
        "model.vocab_size=64",         "model.seq_length=16",        "train.micro_batch_size=2",
        "train.global_batch_size=4",   "model.cuda_graph_impl=none", "model.hidden_dropout=0.1",
        "train.train_iters=10",        "dataset.source=shards",      "dataset.shuffle=true",
        "scheduler.lr_warmup_iters=2", "optimizer.lr=0.003",         NULL};
    for (int i = 0; kv[i]; i++)
        set(c, kv[i]);
    char prefix[400], kv2[500];
    snprintf(prefix, sizeof prefix, "%s/data", dir);
    snprintf(kv2, sizeof kv2, "dataset.data_path=%s", prefix);
    set(c, kv2);
    gt_config_finalize(c);
    /* 30 sequences: 10 steps x 4 sequences wrap into a second shuffled epoch at step 8 */
    enum { N = 30 * 16 + 1 };
    uint32_t tok[N];
    uint64_t x = 99;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (uint32_t)(x >> 58);
    }
    char path[500];
    snprintf(path, sizeof path, "%s.manifest", prefix);
    struct stat st;
    if (stat(path, &st) != 0) gt_test_write_set(prefix, 64, tok, N, NULL, 0);
}

static gt_trainer *create(const gt_config *c) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, c, &err) != GT_OK) fail_msg("create: %s", err.msg);
    return t;
}

static void steps(gt_trainer *t, int n, float *loss) {
    gt_error err = {0};
    for (int i = 0; i < n; i++) {
        gt_step_stats s;
        if (gt_trainer_step(t, &s, &err) != GT_OK) fail_msg("step: %s", err.msg);
        loss[i] = s.loss;
    }
}

typedef struct state_copy {
    size_t n;
    float *master, *m, *v;
} state_copy;

static state_copy read_state(gt_trainer *t) {
    state_copy s;
    gt_error err = {0};
    s.n = gt_model_get_info(gt_trainer_model(t))->n_params;
    s.master = malloc(s.n * sizeof(float));
    s.m = malloc(s.n * sizeof(float));
    s.v = malloc(s.n * sizeof(float));
    assert_int_equal(gt_trainer_read_master(t, s.master, &err), GT_OK);
    assert_int_equal(gt_trainer_read_moments(t, s.m, s.v, &err), GT_OK);
    return s;
}

static void free_state(state_copy *s) {
    free(s->master);
    free(s->m);
    free(s->v);
}

/* extra: NULL-terminated overrides on top of resume_config */
static void resumed_run_equals_uninterrupted_run(const char *const *extra) {
    char dir[256], ckpt[300], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    gt_config c;
    resume_config(&c, dir);
    for (int i = 0; extra && extra[i]; i++)
        set(&c, extra[i]);
    float full[10], part[10];

    gt_trainer *a = create(&c);
    steps(a, 10, full);
    state_copy sa = read_state(a);
    gt_trainer_destroy(a);

    gt_trainer *b = create(&c);
    steps(b, 5, part);
    gt_error err = {0};
    assert_int_equal(gt_trainer_save(b, ckpt, &err), GT_OK);
    gt_trainer_destroy(b);

    gt_config c2 = c;
    snprintf(kv, sizeof kv, "checkpoint.load=%s", ckpt);
    set(&c2, kv);
    gt_trainer *r = create(&c2);
    assert_true(gt_trainer_resumed(r));
    assert_int_equal(gt_trainer_step_count(r), 5);
    steps(r, 5, part + 5);
    state_copy sr = read_state(r);
    gt_trainer_destroy(r);

    assert_memory_equal(full, part, sizeof full);
    assert_memory_equal(sa.master, sr.master, sa.n * sizeof(float));
    assert_memory_equal(sa.m, sr.m, sa.n * sizeof(float));
    assert_memory_equal(sa.v, sr.v, sa.n * sizeof(float));
    assert_true(full[0] != full[9]);
    if (c.optimizer.exp_avg_dtype == GT_STATE_BF16) /* what the run kept really is bf16 */
        for (size_t i = 0; i < sa.n; i++)
            assert_true(gt_bf16_to_float(gt_bf16_from_float(sa.m[i])) == sa.m[i]);
    free_state(&sa);
    free_state(&sr);
}

static void test_resumed_run_equals_uninterrupted_run_bitwise(void **state) {
    (void)state;
    resumed_run_equals_uninterrupted_run(NULL);
}

/* The same with the Adam moments in bf16: the checkpoint holds them as fp32, exactly. */
static void test_resume_with_bf16_moments_is_bitwise(void **state) {
    (void)state;
    static const char *const kv[] = {"optimizer.use_precision_aware_optimizer=true",
                                     "optimizer.exp_avg_dtype=bf16",
                                     "optimizer.exp_avg_sq_dtype=bf16", NULL};
    resumed_run_equals_uninterrupted_run(kv);
}

/* Saves a 2-step checkpoint and returns the path of its file. */
static void make_checkpoint(const char *dir, gt_config *c, char *file, size_t n) {
    resume_config(c, dir);
    char ckpt[300];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    gt_trainer *t = create(c);
    float loss[2];
    steps(t, 2, loss);
    gt_error err = {0};
    assert_int_equal(gt_trainer_save(t, ckpt, &err), GT_OK);
    gt_trainer_destroy(t);
    gt_ckpt_file(ckpt, file, n);
    char kv[400];
    snprintf(kv, sizeof kv, "checkpoint.load=%s", ckpt);
    set(c, kv);
}

static void expect_refused(const gt_config *c, const char *file, const char *what) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    int rc = gt_trainer_create(&t, c, &err);
    assert_int_not_equal(rc, GT_OK);
    assert_null(t);
    if (!strstr(err.msg, what) || !strstr(err.msg, file))
        fail_msg("expected '%s' naming %s, got: %s", what, file, err.msg);
}

static void flip_byte(const char *file, long offset_from_end) {
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -offset_from_end, SEEK_END), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, -offset_from_end, SEEK_END), 0);
    fputc(ch ^ 0x10, f);
    fclose(f);
}

static void test_corrupt_checkpoint_is_refused(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    make_checkpoint(dir, &c, file, sizeof file);
    flip_byte(file, 1000); /* inside the Adam moments */
    expect_refused(&c, file, "corrupt");
}

static void test_truncated_checkpoint_is_refused(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    make_checkpoint(dir, &c, file, sizeof file);
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(truncate(file, st.st_size - 7), 0);
    expect_refused(&c, file, "truncated");
    assert_int_equal(truncate(file, 100), 0); /* shorter than the header */
    expect_refused(&c, file, "truncated");
}

static void test_file_that_is_not_a_checkpoint_is_refused(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    make_checkpoint(dir, &c, file, sizeof file);
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    fputs("NOTACKPT", f);
    fclose(f);
    expect_refused(&c, file, "not a graphtrain checkpoint");
}

static void test_checkpoint_of_another_shape_is_refused(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    make_checkpoint(dir, &c, file, sizeof file);
    set(&c, "model.ffn_hidden_size=96");
    expect_refused(&c, "ffn=64", "another model shape");
}

static void test_checkpoint_records_the_runtime_cuda_settings(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    resume_config(&c, dir);
    set(&c, "runtime.cuda.moe_gemm=reference");
    set(&c, "runtime.cuda.graph_memset=node");
    char ckpt[300];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    gt_trainer *t = create(&c);
    float loss[1];
    steps(t, 1, loss);
    gt_error err = {0};
    assert_int_equal(gt_trainer_save(t, ckpt, &err), GT_OK);
    gt_trainer_destroy(t);
    gt_ckpt_file(ckpt, file, sizeof file);
    gt_ckpt_meta meta;
    float *master, *m, *v;
    assert_int_equal(gt_ckpt_read(file, &meta, &master, &m, &v, &err), GT_OK);
    assert_string_equal(meta.settings, "runtime.cuda: attention=auto attention_bwd=auto "
                                       "moe_gemm=reference pdl=auto graph_memset=node");
    free(master);
    free(m);
    free(v);
}

/* A hand-made checkpoint: the one make_checkpoint wrote with one header field changed and the
 * checksum recomputed (gt_ckpt_write computes it), so only range checks can refuse it. */
typedef void (*meta_edit)(gt_ckpt_meta *m);

static void craft(gt_config *c, const char *dir, meta_edit edit, char *file, size_t n) {
    make_checkpoint(dir, c, file, n);
    gt_ckpt_meta meta;
    float *master, *m, *v;
    gt_error err = {0};
    assert_int_equal(gt_ckpt_read(file, &meta, &master, &m, &v, &err), GT_OK);
    edit(&meta);
    char ckpt[300];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    assert_int_equal(gt_ckpt_write(ckpt, &meta, master, m, v, &err), GT_OK);
    free(master);
    free(m);
    free(v);
}

static void edit_cursor(gt_ckpt_meta *m) {
    m->data.cursor = 1ull << 62;
}
static void edit_step(gt_ckpt_meta *m) {
    m->state.step = -5;
}
static void edit_micro(gt_ckpt_meta *m) {
    m->state.micro = -1000000;
}
static void edit_shape(gt_ckpt_meta *m) {
    memset(m->shape, 'x', sizeof m->shape); /* no terminating NUL */
    m->fingerprint ^= 1;                    /* so the loader prints the shape */
}

static void test_checkpoint_with_data_position_out_of_range_is_refused(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    craft(&c, dir, edit_cursor, file, sizeof file);
    expect_refused(&c, file, "data position");
}

static void test_checkpoint_with_negative_step_is_refused(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    craft(&c, dir, edit_step, file, sizeof file);
    expect_refused(&c, file, "step counter");
}

static void test_checkpoint_with_micro_batch_index_out_of_range_is_refused(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    craft(&c, dir, edit_micro, file, sizeof file);
    expect_refused(&c, file, "micro-batch index");
}

static void test_checkpoint_with_unterminated_shape_text_is_refused(void **state) {
    (void)state;
    char dir[256], file[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    craft(&c, dir, edit_shape, file, sizeof file);
    expect_refused(&c, file, "not a terminated string");
}

/* n_params * 12 wraps to the size of a header-only file: the sizes must not be trusted */
static void test_checkpoint_whose_sizes_overflow_is_refused(void **state) {
    (void)state;
    char dir[256], file[400], ckpt[300];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    make_checkpoint(dir, &c, file, sizeof file);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    gt_ckpt_meta meta;
    float *master, *m, *v;
    gt_error err = {0};
    assert_int_equal(gt_ckpt_read(file, &meta, &master, &m, &v, &err), GT_OK);
    meta.n_params = 1ull << 62; /* 3 * 4 * 2^62 = 0 mod 2^64 */
    assert_int_equal(gt_ckpt_write(ckpt, &meta, master, m, v, &err), GT_OK);
    free(master);
    free(m);
    free(v);
    expect_refused(&c, file, "corrupt or truncated");
}

static void test_missing_checkpoint_names_the_path(void **state) {
    (void)state;
    char dir[256], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    resume_config(&c, dir);
    snprintf(kv, sizeof kv, "checkpoint.load=%s/nowhere", dir);
    set(&c, kv);
    expect_refused(&c, "nowhere", "cannot open checkpoint");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resumed_run_equals_uninterrupted_run_bitwise),
        cmocka_unit_test(test_resume_with_bf16_moments_is_bitwise),
        cmocka_unit_test(test_corrupt_checkpoint_is_refused),
        cmocka_unit_test(test_truncated_checkpoint_is_refused),
        cmocka_unit_test(test_file_that_is_not_a_checkpoint_is_refused),
        cmocka_unit_test(test_checkpoint_of_another_shape_is_refused),
        cmocka_unit_test(test_checkpoint_records_the_runtime_cuda_settings),
        cmocka_unit_test(test_missing_checkpoint_names_the_path),
        cmocka_unit_test(test_checkpoint_with_data_position_out_of_range_is_refused),
        cmocka_unit_test(test_checkpoint_with_negative_step_is_refused),
        cmocka_unit_test(test_checkpoint_with_micro_batch_index_out_of_range_is_refused),
        cmocka_unit_test(test_checkpoint_with_unterminated_shape_text_is_refused),
        cmocka_unit_test(test_checkpoint_whose_sizes_overflow_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
