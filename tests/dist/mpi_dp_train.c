/* Data-parallel training between CPU-backend processes, run by ctest under mpiexec at 2 and 4
 * ranks: with runtime.deterministic the losses are bitwise those of one process with the same
 * global batch (rank 0 trains that one alone through a world of one), run to run, in every
 * graph mode and with any bucket size; MPI's own order stays within a tolerance; a checkpoint
 * of N ranks resumes at one and at N bitwise; a stop asked on one rank stops every rank;
 * ddp.overlap_grad_reduce and ddp.overlap_param_gather keep the bits of the runs without. */
#define MPF_NAME "mpi_dp_train"
#include "mpi_fixture.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "dist/comm.h"
#include "train/train_loop.h"
#include "train/trainer.h"
#include "train/trainer_impl.h" /* gt_trainer_read_moments */

enum { STEPS = 5 };

/* 4 micro-batches of 2 per global batch (2 per rank at 2 ranks, 1 at 4), with dropout, so
 * the micro-batch index each rank counts matters too */
static void dp_config(gt_config *c) {
    mpf_small_model(c, 1);
    mpf_set(c, "model.cuda_graph_impl=none");
    mpf_set(c, "model.hidden_dropout=0.1");
    mpf_set(c, "train.train_iters=20");
    gt_config_finalize(c);
}

/* losses of `steps` steps of a trainer over comm (NULL: one process, no reduction) */
static void run_losses(const gt_config *c, gt_comm *comm, int steps, float *loss) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create_dp(&t, c, comm, &err)) fail_msg("rank %d: create: %s", RANK, err.msg);
    for (int i = 0; i < steps; i++) {
        gt_step_stats s;
        if (gt_trainer_step(t, &s, &err)) fail_msg("rank %d: step %d: %s", RANK, i + 1, err.msg);
        loss[i] = s.loss;
    }
    gt_trainer_destroy(t);
}

static void test_losses_at_n_ranks_equal_one_process_bitwise(void **state) {
    (void)state;
    gt_config c;
    dp_config(&c);
    float n_ranks[STEPS], one[STEPS];
    run_losses(&c, C, STEPS, n_ranks);
    mpf_assert_ranks_agree(n_ranks, sizeof n_ranks);
    if (RANK == 0) {
        run_losses(&c, ONE, STEPS, one);
        assert_memory_equal(n_ranks, one, sizeof one);
        assert_true(n_ranks[0] != n_ranks[STEPS - 1]); /* the steps really differ */
    }
    gt_error err = {0};
    assert_int_equal(gt_comm_barrier(C, &err), GT_OK);
}

/* One process without a communicator accumulates the micro-batches inside the backward: the
 * same sums grouped otherwise, so it agrees to rounding only. */
static void test_one_process_without_reduction_agrees_within_rounding(void **state) {
    (void)state;
    gt_config c;
    dp_config(&c);
    float n_ranks[STEPS], plain[STEPS];
    run_losses(&c, C, STEPS, n_ranks);
    if (RANK == 0) {
        run_losses(&c, NULL, STEPS, plain);
        assert_memory_equal(&n_ranks[0], &plain[0], sizeof plain[0]); /* the same weights */
        for (int i = 1; i < STEPS; i++)
            assert_float_equal(n_ranks[i], plain[i], 1e-5f * fabsf(plain[i]));
    }
    gt_error err = {0};
    assert_int_equal(gt_comm_barrier(C, &err), GT_OK);
}

static void test_rank_order_losses_repeat_run_to_run_bitwise(void **state) {
    (void)state;
    gt_config c;
    dp_config(&c);
    float a[STEPS], b[STEPS];
    run_losses(&c, C, STEPS, a);
    run_losses(&c, C, STEPS, b);
    assert_memory_equal(a, b, sizeof a);
}

static void test_eager_scoped_and_full_iteration_are_bitwise_equal_at_n_ranks(void **state) {
    (void)state;
    gt_config eager, scoped, full;
    dp_config(&eager);
    scoped = eager;
    mpf_set(&scoped, "model.cuda_graph_impl=transformer_engine");
    mpf_set(&scoped, "model.cuda_graph_scope=attn");
    mpf_set(&scoped, "model.cuda_graph_warmup_steps=1");
    gt_config_finalize(&scoped);
    full = eager;
    mpf_set(&full, "model.cuda_graph_impl=local");
    mpf_set(&full, "model.cuda_graph_scope=full_iteration");
    mpf_set(&full, "model.cuda_graph_warmup_steps=2");
    gt_config_finalize(&full);
    float le[STEPS], ls[STEPS], lf[STEPS];
    run_losses(&eager, C, STEPS, le);
    run_losses(&scoped, C, STEPS, ls);
    run_losses(&full, C, STEPS, lf);
    assert_memory_equal(le, ls, sizeof le);
    assert_memory_equal(le, lf, sizeof le);
}

static void test_small_buckets_give_the_bits_of_one_bucket(void **state) {
    (void)state;
    gt_config one_bucket, small;
    dp_config(&one_bucket);
    small = one_bucket;
    mpf_set(&small, "ddp.bucket_size=1000"); /* several buckets, none a multiple of the ranks */
    gt_config_finalize(&small);
    float a[STEPS], b[STEPS];
    run_losses(&one_bucket, C, STEPS, a);
    run_losses(&small, C, STEPS, b);
    assert_memory_equal(a, b, sizeof a);
}

/* runtime.deterministic=false: MPI's all-reduce once a step, within rounding of rank order */
static void test_library_order_agrees_with_rank_order_within_rounding(void **state) {
    (void)state;
    gt_config ordered, library;
    dp_config(&ordered);
    library = ordered;
    mpf_set(&library, "runtime.deterministic=false");
    mpf_set(&library, "ddp.bucket_size=1000");
    gt_config_finalize(&library);
    float a[STEPS], b[STEPS];
    run_losses(&ordered, C, STEPS, a);
    run_losses(&library, C, STEPS, b);
    mpf_assert_ranks_agree(b, sizeof b);
    for (int i = 0; i < STEPS; i++)
        assert_float_equal(a[i], b[i], 1e-5f * fabsf(a[i]));
}

/* each rank steps its shards and the parameters are gathered: elementwise the same AdamW */
static void test_distributed_optimizer_gives_the_bits_of_the_replicated_one(void **state) {
    (void)state;
    gt_config replicated, sharded, sharded_graph;
    dp_config(&replicated);
    mpf_set(&replicated, "ddp.bucket_size=1000");
    gt_config_finalize(&replicated);
    sharded = replicated;
    mpf_set(&sharded, "optimizer.use_distributed_optimizer=true");
    gt_config_finalize(&sharded);
    sharded_graph = sharded;
    mpf_set(&sharded_graph, "model.cuda_graph_impl=local");
    mpf_set(&sharded_graph, "model.cuda_graph_scope=full_iteration");
    mpf_set(&sharded_graph, "model.cuda_graph_warmup_steps=2");
    gt_config_finalize(&sharded_graph);
    float a[STEPS], b[STEPS], g[STEPS];
    run_losses(&replicated, C, STEPS, a);
    run_losses(&sharded, C, STEPS, b);
    run_losses(&sharded_graph, C, STEPS, g);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(a, g, sizeof a);
}

/* trainer after `steps` steps of configuration c over comm (the caller destroys it) */
static gt_trainer *trained(const gt_config *c, gt_comm *comm, int steps) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create_dp(&t, c, comm, &err)) fail_msg("rank %d: create: %s", RANK, err.msg);
    for (int i = 0; i < steps; i++) {
        gt_step_stats s;
        if (gt_trainer_step(t, &s, &err)) fail_msg("rank %d: step %d: %s", RANK, i + 1, err.msg);
    }
    return t;
}

/* rank r's share of n elements split over SIZE ranks: the first n % SIZE own one more */
static size_t share(size_t n, int r) {
    return n / (size_t)SIZE + ((size_t)r < n % (size_t)SIZE ? 1 : 0);
}

/* Megatron's saving: each rank allocates only its shard of every bucket of the master weights
 * and both moments (4 + 4 + 4 bytes a parameter on the CPU backend, 4 + 2 + 2 with bf16
 * moments), while the replicated optimizer holds every parameter's */
static void test_the_distributed_optimizer_allocates_only_this_ranks_shards(void **state) {
    (void)state;
    enum { BUCKET = 1000 };
    for (int bf16 = 0; bf16 < 2; bf16++) {
        gt_config replicated, sharded;
        dp_config(&replicated);
        mpf_set(&replicated, "ddp.bucket_size=1000");
        if (bf16) mpf_set(&replicated, "optimizer.exp_avg_dtype=bf16");
        if (bf16) mpf_set(&replicated, "optimizer.exp_avg_sq_dtype=bf16");
        gt_config_finalize(&replicated);
        sharded = replicated;
        mpf_set(&sharded, "optimizer.use_distributed_optimizer=true");
        gt_config_finalize(&sharded);
        gt_trainer *r = trained(&replicated, C, 0), *d = trained(&sharded, C, 0);
        size_t n = gt_model_get_info(gt_trainer_model(r))->n_params, per = bf16 ? 8 : 12;
        size_t mine = 0;
        for (size_t end = n; end > 0; end -= end < BUCKET ? end : BUCKET) /* the buckets */
            mine += share(end < BUCKET ? end : BUCKET, RANK);
        assert_true(n > 2 * BUCKET);
        assert_int_equal(gt_trainer_opt_state_bytes(r), n * per);
        assert_int_equal(gt_trainer_opt_state_bytes(d), mine * per);
        assert_true(mine < n);
        gt_trainer_destroy(d);
        gt_trainer_destroy(r);
    }
}

/* the whole state gathered from the ranks' compact shards is the replicated optimizer's, bit
 * for bit, read on every rank (fp32 and bf16 moments) */
static void test_the_gathered_shards_are_the_replicated_state_bitwise(void **state) {
    (void)state;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        gt_config replicated, sharded;
        dp_config(&replicated);
        mpf_set(&replicated, "ddp.bucket_size=1000");
        if (bf16) mpf_set(&replicated, "optimizer.exp_avg_dtype=bf16");
        gt_config_finalize(&replicated);
        sharded = replicated;
        mpf_set(&sharded, "optimizer.use_distributed_optimizer=true");
        gt_config_finalize(&sharded);
        gt_trainer *r = trained(&replicated, C, 3), *d = trained(&sharded, C, 3);
        size_t n = gt_model_get_info(gt_trainer_model(r))->n_params;
        float *a = calloc(3 * n, sizeof *a), *b = calloc(3 * n, sizeof *b);
        gt_error err = {0};
        assert_int_equal(gt_trainer_read_master(r, a, &err), GT_OK);
        assert_int_equal(gt_trainer_read_moments(r, a + n, a + 2 * n, &err), GT_OK);
        assert_int_equal(gt_trainer_read_master(d, b, &err), GT_OK); /* gathers */
        assert_int_equal(gt_trainer_read_moments(d, b + n, b + 2 * n, &err), GT_OK);
        assert_memory_equal(a, b, 3 * n * sizeof *a);
        mpf_assert_ranks_agree(b, 3 * n * sizeof *b);
        free(a);
        free(b);
        gt_trainer_destroy(d);
        gt_trainer_destroy(r);
    }
}

/* the graph modes the overlap must keep whole: eager, unit graphs (collectives between them),
 * one full-iteration graph (the fork and join captured as event nodes) */
static void set_graph_mode(gt_config *c, int mode) {
    static const char *kv[3][3] = {
        {"model.cuda_graph_impl=none", NULL, NULL},
        {"model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=attn",
         "model.cuda_graph_warmup_steps=1"},
        {"model.cuda_graph_impl=local", "model.cuda_graph_scope=full_iteration",
         "model.cuda_graph_warmup_steps=2"}};
    for (int i = 0; i < 3 && kv[mode][i]; i++)
        mpf_set(c, kv[mode][i]);
}

/* ddp.overlap_grad_reduce: each bucket reduced as the backward ends it is the same sum as all
 * of them after it; two layers in small buckets (several per layer, some spanning two), with
 * and without dropout (which decides the weight gradients the backward defers to its end) */
static void test_overlapped_reduction_gives_the_bits_of_overlap_off(void **state) {
    (void)state;
    for (int library = 0; library < 2; library++)
        for (int dropout = 0; dropout < 2; dropout++)
            for (int mode = 0; mode < 3; mode++) {
                gt_config off, on;
                mpf_small_model(&off, 2);
                mpf_set(&off, dropout ? "model.hidden_dropout=0.1" : "model.hidden_dropout=0");
                mpf_set(&off,
                        library ? "runtime.deterministic=false" : "runtime.deterministic=true");
                mpf_set(&off, "ddp.bucket_size=1000");
                mpf_set(&off, "train.train_iters=20");
                set_graph_mode(&off, mode);
                on = off;
                mpf_set(&on, "ddp.overlap_grad_reduce=true");
                gt_config_finalize(&off);
                gt_config_finalize(&on);
                float a[STEPS], b[STEPS];
                run_losses(&off, C, STEPS, a);
                run_losses(&on, C, STEPS, b);
                // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
                if (memcmp(a, b, sizeof a))
                    fail_msg("rank %d: %s order, dropout %d, graph mode %d: overlap changed the "
                             "losses (step 5: %.9g vs %.9g)",
                             RANK, library ? "library" : "rank", dropout, mode, (double)a[4],
                             (double)b[4]);
                assert_true(a[0] != a[STEPS - 1]);
            }
}

/* ddp.overlap_param_gather: each bucket's all-gather while the next buckets step, the bits of
 * the gather after all of them; the losses of the following steps read the gathered weights */
static void test_overlapped_param_gather_gives_the_bits_of_the_plain_gather(void **state) {
    (void)state;
    for (int mode = 0; mode < 3; mode += 2) {
        gt_config plain, overlapped;
        mpf_small_model(&plain, 2);
        mpf_set(&plain, "ddp.bucket_size=1000");
        mpf_set(&plain, "train.train_iters=20");
        mpf_set(&plain, "optimizer.use_distributed_optimizer=true");
        set_graph_mode(&plain, mode);
        overlapped = plain;
        mpf_set(&overlapped, "ddp.overlap_grad_reduce=true");
        mpf_set(&overlapped, "ddp.overlap_param_gather=true");
        gt_config_finalize(&plain);
        gt_config_finalize(&overlapped);
        float a[STEPS], b[STEPS];
        run_losses(&plain, C, STEPS, a);
        run_losses(&overlapped, C, STEPS, b);
        assert_memory_equal(a, b, sizeof a);
        mpf_assert_ranks_agree(b, sizeof b);
    }
}

static void test_a_distributed_optimizer_saves_only_after_its_shards_are_gathered(void **state) {
    (void)state;
    gt_config c;
    dp_config(&c);
    mpf_set(&c, "optimizer.use_distributed_optimizer=true");
    gt_config_finalize(&c);
    gt_trainer *t = NULL;
    gt_error err = {0};
    gt_step_stats s;
    if (gt_trainer_create_dp(&t, &c, C, &err) || gt_trainer_step(t, &s, &err))
        fail_msg("rank %d: %s", RANK, err.msg);
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    assert_int_equal(gt_trainer_save(t, dir, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "gt_trainer_dp_gather_state"));
    assert_int_equal(gt_trainer_dp_gather_state(t, &err), GT_OK);
    assert_int_equal(gt_trainer_save(t, dir, &err), GT_OK);
    gt_trainer_destroy(t);
}

static void
test_a_global_batch_that_does_not_divide_over_the_ranks_is_refused_by_key(void **state) {
    (void)state;
    gt_config c;
    dp_config(&c);
    mpf_set(&c, "train.global_batch_size=6"); /* 3 micro-batches */
    gt_config_finalize(&c);
    gt_trainer *t = NULL;
    gt_error err = {0};
    int rc = gt_trainer_create_dp(&t, &c, C, &err); /* 3 micro-batches over 2 or 4 ranks */
    assert_int_equal(rc, GT_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err.msg, "train.global_batch_size=6"));
    assert_non_null(strstr(err.msg, "train.micro_batch_size=2"));
}

static void test_a_configuration_naming_another_world_size_is_refused(void **state) {
    (void)state;
    gt_config c;
    dp_config(&c);
    char kv[64];
    snprintf(kv, sizeof kv, "runtime.num_gpus=%d", SIZE + 1);
    mpf_set(&c, kv);
    gt_config_finalize(&c);
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create_dp(&t, &c, C, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, kv));
    /* and one process that names several ranks */
    snprintf(kv, sizeof kv, "runtime.num_gpus=%d", SIZE);
    mpf_set(&c, kv);
    gt_config_finalize(&c);
    assert_int_equal(gt_trainer_create_dp(&t, &c, NULL, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "mpirun -np N"));
    assert_null(t);
}

/* rank 0's fresh temporary folder, known to every rank */
static void shared_tmpdir(char *dir, size_t n) {
    memset(dir, 0, n);
    if (RANK == 0) gt_test_tmpdir(dir, n);
    gt_error err = {0};
    if (gt_comm_broadcast(C, dir, n, 0, &err)) fail_msg("%s", err.msg);
}

/* gt_train_run over comm up to step `until` (train.exit_interval: the schedule stays that of
 * train.train_iters), from and into checkpoint folder dir */
static gt_train_result train_run(const gt_config *base, gt_comm *comm, const char *dir, int until,
                                 const gt_train_run_opts *extra, int *rc_out) {
    gt_config c = *base;
    char kv[600];
    snprintf(kv, sizeof kv, "train.exit_interval=%d", until);
    mpf_set(&c, kv);
    snprintf(kv, sizeof kv, "checkpoint.save=%s", dir);
    mpf_set(&c, kv);
    snprintf(kv, sizeof kv, "checkpoint.load=%s", dir);
    mpf_set(&c, kv);
    gt_config_finalize(&c);
    FILE *sink = fopen("/dev/null", "w");
    gt_train_run_opts o = extra ? *extra : (gt_train_run_opts){0};
    o.out = sink;
    o.quiet = 1;
    o.comm = comm;
    gt_train_result res;
    gt_error err = {0};
    int rc = gt_train_run(&c, &o, &res, &err);
    fclose(sink);
    if (rc_out)
        *rc_out = rc;
    else if (rc)
        fail_msg("rank %d: %s", RANK, err.msg);
    return res;
}

/* the distributed optimizer's checkpoint holds the whole state (its shards gathered), so one
 * rank resumes it, with or without the distributed optimizer */
static void test_checkpoint_of_n_ranks_resumes_at_one_and_then_at_n_bitwise(void **state) {
    (void)state;
    gt_config c;
    dp_config(&c);
    mpf_set(&c, "optimizer.use_distributed_optimizer=true");
    mpf_set(&c, "ddp.bucket_size=1000");
    gt_config_finalize(&c);
    float whole[6];
    run_losses(&c, C, 6, whole);
    char dir[256];
    shared_tmpdir(dir, sizeof dir);
    gt_train_result r = train_run(&c, C, dir, 2, NULL, NULL); /* steps 1-2 at N ranks */
    assert_memory_equal(&r.last_loss, &whole[1], sizeof whole[1]);
    gt_error err = {0};
    if (RANK == 0) { /* steps 3-4 alone, the replicated optimizer */
        gt_config alone = c;
        mpf_set(&alone, "optimizer.use_distributed_optimizer=false");
        gt_config_finalize(&alone);
        r = train_run(&alone, ONE, dir, 4, NULL, NULL);
        assert_int_equal(r.first_step, 3);
        assert_memory_equal(&r.first_loss, &whole[2], sizeof whole[2]);
        assert_memory_equal(&r.last_loss, &whole[3], sizeof whole[3]);
    }
    assert_int_equal(gt_comm_barrier(C, &err), GT_OK);
    r = train_run(&c, C, dir, 6, NULL, NULL); /* steps 5-6 at N ranks again */
    assert_int_equal(r.first_step, 5);
    assert_memory_equal(&r.first_loss, &whole[4], sizeof whole[4]);
    assert_memory_equal(&r.last_loss, &whole[5], sizeof whole[5]);
}

/* the clock the loop reads once a step: on the last rank it raises SIGTERM's flag at step 3 */
typedef struct stop_clock {
    volatile sig_atomic_t *stop;
    int calls;
} stop_clock;

static double clock_that_stops(void *ctx) {
    stop_clock *k = ctx;
    if (RANK == SIZE - 1 && ++k->calls == 4) *k->stop = SIGTERM; /* the 1st call is the start */
    return 0;
}

static void
test_a_stop_on_one_rank_stops_every_rank_after_the_same_step_with_one_checkpoint(void **state) {
    (void)state;
    gt_config c;
    dp_config(&c);
    char dir[256];
    shared_tmpdir(dir, sizeof dir);
    volatile sig_atomic_t stop = 0;
    stop_clock k = {&stop, 0};
    gt_train_run_opts o = {.stop = &stop, .clock_ms = clock_that_stops, .clock_ctx = &k};
    int rc = GT_OK;
    gt_train_result r = train_run(&c, C, dir, 10, &o, &rc);
    assert_int_equal(rc, GT_ERR_INTERRUPTED);
    float step = (float)r.last_step;
    mpf_assert_ranks_agree(&step, sizeof step);
    assert_int_equal(r.last_step, 3);
    if (RANK == 0) {
        assert_int_equal(r.saved, 1);
        char path[400], text[64] = {0};
        snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        assert_non_null(fgets(text, sizeof text, f));
        fclose(f);
        assert_int_equal(atoi(text), 3);
    } else {
        assert_int_equal(r.saved, 0); /* rank 0 alone writes */
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_losses_at_n_ranks_equal_one_process_bitwise),
        cmocka_unit_test(test_one_process_without_reduction_agrees_within_rounding),
        cmocka_unit_test(test_rank_order_losses_repeat_run_to_run_bitwise),
        cmocka_unit_test(test_eager_scoped_and_full_iteration_are_bitwise_equal_at_n_ranks),
        cmocka_unit_test(test_small_buckets_give_the_bits_of_one_bucket),
        cmocka_unit_test(test_library_order_agrees_with_rank_order_within_rounding),
        cmocka_unit_test(test_distributed_optimizer_gives_the_bits_of_the_replicated_one),
        cmocka_unit_test(test_the_distributed_optimizer_allocates_only_this_ranks_shards),
        cmocka_unit_test(test_the_gathered_shards_are_the_replicated_state_bitwise),
        cmocka_unit_test(test_overlapped_reduction_gives_the_bits_of_overlap_off),
        cmocka_unit_test(test_overlapped_param_gather_gives_the_bits_of_the_plain_gather),
        cmocka_unit_test(test_a_distributed_optimizer_saves_only_after_its_shards_are_gathered),
        cmocka_unit_test(test_a_global_batch_that_does_not_divide_over_the_ranks_is_refused_by_key),
        cmocka_unit_test(test_a_configuration_naming_another_world_size_is_refused),
        cmocka_unit_test(test_checkpoint_of_n_ranks_resumes_at_one_and_then_at_n_bitwise),
        cmocka_unit_test(
            test_a_stop_on_one_rank_stops_every_rank_after_the_same_step_with_one_checkpoint),
    };
    return cmocka_run_group_tests(tests, mpf_group_setup, mpf_group_teardown);
}
