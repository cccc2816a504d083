/* GEMM algorithm tables on the GPU (runtime.gemm_table, graphtrain tune-gemm): a candidate
 * chosen by hand computes the same product; a table naming it makes a fresh backend run that
 * very algorithm, bit for bit; a table from another machine or with an algorithm cuBLASLt
 * refuses leaves the heuristic's choice, and says so; tuning times every candidate. */
#include "gpu_fixture.h"

#define GM 512
#define GN 384
#define GK 256

typedef struct gemm_bufs {
    void *a, *w, *out;
} gemm_bufs;

static gemm_bufs upload(gt_backend *b, gt_stream *s, const float *ha, const float *hw) {
    gemm_bufs g = {0};
    gt_error err = {0};
    if (b->ops->alloc(b, (size_t)GM * GK * 2, &g.a, &err) ||
        b->ops->alloc(b, (size_t)GN * GK * 2, &g.w, &err) ||
        b->ops->alloc(b, (size_t)GM * GN * 2, &g.out, &err))
        fail_msg("alloc: %s", err.msg);
    float *d = NULL;
    if (b->ops->alloc(b, (size_t)GM * GK * 4, (void **)&d, &err)) fail_msg("alloc: %s", err.msg);
    b->ops->memcpy_h2d(b, s, d, ha, (size_t)GM * GK * 4);
    b->ops->from_float(b, s, g.a, d, (size_t)GM * GK);
    b->ops->memcpy_h2d(b, s, d, hw, (size_t)GN * GK * 4);
    b->ops->from_float(b, s, g.w, d, (size_t)GN * GK);
    b->ops->stream_sync(b, s, &err);
    b->ops->free(b, d);
    return g;
}

static void release(gt_backend *b, gemm_bufs *g) {
    b->ops->free(b, g->a);
    b->ops->free(b, g->w);
    b->ops->free(b, g->out);
}

/* out as raw bf16 bits */
static void run_gemm(gt_backend *b, gt_stream *s, const gemm_bufs *g, uint16_t *bits) {
    gt_error err = {0};
    b->ops->matmul_fwd(b, s, g->out, g->a, g->w, NULL, NULL, GM, GN, GK);
    b->ops->memcpy_d2h(b, s, bits, g->out, (size_t)GM * GN * 2);
    if (b->ops->stream_sync(b, s, &err) || gt_backend_check(b, &err)) fail_msg("%s", err.msg);
}

static void plan_gemm(gt_backend *b, gt_stream *s, const gemm_bufs *g) {
    gt_error err = {0};
    b->planning = 1;
    b->ops->matmul_fwd(b, s, g->out, g->a, g->w, NULL, NULL, GM, GN, GK);
    if (b->ops->plan_finish(b, &err)) fail_msg("plan_finish: %s", err.msg);
    b->planning = 0;
}

static float bits_to_f(uint16_t h) {
    return gt_bf16_to_float(h);
}

/* A fresh backend given table t, planned, run: its output bits, plan choice and description. */
static void with_table(const gt_gemm_table *t, const float *ha, const float *hw, uint16_t *bits,
                       int *choice, char *desc, size_t n) {
    gt_backend *b = NULL;
    gt_stream *s = NULL;
    gt_error err = {0};
    if (gt_backend_create_cuda(&b, 0, NULL, &err) || b->ops->stream_create(b, &s, &err))
        fail_msg("%s", err.msg);
    if (b->ops->gemm_table_set(b, t, &err)) fail_msg("gemm_table_set: %s", err.msg);
    gemm_bufs g = upload(b, s, ha, hw);
    plan_gemm(b, s, &g);
    run_gemm(b, s, &g, bits);
    gt_gemm_entry e;
    int n_cand = 0;
    assert_int_equal(b->ops->gemm_plans(b), 1);
    assert_true(b->ops->gemm_plan_get(b, 0, &e, &n_cand, choice));
    b->ops->describe(b, desc, n);
    /* a table is taken only before planning */
    assert_int_equal(b->ops->gemm_table_set(b, t, &err), GT_ERR_INVALID);
    release(b, &g);
    b->ops->stream_destroy(b, s);
    gt_backend_destroy(b);
}

/* Random operands on the env's backend, the one GEMM planned; its plan's entry, candidates and
 * choice. */
static gemm_bufs planned_gemm(gpu_env *e, float **ha, float **hw, gt_gemm_entry *ent, int *n_cand,
                              int *choice) {
    gt_backend *b = e->gpu;
    *ha = rand_vec(e, (size_t)GM * GK, 1.0f);
    *hw = rand_vec(e, (size_t)GN * GK, 0.1f);
    gemm_bufs g = upload(b, e->gs, *ha, *hw);
    plan_gemm(b, e->gs, &g);
    assert_int_equal(b->ops->gemm_plans(b), 1);
    assert_true(b->ops->gemm_plan_get(b, 0, ent, n_cand, choice));
    return g;
}

static void test_a_table_makes_a_fresh_backend_run_its_algorithm(void **state) {
    gpu_env *e = *state;
    gt_backend *b = e->gpu;
    float *ha = NULL, *hw = NULL;
    gt_gemm_entry ent;
    int n_cand = 0, choice = -2;
    gemm_bufs g = planned_gemm(e, &ha, &hw, &ent, &n_cand, &choice);
    assert_string_equal(ent.key.kind, "matmul_fwd");
    assert_int_equal(ent.key.M, GM);
    assert_int_equal(choice, 0);
    printf("    %d candidates for %dx%dx%d\n", n_cand, GM, GN, GK);
    if (n_cand < 2) skip();
    size_t n = (size_t)GM * GN;
    uint16_t *b0 = malloc(n * 2), *b1 = malloc(n * 2), *b2 = malloc(n * 2);
    float *f0 = malloc(n * 4), *f1 = malloc(n * 4);
    run_gemm(b, e->gs, &g, b0);
    int pick = n_cand - 1;
    gt_error err = {0};
    assert_int_equal(b->ops->gemm_choose(b, 0, pick, &err), GT_OK);
    assert_int_equal(b->ops->gemm_choose(b, 0, n_cand, &err), GT_ERR_INVALID);
    run_gemm(b, e->gs, &g, b1);
    for (size_t i = 0; i < n; i++)
        f0[i] = bits_to_f(b0[i]), f1[i] = bits_to_f(b1[i]);
    EXPECT_CLOSE("candidate against the heuristic's", f1, f0, n, TOL_BF16);

    /* the table of this machine with the last candidate: a new backend runs exactly it */
    gt_gemm_table t = {0};
    b->ops->gemm_table_header(b, &t);
    assert_true(b->ops->gemm_plan_get(b, 0, &ent, NULL, &choice));
    assert_int_equal(choice, pick);
    assert_int_equal(gt_gemm_table_put(&t, &ent, &err), GT_OK);
    char desc[512];
    with_table(&t, ha, hw, b2, &choice, desc, sizeof desc);
    printf("    %s\n", desc);
    assert_int_equal(choice, pick);
    assert_memory_equal(b2, b1, n * 2);
    assert_non_null(strstr(desc, "gemm_table=1 of 1 GEMMs"));

    /* made elsewhere: the heuristic's choice, said in the description */
    snprintf(t.device, sizeof t.device, "another GPU (1 SMs)");
    with_table(&t, ha, hw, b2, &choice, desc, sizeof desc);
    assert_int_equal(choice, 0);
    assert_memory_equal(b2, b0, n * 2);
    assert_non_null(strstr(desc, "gemm_table=not for this machine"));

    /* this machine, but an algorithm cuBLASLt refuses */
    b->ops->gemm_table_header(b, &t);
    for (int w = 0; w < GT_GEMM_ALGO_WORDS; w++)
        t.e[0].algo[w] = 0xdeadbeefdeadbeefull;
    with_table(&t, ha, hw, b2, &choice, desc, sizeof desc);
    assert_int_equal(choice, 0);
    assert_memory_equal(b2, b0, n * 2);
    assert_non_null(strstr(desc, "some refused"));
    gt_gemm_table_free(&t);
    free(b0), free(b1), free(b2), free(f0), free(f1), free(ha), free(hw);
    release(b, &g);
}

static void test_tuning_times_every_candidate(void **state) {
    gpu_env *e = *state;
    gt_backend *b = e->gpu;
    float *ha = NULL, *hw = NULL;
    gt_gemm_entry ent;
    int n_cand = 0, choice = 0;
    gemm_bufs g = planned_gemm(e, &ha, &hw, &ent, &n_cand, &choice);
    gt_error err = {0};
    assert_int_equal(b->ops->gemm_tune_read(b, NULL, NULL, &err), GT_ERR_INVALID);
    assert_int_equal(b->ops->gemm_tune(b, 5, &err), GT_ERR_INVALID);
    assert_int_equal(b->ops->gemm_tune(b, 0, &err), GT_OK);
    uint16_t *bits = malloc((size_t)GM * GN * 2);
    for (int i = 0; i < 3 * n_cand; i++)
        run_gemm(b, e->gs, &g, bits);
    double med[GT_GEMM_CANDIDATES];
    int cnt[GT_GEMM_CANDIDATES];
    assert_int_equal(b->ops->gemm_tune_read(b, med, cnt, &err), GT_OK);
    for (int c = 0; c < n_cand; c++) {
        printf("    candidate %d: %d timings, median %.1f us\n", c, cnt[c], med[c]);
        assert_int_equal(cnt[c], 3);
        assert_true(med[c] > 0 && med[c] < 1e5);
    }
    assert_int_equal(b->ops->gemm_tune(b, -1, &err), GT_OK);
    /* tuning left the plan's own algorithm alone */
    assert_true(b->ops->gemm_plan_get(b, 0, &ent, NULL, &choice));
    assert_int_equal(choice, 0);
    free(bits), free(ha), free(hw);
    release(b, &g);
}

static int setup(void **state) {
    gpu_env *e = NULL;
    if (env_open(&e)) return -1;
    *state = e;
    return 0;
}

static int teardown(void **state) {
    return env_close(*state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_table_makes_a_fresh_backend_run_its_algorithm, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tuning_times_every_candidate, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
