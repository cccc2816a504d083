/* Delayed scaling (fp8_ds) resumes bitwise: the checkpoint carries the amax history and the
 * scales, so the resumed run (eager, per-unit graphs or one full-iteration graph) quantizes as
 * the uninterrupted one would and matches its losses and master weights exactly. A checkpoint
 * without that state (a bf16 run's, a format version 2 file) or with another history length is
 * refused by name; a version 2 file still resumes a run that needs no fp8 state. */
#include "graphs_fixture.h"

#include <sys/stat.h>
#include <unistd.h>

#include "core/crc32.h"

#define FIRST 6  /* steps before the checkpoint */
#define SECOND 6 /* steps after it */
#define WARMUP 2
#define HISTORY 4 /* longer than one step, so the restored history decides later scales */

static char g_dir[256], g_bf16_dir[300], g_v2_dir[300];
static float g_loss[SECOND];
static float *g_master;
static size_t g_n;

static void ds_config(gt_config *c) {
    gtf_tiny_dense(c);
    c->model.compute_dtype = GT_DTYPE_FP8_DS;
    c->model.fp8_amax_history_len = HISTORY;
    c->model.fp8_amax_compute_algo = GT_AMAX_MAX;
}

/* Trains `steps` steps of c and saves into dir; 0 on success. */
static int train_and_save(const gt_config *c, int steps, const char *dir, gt_trainer **keep) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, c, &err) != GT_OK) return -1;
    gt_step_stats st;
    for (int i = 0; i < steps; i++)
        if (gt_trainer_step(t, &st, &err) != GT_OK) return -1;
    if (gt_trainer_save(t, dir, &err) != GT_OK) return -1;
    if (keep)
        *keep = t;
    else
        gt_trainer_destroy(t);
    return 0;
}

static int setup(void **state) {
    (void)state;
    gt_test_tmpdir(g_dir, sizeof g_dir);
    snprintf(g_bf16_dir, sizeof g_bf16_dir, "%s/bf16", g_dir);
    snprintf(g_v2_dir, sizeof g_v2_dir, "%s/v2", g_dir);
    gt_config c;
    ds_config(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (train_and_save(&c, FIRST, g_dir, &t)) return -1;
    gt_step_stats st;
    for (int i = 0; i < SECOND; i++) {
        if (gt_trainer_step(t, &st, &err) != GT_OK) return -1;
        g_loss[i] = st.loss;
    }
    g_n = gt_model_get_info(gt_trainer_model(t))->n_params;
    g_master = calloc(g_n, sizeof(float));
    int rc = g_master ? gt_trainer_read_master(t, g_master, &err) : GT_ERR_NOMEM;
    gt_trainer_destroy(t);
    gtf_tiny_dense(&c);
    if (rc == GT_OK && train_and_save(&c, 2, g_bf16_dir, NULL)) rc = -1;
    return rc == GT_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    free(g_master);
    gt_test_remove_flat_dir(g_bf16_dir);
    gt_test_remove_flat_dir(g_v2_dir);
    gt_test_remove_flat_dir(g_dir);
    return 0;
}

static void check_resume(gt_graph_impl impl, uint32_t scope) {
    gt_config c;
    ds_config(&c);
    gtf_graphs(&c, impl, scope);
    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", g_dir);
    gtf_run r;
    gtf_train(&c, SECOND, &r);
    gtf_assert_resumed(&r, FIRST, g_loss, g_master, g_n, impl != GT_GRAPH_IMPL_NONE, WARMUP);
    assert_int_equal(r.steps, SECOND);
    gtf_free(&r);
}

static void test_delayed_scaling_resumes_bitwise_in_full_iteration(void **state) {
    (void)state;
    check_resume(GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
}

static void test_delayed_scaling_resumes_bitwise_with_unit_graphs(void **state) {
    (void)state;
    check_resume(GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
}

static void test_delayed_scaling_resumes_bitwise_eagerly(void **state) {
    (void)state;
    check_resume(GT_GRAPH_IMPL_NONE, 0);
}

/* gt_trainer_create's refusal of c's checkpoint.load, which must name `want` */
static void assert_refused(const gt_config *c, const char *want) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    int rc = gt_trainer_create(&t, c, &err);
    gt_trainer_destroy(t);
    assert_int_equal(rc, GT_ERR_INVALID);
    if (!strstr(err.msg, want)) fail_msg("refusal does not name '%s': %s", want, err.msg);
}

static void test_resume_with_another_history_length_is_refused(void **state) {
    (void)state;
    gt_config c;
    ds_config(&c);
    c.model.fp8_amax_history_len = HISTORY + 1;
    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", g_dir);
    assert_refused(&c, "model.fp8_amax_history_len=4");
}

static void test_delayed_resume_of_a_checkpoint_without_fp8_state_is_refused(void **state) {
    (void)state;
    gt_config c;
    ds_config(&c);
    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", g_bf16_dir);
    assert_refused(&c, "holds no delayed-scaling state");
}

static void test_current_scaling_resumes_from_a_delayed_scaling_checkpoint(void **state) {
    (void)state;
    gt_config c;
    ds_config(&c);
    c.model.compute_dtype = GT_DTYPE_FP8_CS;
    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", g_dir);
    gtf_run r;
    gtf_train(&c, 1, &r);
    assert_int_equal(r.rc, GT_OK);
    assert_int_equal(r.step_no[0], FIRST + 1);
    gtf_free(&r);
}

/* The bf16 checkpoint rewritten as format version 2 wrote it: the header without its last
 * 16 bytes (the fp8 fields, all zero without fp8 state), version 2, the CRC recomputed. */
static void write_v2_copy(const char *from_dir, const char *to_dir) {
    char from[512], to[512];
    snprintf(from, sizeof from, "%s/checkpoint.bin", from_dir);
    snprintf(to, sizeof to, "%s/checkpoint.bin", to_dir);
    FILE *f = fopen(from, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    uint32_t version, header_bytes, crc = 0;
    memcpy(&version, buf + 8, 4);
    memcpy(&header_bytes, buf + 12, 4);
    assert_int_equal(version, 3);
    for (uint32_t i = header_bytes - 16; i < header_bytes; i++)
        assert_int_equal(buf[i], 0);
    memmove(buf + header_bytes - 16, buf + header_bytes, (size_t)n - header_bytes);
    n -= 16;
    version = 2;
    header_bytes -= 16;
    memcpy(buf + 8, &version, 4);
    memcpy(buf + 12, &header_bytes, 4);
    memcpy(buf + 24, &crc, 4); /* crc field: magic 8, version 4, header_bytes 4, payload 8 */
    crc = gt_crc32(0, buf, (size_t)n);
    memcpy(buf + 24, &crc, 4);
    mkdir(to_dir, 0755);
    f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    free(buf);
}

static void test_version_2_checkpoint_loads_and_refuses_delayed_scaling(void **state) {
    (void)state;
    write_v2_copy(g_bf16_dir, g_v2_dir);
    gt_config c;
    gtf_tiny_dense(&c);
    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", g_v2_dir);
    gtf_run v2, v3;
    gtf_train(&c, 2, &v2);
    assert_int_equal(v2.rc, GT_OK);
    assert_int_equal(v2.step_no[0], 3);
    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", g_bf16_dir);
    gtf_train(&c, 2, &v3);
    gtf_assert_same(&v2, &v3); /* the same state, read from either version */
    gtf_free(&v2), gtf_free(&v3);
    ds_config(&c);
    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", g_v2_dir);
    assert_refused(&c, "checkpoint format 3");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delayed_scaling_resumes_bitwise_in_full_iteration),
        cmocka_unit_test(test_delayed_scaling_resumes_bitwise_with_unit_graphs),
        cmocka_unit_test(test_delayed_scaling_resumes_bitwise_eagerly),
        cmocka_unit_test(test_resume_with_another_history_length_is_refused),
        cmocka_unit_test(test_delayed_resume_of_a_checkpoint_without_fp8_state_is_refused),
        cmocka_unit_test(test_current_scaling_resumes_from_a_delayed_scaling_checkpoint),
        cmocka_unit_test(test_version_2_checkpoint_loads_and_refuses_delayed_scaling),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
