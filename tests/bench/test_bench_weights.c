/* The weights exchange file (bench/weights_io.h) that bench/torch_reference.py reads: a model's
 * tensors written from a flat fp32 array read back with the same names, shapes and values, and
 * damaged files refused with a message naming the problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/weights_io.h"
#include "config/keys.h"
#include "testlib.h"

typedef struct wt_fixture {
    gt_backend *b;
    gt_model *m;
    float *flat; /* [n_params] initial values, padding between tensors left at NaN */
    char path[600];
    char dir[256];
} wt_fixture;

static void small_config(gt_config *c, int moe) {
    gt_config_defaults(c);
    c->model.num_layers = 2;
    c->model.hidden_size = 16;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 24;
    c->model.vocab_size = 40;
    c->model.seq_length = 8;
    c->train.micro_batch_size = 2;
    c->train.global_batch_size = 2;
    if (moe) {
        c->model.num_moe_experts = 4;
        c->model.moe_router_topk = 2;
        c->model.moe_ffn_hidden_size = 12;
    }
}

static void fixture_create(wt_fixture *fx, int moe) {
    gt_error err = {0};
    gt_config c;
    memset(fx, 0, sizeof *fx);
    small_config(&c, moe);
    assert_int_equal(gt_backend_create_cpu(&fx->b, &err), GT_OK);
    int rc = gt_model_create(&fx->m, &c, fx->b, &err);
    if (rc) fprintf(stderr, "gt_model_create: %s\n", err.msg);
    assert_int_equal(rc, GT_OK);
    size_t n = gt_model_get_info(fx->m)->n_params;
    fx->flat = malloc(n * sizeof *fx->flat);
    assert_non_null(fx->flat);
    assert_int_equal(gt_model_init_params(fx->m, 77, fx->flat, &err), GT_OK);
    gt_test_tmpdir(fx->dir, sizeof fx->dir);
    assert_true(fx->dir[0] != '\0');
    snprintf(fx->path, sizeof fx->path, "%s/w.gtw", fx->dir);
}

static void fixture_destroy(wt_fixture *fx) {
    remove(fx->path);
    remove(fx->dir);
    free(fx->flat);
    gt_model_destroy(fx->m);
    gt_backend_destroy(fx->b);
}

static void check_round_trip(int moe) {
    wt_fixture fx;
    fixture_create(&fx, moe);
    gt_error err = {0};
    assert_int_equal(gt_weights_write_model(fx.path, fx.m, fx.flat, &err), GT_OK);
    gt_weights w;
    int rc = gt_weights_read(fx.path, &w, &err);
    if (rc) fprintf(stderr, "gt_weights_read: %s\n", err.msg);
    assert_int_equal(rc, GT_OK);
    assert_int_equal(w.n, gt_model_num_tensors(fx.m));
    size_t total = 0;
    for (int i = 0; i < w.n; i++) {
        const char *name;
        size_t off;
        int nd, shape[3];
        gt_model_tensor(fx.m, i, &name, &off, &nd, shape);
        const gt_weights_tensor *t = &w.tensors[i];
        assert_string_equal(t->name, name);
        assert_int_equal(t->ndim, nd);
        size_t numel = 1;
        for (int j = 0; j < nd; j++) {
            assert_int_equal(t->shape[j], shape[j]);
            numel *= (size_t)shape[j];
        }
        assert_int_equal(t->numel, numel);
        assert_int_equal(t->offset, off);
        assert_memory_equal(t->data, fx.flat + off, numel * sizeof(float));
        assert_int_equal(gt_weights_find(&w, name), i);
        total += numel;
    }
    assert_int_equal(w.n_values, total);
    assert_int_equal(gt_weights_find(&w, "no.such.tensor"), -1);
    gt_weights_free(&w);
    fixture_destroy(&fx);
}

static void test_dense_weights_round_trip_bitwise_with_names_and_shapes(void **state) {
    (void)state;
    check_round_trip(0);
}

static void test_moe_weights_round_trip_including_3d_expert_tensors(void **state) {
    (void)state;
    check_round_trip(1);
}

/* Rewrites the file with its first `keep` bytes, then `flip` XORed into byte `at` (if >= 0). */
static void damage(const char *path, long keep, long at, unsigned char flip) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *buf = malloc(1 << 20);
    assert_non_null(buf);
    long n = (long)fread(buf, 1, 1 << 20, f);
    fclose(f);
    if (keep < n) n = keep;
    if (at >= 0 && at < n) buf[at] ^= flip;
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal((long)fwrite(buf, 1, (size_t)n, f), n);
    fclose(f);
    free(buf);
}

static void expect_refusal(long keep, long at, unsigned char flip, const char *words) {
    wt_fixture fx;
    fixture_create(&fx, 0);
    gt_error err = {0};
    assert_int_equal(gt_weights_write_model(fx.path, fx.m, fx.flat, &err), GT_OK);
    damage(fx.path, keep, at, flip);
    gt_weights w;
    assert_int_equal(gt_weights_read(fx.path, &w, &err), GT_ERR_INVALID);
    if (!strstr(err.msg, words)) fprintf(stderr, "message: %s\n", err.msg);
    assert_non_null(strstr(err.msg, words));
    assert_non_null(strstr(err.msg, fx.path));
    assert_null(w.tensors);
    assert_null(w.values);
    fixture_destroy(&fx);
}

static void test_truncated_weights_file_is_refused(void **state) {
    (void)state;
    expect_refusal(GT_WEIGHTS_HEADER_BYTES + GT_WEIGHTS_RECORD_BYTES * 2 + 40, -1, 0, "truncated");
}

static void test_file_with_wrong_magic_is_refused(void **state) {
    (void)state;
    expect_refusal(1 << 20, 0, 0x5a, "not a graphtrain weights file");
}

static void test_tensor_whose_shape_disagrees_with_its_count_is_refused(void **state) {
    (void)state;
    /* first record's shape[0] (bytes 68..71 of the record) changed */
    expect_refusal(1 << 20, GT_WEIGHTS_HEADER_BYTES + 68, 0x01, "shape holds");
}

/* gt_weights_export writes exactly the trainer's fp32 master weights; the gradient export has
 * the same layout and, after one step, holds that step's (nonzero) gradients. */
static void test_trainer_export_round_trips_master_weights_and_gradients(void **state) {
    (void)state;
    gt_config c;
    small_config(&c, 0);
    c.runtime.device = GT_DEVICE_CPU;
    gt_error err = {0};
    gt_trainer *t = NULL;
    int rc = gt_trainer_create(&t, &c, &err);
    if (rc) fprintf(stderr, "gt_trainer_create: %s\n", err.msg);
    assert_int_equal(rc, GT_OK);
    const gt_model *m = gt_trainer_model(t);
    size_t n = gt_model_get_info(m)->n_params;
    float *master = malloc(n * sizeof *master);
    assert_non_null(master);
    assert_int_equal(gt_trainer_read_master(t, master, &err), GT_OK);
    char dir[256], path[300], gpath[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/w.gtw", dir);
    snprintf(gpath, sizeof gpath, "%s/g.gtw", dir);
    assert_int_equal(gt_weights_export(t, path, &err), GT_OK);
    gt_step_stats st;
    assert_int_equal(gt_trainer_step(t, &st, &err), GT_OK);
    assert_int_equal(gt_weights_export_grads(t, gpath, &err), GT_OK);
    gt_weights w, g;
    assert_int_equal(gt_weights_read(path, &w, &err), GT_OK);
    assert_int_equal(gt_weights_read(gpath, &g, &err), GT_OK);
    assert_int_equal(w.n, gt_model_num_tensors(m));
    assert_int_equal(g.n, w.n);
    for (int i = 0; i < w.n; i++) {
        assert_memory_equal(w.tensors[i].data, master + w.tensors[i].offset,
                            w.tensors[i].numel * sizeof(float));
        assert_string_equal(g.tensors[i].name, w.tensors[i].name);
        double ss = 0;
        for (size_t j = 0; j < g.tensors[i].numel; j++)
            ss += (double)g.tensors[i].data[j] * g.tensors[i].data[j];
        if (!(ss > 0)) fprintf(stderr, "zero gradient in %s\n", g.tensors[i].name);
        assert_true(ss > 0);
    }
    gt_weights_free(&w);
    gt_weights_free(&g);
    free(master);
    gt_trainer_destroy(t);
    remove(path);
    remove(gpath);
    remove(dir);
}

static void test_missing_weights_file_names_the_path(void **state) {
    (void)state;
    gt_weights w;
    gt_error err = {0};
    assert_int_equal(gt_weights_read("/nonexistent/dir/w.gtw", &w, &err), GT_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/w.gtw"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_weights_round_trip_bitwise_with_names_and_shapes),
        cmocka_unit_test(test_moe_weights_round_trip_including_3d_expert_tensors),
        cmocka_unit_test(test_truncated_weights_file_is_refused),
        cmocka_unit_test(test_file_with_wrong_magic_is_refused),
        cmocka_unit_test(test_tensor_whose_shape_disagrees_with_its_count_is_refused),
        cmocka_unit_test(test_trainer_export_round_trips_master_weights_and_gradients),
        cmocka_unit_test(test_missing_weights_file_names_the_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
