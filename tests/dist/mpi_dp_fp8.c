/* fp8 under data parallelism between CPU-backend processes, run by ctest under mpiexec at 2 and
 * 4 ranks: with runtime.deterministic every recipe (fp8_cs, fp8_ds, fp8_sc) gives the losses,
 * master weights (and fp8_ds its scales and amaxes) of one process training the same global batch,
 * bitwise, on every rank; delayed scaling's step amax is the max over all ranks' micro-batches
 * (without the reduction each rank's scales would be its own); the graph modes agree bitwise; and a
 * NaN amax or an fp8 flag raised on one rank reaches every rank. */
#define MPF_NAME "mpi_dp_fp8"
#include "mpi_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config/keys.h"
#include "dist/comm.h"
#include "dist/fp8_sync.h"
#include "model/model_internal.h"
#include "train/trainer.h"

enum { STEPS = 5 };

/* mpi_dp_train.c's model and batch (4 micro-batches of 2, dropout on) under an fp8 recipe */
static void fp8_config(gt_config *c, const char *recipe) {
    mpf_small_model(c, 2);
    mpf_set(c, "model.cuda_graph_impl=none");
    mpf_set(c, "model.hidden_dropout=0.1");
    mpf_set(c, "train.train_iters=20");
    char kv2[64];
    snprintf(kv2, sizeof kv2, "model.compute_dtype=%s", recipe);
    mpf_set(c, kv2);
    if (!strcmp(recipe, "fp8_ds")) {
        mpf_set(c, "model.fp8_amax_history_len=3");
        mpf_set(c, "model.fp8_amax_compute_algo=max");
    }
    gt_config_finalize(c);
}

typedef struct run_out {
    float loss[STEPS];
    size_t n;
    float *master;
    int n_meta;
    gt_fp8_meta *meta; /* the fp8 scaling state after the last step */
} run_out;

static void run(const gt_config *c, gt_comm *comm, run_out *o) {
    memset(o, 0, sizeof *o);
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create_dp(&t, c, comm, &err)) fail_msg("rank %d: create: %s", RANK, err.msg);
    for (int i = 0; i < STEPS; i++) {
        gt_step_stats s;
        if (gt_trainer_step(t, &s, &err)) fail_msg("rank %d: step %d: %s", RANK, i + 1, err.msg);
        o->loss[i] = s.loss;
    }
    gt_model *m = gt_trainer_model(t);
    o->n = gt_model_get_info(m)->n_params;
    o->master = calloc(o->n, sizeof *o->master);
    assert_int_equal(gt_trainer_read_master(t, o->master, &err), GT_OK);
    o->n_meta = m->fp8.n_meta;
    o->meta = calloc((size_t)o->n_meta + 1, sizeof *o->meta);
    memcpy(o->meta, m->fp8.meta, (size_t)o->n_meta * sizeof *o->meta); /* CPU: host memory */
    gt_trainer_destroy(t);
}

static void run_free(run_out *o) {
    free(o->master);
    free(o->meta);
}

/* every rank holds rank 0's bytes */
static void check_recipe(const char *recipe) {
    gt_config c;
    fp8_config(&c, recipe);
    run_out dp, one;
    run(&c, C, &dp);
    mpf_assert_ranks_agree(dp.loss, sizeof dp.loss);
    mpf_assert_ranks_agree(dp.master, dp.n * sizeof *dp.master);
    /* delayed scaling's slots are state the next steps read; current scaling's record the last
     * cast of the rank's own last micro-batch (read by nothing), blockwise has none */
    int state = !strcmp(recipe, "fp8_ds");
    if (state) mpf_assert_ranks_agree(dp.meta, (size_t)dp.n_meta * sizeof *dp.meta);
    if (RANK == 0) {
        run(&c, ONE, &one);
        for (int i = 0; i < STEPS; i++)
            // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
            if (memcmp(&dp.loss[i], &one.loss[i], sizeof(float)) != 0)
                fail_msg("%s at %d ranks, step %d: loss %.9g, one process %.9g", recipe, SIZE,
                         i + 1, (double)dp.loss[i], (double)one.loss[i]);
        assert_memory_equal(dp.master, one.master, dp.n * sizeof *dp.master);
        assert_int_equal(dp.n_meta, one.n_meta);
        if (state) assert_memory_equal(dp.meta, one.meta, (size_t)dp.n_meta * sizeof *dp.meta);
        assert_true(dp.loss[0] != dp.loss[STEPS - 1]);
        run_free(&one);
    }
    run_free(&dp);
    gt_error err = {0};
    assert_int_equal(gt_comm_barrier(C, &err), GT_OK);
}

static void test_current_scaling_at_n_ranks_equals_one_process_bitwise(void **state) {
    (void)state;
    check_recipe("fp8_cs");
}

static void test_delayed_scaling_at_n_ranks_equals_one_process_bitwise(void **state) {
    (void)state;
    check_recipe("fp8_ds");
}

static void test_blockwise_scaling_at_n_ranks_equals_one_process_bitwise(void **state) {
    (void)state;
    check_recipe("fp8_sc");
}

/* the distributed optimizer (each rank its shards of the state, the parameters gathered) under
 * delayed scaling: the replicated optimizer's losses, master weights and scales */
static void
test_delayed_scaling_with_the_distributed_optimizer_is_bitwise_replicated(void **state) {
    (void)state;
    gt_config replicated, sharded;
    fp8_config(&replicated, "fp8_ds");
    mpf_set(&replicated, "ddp.bucket_size=1000");
    gt_config_finalize(&replicated);
    sharded = replicated;
    mpf_set(&sharded, "optimizer.use_distributed_optimizer=true");
    gt_config_finalize(&sharded);
    run_out r, d;
    run(&replicated, C, &r);
    run(&sharded, C, &d);
    assert_memory_equal(r.loss, d.loss, sizeof r.loss);
    assert_memory_equal(r.master, d.master, r.n * sizeof *r.master);
    assert_memory_equal(r.meta, d.meta, (size_t)r.n_meta * sizeof *r.meta);
    run_free(&r), run_free(&d);
}

static void test_delayed_scaling_graph_modes_are_bitwise_equal_at_n_ranks(void **state) {
    (void)state;
    gt_config eager, scoped, full;
    fp8_config(&eager, "fp8_ds");
    scoped = eager;
    mpf_set(&scoped, "model.cuda_graph_impl=transformer_engine");
    mpf_set(&scoped, "model.cuda_graph_scope=attn,mlp");
    mpf_set(&scoped, "model.cuda_graph_warmup_steps=1");
    gt_config_finalize(&scoped);
    full = eager;
    mpf_set(&full, "model.cuda_graph_impl=local");
    mpf_set(&full, "model.cuda_graph_scope=full_iteration");
    mpf_set(&full, "model.cuda_graph_warmup_steps=2");
    gt_config_finalize(&full);
    run_out e, s, f;
    run(&eager, C, &e);
    run(&scoped, C, &s);
    run(&full, C, &f);
    assert_memory_equal(e.loss, s.loss, sizeof e.loss);
    assert_memory_equal(e.loss, f.loss, sizeof e.loss);
    assert_memory_equal(e.meta, f.meta, (size_t)e.n_meta * sizeof *e.meta);
    run_free(&e), run_free(&s), run_free(&f);
}

/* The reduction itself: rank r's slot 0 holds amax r + 1, the last rank's slot 1 NaN, and only
 * rank 1 flags its step; afterwards every rank holds SIZE, NaN and the flag. */
static void test_amax_max_and_fp8_flag_reach_every_rank(void **state) {
    (void)state;
    gt_backend *b = NULL;
    gt_error err = {0};
    assert_int_equal(gt_backend_create_cpu(&b, &err), GT_OK);
    assert_int_equal(gt_comm_bind(C, b, &err), GT_OK); /* the next trainer binds its own */
    gt_fp8_meta meta[3] = {{1, 1, (float)(RANK + 1), 0}, {1, 1, 0.5f, 0}, {1, 1, 2.0f, 1}};
    if (RANK == SIZE - 1) meta[1].amax = NAN;
    gt_step_state st;
    memset(&st, 0, sizeof st);
    if (RANK == 1) st.nan_flags = GT_NAN_FP8;
    gt_fp8_sync *f = NULL;
    assert_int_equal(gt_fp8_sync_create(&f, C, b, meta, 3, &err), GT_OK);
    gt_fp8_sync_step(f, NULL, &st);
    assert_int_equal(b->ops->stream_sync(b, NULL, &err), GT_OK);
    assert_true(meta[0].amax == (float)SIZE);
    assert_true(isnan(meta[1].amax));
    assert_true(meta[2].amax == 2.0f);
    assert_true(st.nan_flags & GT_NAN_FP8);
    gt_fp8_sync_destroy(f);
    gt_backend_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_scaling_at_n_ranks_equals_one_process_bitwise),
        cmocka_unit_test(test_delayed_scaling_at_n_ranks_equals_one_process_bitwise),
        cmocka_unit_test(test_blockwise_scaling_at_n_ranks_equals_one_process_bitwise),
        cmocka_unit_test(test_delayed_scaling_with_the_distributed_optimizer_is_bitwise_replicated),
        cmocka_unit_test(test_delayed_scaling_graph_modes_are_bitwise_equal_at_n_ranks),
        cmocka_unit_test(test_amax_max_and_fp8_flag_reach_every_rank),
    };
    return cmocka_run_group_tests(tests, mpf_group_setup, mpf_group_teardown);
}
